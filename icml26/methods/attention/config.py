"""``icml26 muse`` settings: the ``Config`` of every subcommand (bench / eval / train) and the
method names; ``Config.settings(variant)`` gives the attention's ``MuseSettings``; ``preflight``
checks the inputs a Config names (text, model, layer) before the config record.

Torch-free (only ``core.settings``): ``--set`` values, ranges and size limits are checked before
the method's heavy imports. The attention settings repeat ``MuseSettings``' own checks here (the
torch twin in ``icml26.ops._ref.muse`` keeps them for library callers)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from icml26.core.data import text as T
from icml26.core.data.lm import model_path
from icml26.core.errors import InputError
from icml26.core.settings import Work, setting

METHODS = ("sdpa", "muse", "muse-v1", "muse-noretrieval", "block")
SPLITS = ("train", "val", "test")
RUN = 16  # documents per run of the split rule
PERIOD = 20  # runs per period: 18 train, 1 validation, 1 test
MAX_CONTEXT_TOKENS = 262144  # the built-in test split holds ~750k tokens; exact attention beyond does not finish
MAX_TRAIN_FLOPS = 1e15  # about 3 hours at 100 GFLOP/s

EVAL_SPLITS = ("auto", "test", "val", "all")
Method = Literal["sdpa", "muse", "muse-v1", "muse-noretrieval", "block"]


def _pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class Config:
    """Settings of every ``icml26 muse`` subcommand (a recipe's ``config:`` / ``--set``)."""

    methods: tuple[Method, ...] = setting(
        METHODS,
        "attention methods, in order: sdpa (exact), muse, muse-v1 / muse-noretrieval (ablations), block (MoBA)",
    )
    context_tokens: tuple[int, ...] = setting(
        (4096,),
        "context lengths N: bench / eval give one result per length, train uses the first",
        ge=2,
        sized=MAX_CONTEXT_TOKENS,
    )
    # MuSe (per head, per block)
    block_tokens: int = setting(
        256,
        "MuSe block size B: exact causal attention inside a block (a B x B score tile per head), clusters per block",
        ge=2,
        sized=2**14,
    )
    query_clusters: int = setting(8, "query clusters per block and head (a power of two dividing block_tokens)")
    key_clusters: int = setting(8, "key clusters per block and head (a power of two dividing block_tokens)")
    lloyd_iters: int = setting(3, "Lloyd steps per balanced 2-means split (0 = contiguous clusters)", ge=0, sized=1000)
    retrieved_clusters: int = setting(
        16,
        "r: past key clusters each query attends exactly (block: past key blocks); 0 = far field only",
        unit="clusters",
        ge=0,
        sized=1024,
    )
    detach_query_centroids: bool = setting(
        True, "train: no gradient through the query centroids (false runs the torch twin, not the C++ kernel)"
    )
    # data
    text: str | None = setting(
        None, "a UTF-8 text file instead of the built-in python-docs + GCIDE (bench / eval read it whole)"
    )
    model: str = setting(
        "llama", "bench / eval: llama (SmolLM2-135M, built in), a local LLaMA-architecture HF folder or a .gguf file"
    )
    # bench
    layer: int = setting(2, "bench: q/k/v of this decoder layer (0-based; the layers before it run exact SDPA)", ge=0)
    repeats: int = setting(3, "bench: timed runs per method (the median is reported)", ge=1, sized=10**4)
    threads: int = setting(1, "torch threads of every method (bench timings, eval, train)", ge=1, sized=1024)
    # eval
    windows: int = setting(2, "eval: test windows per context length (bench reads one)", ge=1, sized=10**4)
    eval_split: Literal["auto", "test", "val", "all"] = setting(
        "auto",
        "windows of bench / eval: auto = all of --text, else the built-in test split; val to choose settings "
        "without the test windows",
    )
    # train
    train_steps: int = setting(200, "train: optimizer steps per method", unit="steps", ge=1, sized=10**6)
    d_model: int = setting(128, "train: hidden size of the small LLaMA-style model", ge=1, sized=8192)
    n_layers: int = setting(2, "train: decoder layers", ge=1, sized=256)
    n_heads: int = setting(4, "train: attention heads (d_model / n_heads even, for RoPE)", ge=1)
    n_kv_heads: int = setting(2, "train: key / value heads (grouped-query attention; divides n_heads)", ge=1)
    lr: float = setting(3e-3, "train: AdamW peak learning rate (betas 0.9 / 0.95, weight decay 0.1)", gt=0)
    warmup_steps: int = setting(20, "train: linear learning-rate warm-up", ge=0)
    val_windows: int = setting(4, "train: validation windows of val_loss", ge=1, sized=10**4)
    checkpoint_every: int = setting(
        25, "train: steps between checkpoints under --out (resume points)", unit="steps", ge=1
    )
    log_every: int = setting(5, "train: steps between `step` records", unit="steps", ge=1)

    def __post_init__(self):
        for mth in self.methods:  # Literal: a recipe / --set is checked on reading; this is for Config(...)
            if mth not in METHODS:
                raise ValueError(f"methods: unknown method {mth!r}; valid: {', '.join(METHODS)}")
        if not self.methods:
            raise ValueError("methods must not be empty")
        if not self.context_tokens:
            raise ValueError("context_tokens must not be empty")
        for n in self.context_tokens:
            if not isinstance(n, int):
                raise ValueError(f"context_tokens must be integers >= 2, got {n!r}")
        if isinstance(self.block_tokens, int) and self.block_tokens >= 2:  # else its range speaks
            for name in ("query_clusters", "key_clusters"):
                c = getattr(self, name)
                if not _pow2(c) or self.block_tokens % c:
                    raise ValueError(
                        f"{name} must be a power of two dividing block_tokens={self.block_tokens}, got {c!r}"
                    )
        if self.eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {', '.join(EVAL_SPLITS)}, got {self.eval_split!r}")
        if self.eval_split == "all" and self.text is None:
            raise ValueError("eval_split=all needs --text (the built-in corpus keeps its train/val/test split)")
        if self.n_heads >= 1 and self.n_kv_heads >= 1:  # else their ranges speak
            if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or (self.d_model // self.n_heads) % 2:
                raise ValueError(
                    f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size, "
                    f"and n_heads into n_kv_heads={self.n_kv_heads} groups"
                )

    def work(self) -> list[Work]:
        """train: about 6 x parameters x tokens flops, against MAX_TRAIN_FLOPS."""
        params = 12 * self.n_layers * self.d_model**2 + 256 * self.d_model
        flops = 6.0 * params * self.train_steps * self.context_tokens[0]
        return [
            Work(
                flops,
                MAX_TRAIN_FLOPS,
                "flops of training",
                "train_steps, d_model, n_layers or context_tokens",
                f"6 x {params} parameters x {self.train_steps} steps x {self.context_tokens[0]} tokens",
            )
        ]

    @property
    def split(self) -> str:
        """The split bench / eval read: eval_split, with "auto" resolved ("all" of --text, else "test")."""
        if self.eval_split == "auto":
            return "all" if self.text is not None else "test"
        return self.eval_split

    def settings(self, variant: str = "muse"):
        """The attention's ``MuseSettings`` for ``variant`` (sdpa: muse's; torch loads here, at run time)."""
        from icml26.ops.muse import MuseSettings

        return MuseSettings(
            block_tokens=self.block_tokens,
            query_clusters=self.query_clusters,
            key_clusters=self.key_clusters,
            lloyd_iters=self.lloyd_iters,
            retrieved_clusters=self.retrieved_clusters,
            variant="muse" if variant == "sdpa" else variant,
            detach_query_centroids=self.detach_query_centroids,
        )


def require_text(cfg: Config) -> None:
    """Data checks before the config record: the user's file, or the two Debian corpora."""
    if cfg.text is not None:
        T.read_text_file(cfg.text)
    else:
        T.require_corpus("python-docs")
        T.require_corpus("gcide")


def preflight(cfg: Config, command: str) -> None:
    """Every input check of a subcommand before its config record (torch-free)."""
    require_text(cfg)  # context_tokens' limit (MAX_CONTEXT_TOKENS) is declared on the field
    if command in ("bench", "eval"):
        model_path(cfg.model)
        try:
            n_layers = json.loads((model_path(cfg.model) / "config.json").read_text()).get("num_hidden_layers")
        except (OSError, ValueError):
            n_layers = None
        if command == "bench" and n_layers is not None and cfg.layer >= n_layers:
            raise InputError(f"layer {cfg.layer} is out of range: the model has {n_layers} layers")
