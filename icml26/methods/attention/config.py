"""``icml26 muse`` settings: the ``Config`` of every subcommand (bench / eval / train) and the
method names; ``Config.settings(variant)`` gives the attention's ``MuseSettings``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from icml26.methods.attention import muse as M

METHODS = ("sdpa", "muse", "muse-v1", "muse-noretrieval", "block")
SPLITS = ("train", "val", "test")
RUN = 16  # documents per run of the split rule
PERIOD = 20  # runs per period: 18 train, 1 validation, 1 test


@dataclass(frozen=True)
class Config:
    """Settings of every ``icml26 muse`` subcommand (a recipe's ``config:`` / ``--set``)."""

    methods: tuple[str, ...] = METHODS
    context_tokens: tuple[int, ...] = (4096,)
    # MuSe (per head, per block)
    block_tokens: int = field(default=256, metadata={"sized": 2**20})  # MuSe block size (keys per block)
    query_clusters: int = 8
    key_clusters: int = 8
    lloyd_iters: int = 3
    retrieved_clusters: int = 16
    detach_query_centroids: bool = True
    # data
    text: str | None = None  # a UTF-8 file instead of the built-in corpora
    model: str = "llama"  # bench / eval: SmolLM2-135M, or a local HF folder / .gguf
    # bench
    layer: int = 2  # q/k/v of this decoder layer (0-based)
    repeats: int = 3
    threads: int = 1
    # eval
    windows: int = 2
    # eval / bench windows: "auto" = "all" of your --text file (it is evaluation text), else the built-in
    # corpus' "test" split; "val" to choose settings without the test windows; "test" / "all" explicitly
    eval_split: str = "auto"
    # train
    train_steps: int = 200
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    lr: float = 3e-3
    warmup_steps: int = 20
    val_windows: int = 4
    checkpoint_every: int = 25
    log_every: int = 5

    def __post_init__(self):
        for mth in self.methods:
            if mth not in METHODS:
                raise ValueError(f"methods: unknown method {mth!r}; valid: {', '.join(METHODS)}")
        if not self.methods:
            raise ValueError("methods must not be empty")
        if not self.context_tokens:
            raise ValueError("context_tokens must not be empty")
        for n in self.context_tokens:
            if not isinstance(n, int) or n < 2:
                raise ValueError(f"context_tokens must be integers >= 2, got {n!r}")
        self.settings()  # the attention settings' own checks (ValueError)
        for name in (
            "repeats",
            "threads",
            "windows",
            "train_steps",
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "val_windows",
            "checkpoint_every",
            "log_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.layer < 0:
            raise ValueError(f"layer must be >= 0, got {self.layer}")
        if self.eval_split not in ("auto", "test", "val", "all"):
            raise ValueError(f"eval_split must be 'auto', 'test', 'val' or 'all', got {self.eval_split!r}")
        if self.eval_split == "all" and self.text is None:
            raise ValueError("eval_split=all needs --text (the built-in corpus keeps its train/val/test split)")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size, "
                f"and n_heads into n_kv_heads={self.n_kv_heads} groups"
            )
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")

    @property
    def split(self) -> str:
        """The split bench / eval read: eval_split, with "auto" resolved ("all" of --text, else "test")."""
        if self.eval_split == "auto":
            return "all" if self.text is not None else "test"
        return self.eval_split

    def settings(self, variant: str = "muse") -> M.MuseSettings:
        return M.MuseSettings(
            block_tokens=self.block_tokens,
            query_clusters=self.query_clusters,
            key_clusters=self.key_clusters,
            lloyd_iters=self.lloyd_iters,
            retrieved_clusters=self.retrieved_clusters,
            variant="muse" if variant == "sdpa" else variant,
            detach_query_centroids=self.detach_query_centroids,
        )
