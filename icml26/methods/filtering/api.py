"""What the filter-data command calls in this package: one namespace per subcommand with
settings (``corpus``, ``classifiers``, ``analysis``, ``proxy``: their Config classes import no
torch), and the streaming filters of ``score`` / ``select``.

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.filtering import analysis, classifiers, corpus, proxy
from icml26.methods.filtering.classifiers import MODEL_FILE, load_model
from icml26.methods.filtering.cqf import range_text, score_stream, select_stream
from icml26.methods.filtering.jsonl import DocumentWriter
from icml26.methods.filtering.lines import check_score_options, check_select_options, select_line_stream

__all__ = [
    "MODEL_FILE",
    "DocumentWriter",
    "analysis",
    "check_score_options",
    "check_select_options",
    "classifiers",
    "corpus",
    "load_model",
    "proxy",
    "range_text",
    "score_stream",
    "select_line_stream",
    "select_stream",
]
