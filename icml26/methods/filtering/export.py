"""Exports of a filter-data classifier for users of other pipelines (datatrove / DCLM).

The hashed n-gram classifiers (``ngram``, ``dsir``) are a linear model over scikit-learn
``HashingVectorizer`` features (l2-normalised word 1-2-grams for ``ngram``); fastText's
``.bin`` holds a model over its own hashing of words and bigrams averaged into an embedding,
so the form does not carry over exactly and no ``.bin`` is written. Instead ``train`` writes
``datatrove_filter.py`` (``datatrove_step.py``, standalone: numpy, scikit-learn, safetensors)
beside ``model.safetensors``: a datatrove ``BaseFilter`` that recomputes the same scores.
"""

from __future__ import annotations

from pathlib import Path

EXPORTABLE = ("ngram", "dsir")
STEP_FILE = "datatrove_filter.py"


def write_datatrove_step(model, out: Path) -> Path:
    """Write the standalone datatrove step beside the model in ``out``; returns its path."""
    from icml26.core.output import atomic_write_text

    if model.classifier not in EXPORTABLE:
        raise ValueError(f"no datatrove step for the {model.classifier!r} classifier")
    src = (Path(__file__).with_name("datatrove_step.py")).read_text()
    return atomic_write_text(Path(out) / STEP_FILE, src)
