"""The ``evict-kv`` run's settings (``Config``: the run options and every press option) and the
checks made before a run writes anything (``preflight``). Torch-free."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Literal

from icml26.core.settings import Work, setting
from icml26.methods.kvcache import spec as _spec
from icml26.methods.kvcache.options import PressOptions, check_options

DEFAULT_METHODS = ("capkv", "capkv-qa", "streaming", "snapkv", "h2o", "tova", "knorm", "random", "expected-attention")
PRESS_FIELDS = tuple(f.name for f in fields(PressOptions))  # the press options a run passes to every policy
MAX_TOKEN_PASSES = 1e10  # work limit: token positions through the model (prefills, decoding, scoring passes)


@dataclass
class _RunOptions:
    model: str = "llama"  # built-in (llama = SmolLM2-135M) or a local HF folder / .gguf
    methods: tuple[str, ...] | None = setting(
        None,
        "the policies run beside `full` (always run); default (None): every policy of the mode: prefill "
        f"{', '.join(DEFAULT_METHODS)}; decode {', '.join(_spec.DECODE_METHODS)} (the config record lists them)",
    )
    compression_ratios: tuple[float, ...] = setting(
        (0.25, 0.5, 0.75, 0.9), "mode prefill: fractions of the prompt's KV entries evicted, each in (0, 1)"
    )
    context_tokens: tuple[int, ...] = setting((1024,), "haystack lengths (tokens)", sized=2**20)
    needle_depths: tuple[float, ...] = setting(
        (0.1, 0.3, 0.5, 0.7, 0.9), "where the needle sits in the haystack, as fractions of its length, in [0, 1]"
    )
    samples: int = setting(1, "haystacks per (length, depth), from different offsets", sized=10**5)
    corpus: str = "python-docs"  # python-docs | kjv | gcide | fortunes | wordnet
    haystack: str | None = None  # a user's own UTF-8 text file instead of the corpus
    continuation_tokens: int = setting(
        64, "real continuation scored for KL / top-1 / perplexity (mode prefill)", sized=2**16
    )
    answer_tokens: int = setting(8, "greedy tokens decoded for the needle answer (mode prefill)", sized=4096)
    question_aware: bool = setting(
        True,
        "the question is in the compressed prompt (SnapKV / LongBench setting); false: compress the context "
        "alone, ask afterwards (kvpress' default)",
    )
    threads: int = setting(0, "torch CPU threads (0 = torch's default)", ge=0, sized=4096)
    mode: Literal["prefill", "decode"] = (
        "prefill"  # prefill (compress the prompt) | decode (keep the cache at a budget while generating; decode.py)
    )
    decoding_budgets: tuple[int, ...] = setting(
        (256, 512), "mode decode: cache budgets (tokens per KV head)", unit="tokens", sized=2**20
    )
    decoding_interval_tokens: int = setting(16, ge=1)  # mode decode: re-compress every this many generated tokens
    new_tokens: int = setting(
        512, "mode decode: tokens generated (greedy, full cache) and teacher-forced per policy", sized=2**20
    )
    timed_tokens: int = 32  # mode decode: greedy steps decoded with the compressed cache (answer span, ms/token)


@dataclass
class Config(PressOptions, _RunOptions):
    """An ``evict-kv`` run: the model, the policies and ratios, the samples and the evaluation
    (``_RunOptions``, listed first), and the press options every policy uses
    (``options.PressOptions``: sinks, window, CapKV's settings, ...). Torch-free: built and
    checked (ranges, ``sized`` limits, the ``work()`` cost model) before the run imports torch.
    ``methods`` None means the mode's policies; the built Config holds them, so its record
    lists what ran."""

    def __post_init__(self) -> None:
        if self.methods is None:  # the mode's policies, written into the config (and its record)
            self.methods = _spec.DECODE_METHODS if self.mode == "decode" else DEFAULT_METHODS
        # a policy, ratio or length named twice runs once (repeats would count the same samples twice)
        self.methods, self.compression_ratios, self.context_tokens = (
            tuple(dict.fromkeys(v)) for v in (self.methods, self.compression_ratios, self.context_tokens)
        )
        if not self.methods:
            raise ValueError("methods: give at least one")
        for m in self.methods:
            _spec.check_method(m, PRESS_FIELDS)
        bases = {_spec.parse_method(m)[0] for m in self.methods}
        self._resolve_defaults(bases)
        if self.question_share not in (None, 0, 0.0) and "capkv-qa" not in bases:
            raise ValueError(
                f"question_share={self.question_share} sets capkv-qa's retrieval channel, and no capkv-qa runs; "
                "capkv is the paper's single-channel method (question_share 0): add --method capkv-qa"
            )
        for r in self.compression_ratios:
            if not (isinstance(r, (int, float)) and 0.0 < r < 1.0):
                raise ValueError(f"compression_ratio must be in (0, 1), got {r!r}")
        if not self.compression_ratios:
            raise ValueError("compression_ratios: give at least one")
        for n in self.context_tokens:
            if n < 128:
                raise ValueError(f"context_tokens must be >= 128, got {n}")
        if not self.context_tokens:
            raise ValueError("context_tokens: give at least one")
        for d in self.needle_depths:
            if not 0.0 <= d <= 1.0:
                raise ValueError(f"needle depth must be in [0, 1], got {d}")
        if not self.needle_depths:
            raise ValueError("needle_depths: give at least one")
        if self.samples < 1 or self.continuation_tokens < 1 or self.answer_tokens < 1:
            raise ValueError("samples, continuation_tokens and answer_tokens must be >= 1")
        if self.haystack is not None:
            haystack_text(self.haystack)  # a directory, a missing, empty or non-UTF-8 file fails here
        else:
            from icml26.core.data.text import CORPORA

            if self.corpus not in CORPORA:
                raise ValueError(
                    f"corpus: unknown {self.corpus!r}; built-ins: {', '.join(CORPORA)} (or --haystack FILE)"
                )
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.mode not in ("prefill", "decode"):
            raise ValueError(f"mode must be prefill or decode, got {self.mode!r}")
        if self.mode == "decode":
            self._check_decode()
        else:
            self._check_prefill_budget()
        for m in self.methods:  # the press options each policy runs with (torch-free: options.check_options)
            base, kw = _spec.press_kwargs(m, self.press_kwargs())
            if base != "full" and not base.startswith("kvpress:"):
                check_options(PressOptions(**kw), base)

    def _check_decode(self) -> None:
        """Mode decode: its policies, budgets, interval and lengths."""
        _spec.check_decode_methods(self.methods)
        self.decoding_budgets = tuple(dict.fromkeys(self.decoding_budgets))
        if not self.decoding_budgets:
            raise ValueError("decoding_budgets: give at least one")
        for b in self.decoding_budgets:
            if not (isinstance(b, int) and b >= 8):
                raise ValueError(f"decoding budget must be an integer >= 8, got {b!r}")
        forced, b = self.sink_tokens + self.window_tokens, min(self.decoding_budgets)
        if forced >= b:
            raise ValueError(_forced_msg(self.sink_tokens, self.window_tokens, b, f"decoding budget {b}"))
        if self.decoding_interval_tokens < 1:
            raise ValueError(f"decoding_interval_tokens must be >= 1, got {self.decoding_interval_tokens}")
        if self.new_tokens < 1 or not 1 <= self.timed_tokens <= self.new_tokens:
            raise ValueError(
                f"new_tokens must be >= 1 and timed_tokens in [1, new_tokens], got {self.new_tokens}, "
                f"{self.timed_tokens}"
            )
        if self.head_budget == "adaptive":
            raise ValueError(
                "head_budget=adaptive applies to mode prefill (decoding-time compression keeps uniform budgets)"
            )

    def _resolve_defaults(self, bases: set) -> None:
        """The effective value of a setting whose unset value stands for another (so the config
        record and ``--set help`` show what runs): ``question_share`` None -> 0.4 when capkv-qa
        runs, ``stat_window`` 0 -> window_tokens, ``past_tokens`` 0 -> stat_tokens (unless a
        ``<method>@`` spec overrides the setting it stands for: then each policy resolves its own)."""
        from icml26.methods.kvcache.options import QUESTION_SHARE

        if self.question_share is None and "capkv-qa" in bases:
            self.question_share = QUESTION_SHARE
        over = {k for m in self.methods for k in _spec.parse_method(m)[1]}
        if self.stat_window == 0 and "window_tokens" not in over:
            self.stat_window = self.window_tokens
        if self.past_tokens == 0 and "stat_tokens" not in over:
            self.past_tokens = self.stat_tokens

    def _check_prefill_budget(self) -> None:
        """The sinks and the recent window leave room to choose at the smallest kept-token budget
        (shortest context at the largest ratio; kvpress' rule ``selection.n_kept``): else every
        policy keeps only them (StreamingLLM) and the run compares nothing."""
        n, r = min(self.context_tokens), max(self.compression_ratios)
        kept = max(1, int(n * (1.0 - r)))
        if self.sink_tokens + self.window_tokens >= kept:
            raise ValueError(
                _forced_msg(self.sink_tokens, self.window_tokens, kept, f"context_tokens {n} at compression_ratio {r}")
            )

    def token_passes(self) -> float:
        """The run's cost model: token positions passed through the model, scoring passes counted
        as one position per cached token. Prefill, per haystack of L tokens: its prefills (2 with
        ``question_aware``), then per (method, ratio) and for ``full``: the compression of each
        prefill's cache, the answer's greedy steps and the continuation. Decode, per haystack: the
        prompt, the full cache's generation and its teacher-forced reference, then per (method,
        budget): two prompt compressions, the teacher-forced generation, the re-compressions
        (each over budget + interval entries) and the timed greedy steps."""
        per_length = self.samples * len(self.needle_depths)
        total = 0.0
        for n in self.context_tokens:
            L = n + 64  # + needle and question
            if self.mode == "decode":
                k = len(self.methods) * len(self.decoding_budgets)
                recompress = sum(
                    (self.new_tokens / self.decoding_interval_tokens) * (b + self.decoding_interval_tokens)
                    for b in self.decoding_budgets
                ) / len(self.decoding_budgets)
                per = L + 2 * self.new_tokens + k * (2 * L + self.new_tokens + recompress + 2 * self.timed_tokens)
            else:
                k = 1 + len(self.methods) * len(self.compression_ratios)
                prefills = 2 if self.question_aware else 1
                per = prefills * L + k * (prefills * L + self.answer_tokens + self.continuation_tokens)
            total += per_length * per
        return total

    def work(self) -> list[Work]:
        """``token_passes`` against ``MAX_TOKEN_PASSES`` (the 60-haystack 1k prefill benchmark of
        docs/evict-kv.md is about 4e6)."""
        what = "ratios" if self.mode == "prefill" else "decoding_budgets or new_tokens"
        return [
            Work(
                self.token_passes(),
                MAX_TOKEN_PASSES,
                "token positions through the model",
                f"samples, needle_depths, context_tokens, methods or {what}",
                f"{self.samples * len(self.needle_depths) * len(self.context_tokens)} haystacks x "
                f"{len(self.methods)} methods",
                "pass",
            )
        ]

    def press_kwargs(self) -> dict:
        return {k: getattr(self, k) for k in PRESS_FIELDS}


# the settings one mode reads and the other does not (a --set of one in the other mode is refused)
MODE_ONLY = {
    "compression_ratios": "prefill",
    "answer_tokens": "prefill",
    "question_aware": "prefill",
    "head_floor": "prefill",
    "decoding_budgets": "decode",
    "decoding_interval_tokens": "decode",
    "new_tokens": "decode",
    "timed_tokens": "decode",
}


def check_mode_settings(cfg: Config, given) -> None:
    """InputError naming the first setting in ``given`` (``--set`` keys) that ``cfg.mode`` does not read."""
    for k in given:
        if MODE_ONLY.get(k, cfg.mode) != cfg.mode:
            from icml26.core.errors import InputError

            raise InputError(
                f"--set {k}: mode {cfg.mode} does not read it (mode {MODE_ONLY[k]} only); drop it or add "
                f"--mode {MODE_ONLY[k]}"
            )


def _forced_msg(sink: int, window: int, kept: int, where: str) -> str:
    return (
        f"sink_tokens + window_tokens = {sink} + {window} = {sink + window} >= {kept}, the smallest kept-token "
        f"budget ({where}): every policy would keep only the sinks and the recent window (StreamingLLM); "
        f"lower window_tokens or sink_tokens"
    )


def haystack_text(path: str) -> str:
    """A ``--haystack`` file's text (InputError for a folder, a missing, empty or non-UTF-8
    file), read once per process while the file is unchanged: the config check, the preflight
    and the samples share the read."""
    import os

    from icml26.core.data.text import read_text_file

    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return read_text_file(path)  # raises the InputError naming what is wrong
    return _read_cached(path, stamp)


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, stamp: int) -> str:
    from icml26.core.data.text import read_text_file

    return read_text_file(path)


def check_positions(cfg: Config, limit: int | None) -> None:
    """InputError when the longest sample (context + question + answer + continuation) does not
    fit in the model's ``max_position_embeddings`` (``limit``; None = unknown, no check)."""
    extra = cfg.new_tokens if cfg.mode == "decode" else cfg.continuation_tokens + cfg.answer_tokens
    longest = max(cfg.context_tokens) + extra + 64  # + question and needle slack
    if limit and longest > limit:
        from icml26.core.errors import InputError

        what = "new_tokens" if cfg.mode == "decode" else "continuation and answer"
        room = limit - longest + max(cfg.context_tokens)
        fix = (
            f"use context_tokens <= {room}"
            if room >= 1
            else f"{what} ({extra}) alone leave no room for a context: use "
            f"{'new_tokens' if cfg.mode == 'decode' else 'continuation_tokens + answer_tokens'} "
            f"<= {limit - 64 - 1}"
        )
        raise InputError(
            f"context_tokens {max(cfg.context_tokens)} + {what} need about {longest} positions, "
            f"more than the model's max_position_embeddings {limit}: {fix}"
        )


def longest_sequence(cfg: Config) -> int:
    """The most positions a sample reaches (context + needle slack + question + what follows it)."""
    extra = cfg.new_tokens if cfg.mode == "decode" else cfg.continuation_tokens + cfg.answer_tokens
    return max(cfg.context_tokens) + extra + 64


def check_model_attention(cfg: Config, model_config) -> None:
    """InputError, before the run, when the model's attention is one eviction cannot follow at the
    run's longest sequence (``spec.attention_refusal`` names the setting: soft-capped logits, a
    sliding window on every layer, a window through a kvpress press, ...)."""
    kvpress = any(_spec.parse_method(m)[0].startswith("kvpress:") for m in cfg.methods)
    msg = _spec.attention_refusal(model_config, longest_sequence(cfg), kvpress=kvpress)
    if msg:
        from icml26.core.errors import InputError

        raise InputError(msg)


def window_note(cfg: Config, model_config) -> dict:
    """The summary's record of the layers left to the model's sliding window at the run's longest
    sequence (``spec.window_layers``): ``{"sliding_window", "window_layers", "compressed_layers"}``,
    or ``{}`` when the policies compress every layer."""
    mc = _spec._text(model_config)
    w, layers = _spec.window_layers(mc, longest_sequence(cfg))
    if not layers:
        return {}
    n = mc.get("num_hidden_layers") if isinstance(mc, dict) else getattr(mc, "num_hidden_layers", None)
    return {"sliding_window": w, "window_layers": layers, "compressed_layers": int(n or 0) - len(layers)}


def check_kvpress_methods(cfg: Config) -> None:
    """InputError unless every ``kvpress:<Press>`` names a press of the installed kvpress, and in
    mode decode ``kvpress:DecodingPress/<Scorer>`` wraps a ScorerPress (kvpress' DecodingPress
    asserts it: FinchPress, a BasePress, has no decoding-time compression there)."""
    from icml26.core.errors import InputError

    for m in cfg.methods:
        base = _spec.parse_method(m)[0]
        if not base.startswith("kvpress:"):
            continue
        from icml26.methods.kvcache.kvpress_adapter import press_class

        names = base.split(":", 1)[1].split("/")  # kvpress:DecodingPress/KnormPress names both presses
        classes = [press_class(name) for name in names]
        if cfg.mode == "decode" and len(classes) == 2 and not issubclass(classes[1], press_class("ScorerPress")):
            raise InputError(
                f"method {m!r}: kvpress' DecodingPress takes a ScorerPress and {names[1]} is not one (kvpress "
                f"{_spec._kvpress_version()}): it has no decoding-time compression there"
            )


def preflight(cfg: Config) -> None:
    """What can be checked before a run writes anything (the command calls it before the config
    record): the model resolves (a missing or corrupt one raises InputError), the contexts fit
    its positions, every ``kvpress:<Press>`` names a press of an installed kvpress, the built-in
    corpus is installed, or a ``--haystack`` file has enough tokens for the longest context."""
    import json

    from icml26.core.data.lm import model_path

    folder = model_path(cfg.model)
    try:
        mcfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        mcfg = {}
    check_positions(cfg, mcfg.get("max_position_embeddings") if isinstance(mcfg, dict) else None)
    if isinstance(mcfg, dict):
        check_model_attention(cfg, mcfg.get("text_config") or mcfg)
        note = window_note(cfg, mcfg)
        if note:  # one line: the setting and what the run does with it
            import sys

            print(
                f"evict-kv: sliding_window={note['sliding_window']} is active at {longest_sequence(cfg)} positions on "
                f"{len(note['window_layers'])} layers: they keep the model's own window (not compressed); the "
                f"policies compress the other {note['compressed_layers']} (summary: window_layers)",
                file=sys.stderr,
            )
    check_kvpress_methods(cfg)
    if cfg.haystack is None:  # the built-in corpus: its package is installed (else the install command)
        from icml26.core.data.text import require_corpus

        require_corpus(cfg.corpus)
    else:
        from transformers import AutoTokenizer

        text = haystack_text(cfg.haystack)
        need = max(cfg.context_tokens) + cfg.continuation_tokens + 16
        if len(text) < 10 * need:  # a text this short may lack the tokens: count them (a longer one has them)
            n = len(AutoTokenizer.from_pretrained(folder).encode(text, add_special_tokens=False))
            if n < need:
                _too_short(need, n)


def _too_short(need: int, have: int | None = None) -> None:
    from icml26.core.errors import InputError

    has = f"it has {have}" if have is not None else "the text has fewer"
    raise InputError(
        f"haystack text is too short: need {need} tokens (longest context + continuation + needle), {has}; "
        f"use a longer text or smaller --context-tokens"
    )


def config_fields() -> list[str]:
    return [f.name for f in fields(Config)]
