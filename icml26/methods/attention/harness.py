"""``icml26 muse`` harness: isolated-attention bench, drop-in perplexity, small-model pretraining.

Protocol (docs/muse.md, "Protocol and data"; the paper's tables are not public):
  bench  post-RoPE q/k/v of one layer of SmolLM2-135M (layers before it run exactly) on a window
         of real test text; every method's causal attention over all heads is timed (median of
         ``repeats``, ``threads`` torch threads for every method) and compared with SDPA:
         rel_squared_error = ||O - O_exact||^2 / ||O_exact||^2, sparsity as in ``muse.sparsity``.
  eval   perplexity of SmolLM2-135M (or a local LLaMA-architecture folder) with
         ``attn_implementation="muse"`` on ``windows`` non-overlapping windows of test text.
  train  a small LLaMA-style model (byte tokens, vocabulary 256) pretrained from scratch per
         method with the same seed, data order and steps; val loss on validation windows.
Text: python3.11-doc reST sources then GCIDE, split by ``split_of``; ``--text FILE`` is read whole
by bench / eval (``eval_split`` auto = all; a ``data`` record says which tokens) and split by the
rule for train. ``split_of``: documents (section-sized chunks, corpus order) in runs of 16; run g goes to
test if g % 20 == 19, to validation if g % 20 == 18, else to train; disjoint by construction.
RECON: the choice of layer, window counts, model sizes and the split rule are this project's.
"""

from icml26.methods.attention.bench import (  # noqa: F401  (re-exported: the command's entry points)
    _Captured,
    _timed,
    bench_summary,
    bench_tensors,
    capture_qkv,
    run_bench,
)
from icml26.methods.attention.config import (  # noqa: F401
    MAX_CONTEXT_TOKENS,
    METHODS,
    PERIOD,
    RUN,
    SPLITS,
    Config,
    preflight,
    require_text,
)
from icml26.methods.attention.data import (  # noqa: F401
    _documents,
    _windows,
    eval_windows,
    split_of,
    split_text,
    token_windows,
)
from icml26.methods.attention.evaluate import run_eval  # noqa: F401
from icml26.methods.attention.train import _dist, _loss, _tiny_llama, run_train  # noqa: F401
