"""Settings of ``icml26 quantize`` (torch-free, checked before any heavy import): the methods and
their variants, the quantization settings (W<b>A<b>[KV<b>]), the ``Config`` dataclass and the
checks run before the model loads (settings honoured by a selected method, group size, text
length). Methods and the paper they follow: see ``fptquant.py`` and docs/quantize.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from icml26.core.data.text import CORPORA, read_text_file
from icml26.core.errors import InputError
from icml26.core.settings import Work, setting

from icml26.methods.quantization.names import (  # noqa: F401  (re-exported: the settings' names)
    METHODS,
    DEFAULT_METHODS,
    FPT_VARIANTS,
    FPT_METHODS,
    STAGE_SUFFIX,
    FPT_NAMES,
    SELECTABLE,
    STANDARD_SETTINGS,
    QUANTIZED,
    HONOURED_BY,
    NEEDS_QUANTIZED,
    GGUF_NOTE,
    stage_steps,
    variant_of,
    prepare_key,
    result_name,
    parse_setting,
)


@dataclass(frozen=True)
class Config:
    model: str = setting(
        "llama", "the model: llama (SmolLM2-135M) | gemma3-270m | an HF folder | a .gguf | a folder saved by --out"
    )
    methods: tuple[str, ...] = setting(
        DEFAULT_METHODS,
        f"methods to run: any of {', '.join(METHODS)}, or all (these at the standard settings); an FPTQuant "
        "variant + -local / -e2e-only / -untrained runs only those training stages",
    )
    settings: tuple[str, ...] = setting(
        (), "quantization settings W<b>A<b>[KV<b>] (e.g. W4A16, W4A8, W4A4KV4); empty = those bits implies"
    )
    bits: int = setting(
        0, "weight width kept: 4 runs W4A16 and W4A8, 8 runs W8A8; 0 = every given setting", unit="bits"
    )
    corpus: str = setting("python-docs", "built-in text corpus for calibration and evaluation (make data installs it)")
    calib_text: str | None = setting(
        None, "your own plain-text calibration file (replaces the corpus' calibration side)"
    )
    eval_text: str | None = setting(None, "your own plain-text evaluation file (replaces the corpus' evaluation side)")
    eval_split: Literal["test", "validation"] = setting(
        "test",
        "what is scored: test = the evaluation text; validation = held-out text of the calibration source, after "
        "the calibration tokens and disjoint from them and from the evaluation text (for choosing settings)",
    )
    seq_len: int = setting(512, "tokens per chunk of calibration and evaluation text", unit="tokens", ge=8, sized=32768)
    calib_tokens: int = setting(
        4096, "calibration tokens (GPTQ Hessians, SmoothQuant maxima, static ranges, e2e training)", ge=8, sized=2**20
    )
    eval_tokens: int = setting(
        2048, "evaluation tokens scored for perplexity (4 chunks of 512 by default)", ge=8, sized=2**20
    )
    group_size: int = setting(0, "weight quantization group (input columns per scale); 0 = per output channel", ge=0)
    w_sym: bool = setting(True, "symmetric weight grid (no zero point)")
    w_clip_search: bool = setting(False, "MSE search of a clipping ratio per weight row (slow on 2 cores)")
    a_sym: bool = setting(False, "symmetric activation grid (no zero point)")
    act_granularity: Literal["per-token", "per-tensor"] = setting(
        "per-token", "activation scales: per-token (dynamic) or per-tensor (static, calibrated on calibration text)"
    )
    a_clip_ratio: float = setting(0.9, "activation range kept (fraction of the max)", unit="fraction", gt=0, le=1)
    kv_clip_ratio: float = setting(0.95, "KV-cache range kept (fraction of the max)", unit="fraction", gt=0, le=1)
    head_bits: int = setting(8, "bits of the embedding and lm_head weights (8 or 16; their activations stay FP)")
    smoothquant_alpha: float = setting(
        0.5, "SmoothQuant migration strength alpha (Xiao et al. 2023, Eq. 4)", ge=0, le=1
    )
    gptq_block_size: int = setting(
        128, "GPTQ lazy-batch block B (Frantar et al. 2023, Algorithm 1)", unit="columns", ge=1
    )
    gptq_percdamp: float = setting(0.01, "GPTQ dampening: lambda = percdamp x mean(diag H)", gt=0)
    gptq_act_order: bool = setting(False, "GPTQ: quantize columns by decreasing diag(H)")
    fpt_qk: bool = setting(True, "FPTQuant: pre-RoPE query/key scaled rotations")
    fpt_v: bool = setting(True, "FPTQuant: value/output transform per head")
    fpt_mlp: bool = setting(True, "FPTQuant: per-channel MLP scaler (up_proj rows / down_proj columns)")
    fpt_dyn_scale: bool = setting(True, "fptquant only: dynamic residual scaling S_n (online, not mergeable)")
    fpt_rotate: bool = setting(True, "fptquant only: residual Hadamard rotation (folds the RMSNorm gains)")
    fpt_down_hadamard: bool = setting(True, "fptquant only: online Hadamard before down_proj (not mergeable)")
    local_steps: int = setting(
        200, "FPTQuant local-stage steps (AIMET LocalTransformOptimizer; reads no text)", ge=0, sized=100_000
    )
    local_lr: float = setting(1e-2, "FPTQuant local stage: AdamW learning rate", gt=0)
    local_wd: float = setting(0.01, "FPTQuant local stage: AdamW weight decay (AIMET: torch's default, 0.01)", ge=0)
    e2e_steps: int = setting(
        8,
        "FPTQuant end-to-end steps per setting (KL to the FP model on calibration text); 0 = local only",
        ge=0,
        sized=100_000,
    )
    e2e_lr: float = setting(1e-3, "FPTQuant end-to-end stage: Adam learning rate", gt=0)
    e2e_seq_len: int = setting(
        256, "tokens per end-to-end training chunk (capped at seq_len)", unit="tokens", ge=8, sized=32768
    )
    greedy_prompts: int = setting(2, "evaluation prompts continued greedily (greedy_agreement)", ge=0, sized=1000)
    greedy_tokens: int = setting(16, "tokens generated per greedy prompt", unit="tokens", ge=0, sized=4096)
    save_method: str = setting(
        "", "--out: the method saved; empty = an FPTQuant variant if selected, else the first packable method"
    )
    save_setting: str = setting("", "--out: the setting saved; empty = the first W4/W8 setting")

    def __post_init__(self):
        methods = tuple(self.methods)
        if "all" in methods:
            if len(methods) > 1:
                raise ValueError(f"methods: 'all' stands alone (it is every method: {', '.join(METHODS)})")
            methods = METHODS
        bad = [m for m in methods if m not in SELECTABLE]
        if bad or not methods:
            raise ValueError(
                f"methods: unknown {bad[0] if bad else '(empty)'!r}; choose from {', '.join(SELECTABLE)} or all"
            )
        methods = tuple(dict.fromkeys(methods))
        object.__setattr__(self, "methods", methods)
        named: dict[str, str] = {}
        for m in methods:
            r = result_name(m, self)
            if r in named:
                raise ValueError(
                    f"methods: {named[r]} and {m} would both run as {r} (local_steps={self.local_steps}, "
                    f"e2e_steps={self.e2e_steps}); drop one"
                )
            named[r] = m
        if self.bits not in (0, 2, 3, 4, 5, 6, 7, 8):
            raise ValueError(f"bits must be 0 (all settings) or a weight width in 2..8, got {self.bits}")
        if not self.settings or tuple(x.upper() for x in self.settings) == ("ALL",):
            object.__setattr__(
                self, "settings", self.implied_settings(full=bool(self.settings) or set(self.methods) == set(METHODS))
            )
        for s in self.settings:
            parse_setting(s)
        if self.bits and not self.active_settings():
            raise ValueError(
                f"bits={self.bits}: none of the settings {', '.join(self.settings)} has {self.bits}-bit weights"
            )
        if self.act_granularity not in ("per-token", "per-tensor"):
            raise ValueError(f"act_granularity must be per-token or per-tensor, got {self.act_granularity!r}")
        for name in ("seq_len", "calib_tokens", "eval_tokens", "e2e_seq_len"):
            if getattr(self, name) < 8:
                raise ValueError(f"{name} must be >= 8, got {getattr(self, name)}")
        if self.eval_tokens < self.seq_len or self.calib_tokens < self.seq_len:
            raise ValueError(
                f"calib_tokens ({self.calib_tokens}) and eval_tokens ({self.eval_tokens}) must be >= seq_len "
                f"({self.seq_len})"
            )
        if self.group_size < 0:
            raise ValueError(f"group_size must be >= 0, got {self.group_size}")
        if (self.calib_text is None or self.eval_text is None) and self.corpus not in CORPORA:
            raise ValueError(
                f"corpus {self.corpus!r} is not a built-in corpus; choose from {', '.join(CORPORA)} "
                "(or give calib_text and eval_text)"
            )
        if not (0 < self.a_clip_ratio <= 1 and 0 < self.kv_clip_ratio <= 1):
            raise ValueError("a_clip_ratio and kv_clip_ratio must be in (0, 1]")
        if self.head_bits not in (8, 16):
            raise ValueError(f"head_bits must be 8 or 16, got {self.head_bits}")
        for name in ("local_steps", "local_wd", "e2e_steps", "greedy_prompts", "greedy_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.save_method and (self.save_method not in SELECTABLE or self.save_method == "fp"):
            raise ValueError(f"save_method must be one of {', '.join(SELECTABLE[1:])}, got {self.save_method!r}")
        if self.save_setting:
            parse_setting(self.save_setting)
        if self.save_method == "gptq":
            raise ValueError(
                "save_method gptq: saving GPTQ's packed model is not supported yet (choose rtn, smoothquant, "
                "quarot or fptquant)"
            )
        if self.gptq_block_size < 1 or not self.gptq_percdamp > 0:
            raise ValueError("gptq_block_size must be >= 1 and gptq_percdamp > 0")

    def work(self) -> list[Work]:
        """The run's work in FP-evaluation token equivalents (estimate.py's cost model: every
        method, setting, training step and calibration token) against estimate.WORK_LIMIT."""
        from icml26.methods.quantization.estimate import WORK_LIMIT, work_units

        u = work_units(self)
        return [
            Work(
                u,
                WORK_LIMIT,
                "FP-evaluation token equivalents of CPU work",
                "--method, --setting, eval_tokens, calib_tokens, local_steps or e2e_steps",
                f"~{u * 4.2e-3 / 3600:.1f} CPU-h on SmolLM2-135M",
            )
        ]

    def implied_settings(self, full: bool = False) -> tuple[str, ...]:
        """The settings run when none are given: the full comparison (STANDARD_SETTINGS, kept by
        ``bits``) when ``full``; else the ones ``bits`` implies: W4A16 (weight-only, the packed
        model the CPU kernels run) and W4A8 for 4, W8A8 for 8; bits 0 = 4. ValueError for other
        widths (give the settings)."""
        if full:
            keep = tuple(x for x in STANDARD_SETTINGS if not self.bits or parse_setting(x)[0] == self.bits)
            if keep:
                return keep
        b = self.bits or 4
        if b not in (4, 8):
            raise ValueError(
                f"bits={b}: only 4 and 8 imply settings (the packed formats); give the settings, e.g. --setting W{b}A16"
            )
        return ("W8A8",) if b == 8 else (f"W{b}A16", f"W{b}A8")

    def active_settings(self) -> list[str]:
        return [s.upper() for s in self.settings if not self.bits or parse_setting(s)[0] == self.bits]

    def save_target(self) -> tuple[str | None, str | None]:
        """(method, setting) that ``--out`` packs: save_method or fptquant / the first selected
        method that can be packed; save_setting or the first active W4/W8 setting. None where
        there is none."""
        m = self.save_method or next(
            (x for x in (*FPT_NAMES, "rtn", "quarot", "smoothquant") if x in self.methods), None
        )
        st = (
            self.save_setting.upper()
            if self.save_setting
            else next((x for x in self.active_settings() if parse_setting(x)[0] in (4, 8)), None)
        )
        return m, st

    def spec(self, setting: str):
        from icml26.methods.quantization.qmodel import QSpec

        w, a, kv = parse_setting(setting)
        return QSpec(
            wbits=w,
            abits=a,
            kvbits=kv,
            w_sym=self.w_sym,
            group_size=self.group_size,
            w_clip_search=self.w_clip_search,
            a_sym=self.a_sym,
            act_granularity=self.act_granularity,
            a_clip_ratio=self.a_clip_ratio,
            kv_clip_ratio=self.kv_clip_ratio,
            head_bits=self.head_bits,
        )

    def weight_quant_note(self, wbits: int | None = None) -> str:
        """How the decoder weights are quantized, and whether the MSE clipping search ran
        (it runs for every quantized weight when w_clip_search is on)."""
        if wbits is not None and wbits >= 16:
            return f"not quantized ({wbits}-bit weights)"
        g = "per-channel" if self.group_size == 0 else f"group {self.group_size}"
        clip = "MSE clip search ran" if self.w_clip_search else "no clip search (w_clip_search=false)"
        return f"{g} {'sym' if self.w_sym else 'asym'}, {clip}"


def check_settings(cfg: Config, given: dict[str, str], *, out: str | None = None) -> dict[str, str]:
    """Check that every setting given is honoured by the run (before anything is written).

    given: field -> where it came from (``--set`` or ``recipe FILE``). A field from ``--set``
    that none of the selected methods reads (HONOURED_BY), or that none of the selected
    settings uses (e.g. an activation clip ratio without activation quantization), is an
    InputError naming the methods; from a recipe (sized for every method) it is returned,
    field -> reason, for the config record. With ``out``: the model to save must be among the
    selected methods and settings. Raises InputError."""
    unused: dict[str, str] = {}
    refused: list[str] = []
    specs = [parse_setting(x) for x in cfg.active_settings()]
    quantizes = {
        "weights": any(w < 16 for w, _, _ in specs),
        "activations": any(a < 16 for _, a, _ in specs),
        "kv": any(kv < 16 for _, _, kv in specs),
    }
    for f, where in given.items():
        by = HONOURED_BY.get(f)
        reason = None
        if by is not None and not set(by) & set(cfg.methods):
            named = tuple(dict.fromkeys(variant_of(x) for x in by))  # a variant stands for its stage names
            who = "the quantized methods" if set(by) == set(QUANTIZED) else ", ".join(by)  # every stage name
            reason = (
                f"{f} is read by {who} only; the selected methods ({', '.join(cfg.methods)}) do not use it "
                f"(add {'--method ' + named[0] if len(named) == 1 else 'a quantized method'}, or drop {f})"
            )
        elif f in NEEDS_QUANTIZED and not quantizes[NEEDS_QUANTIZED[f]]:
            reason = (
                f"{f} applies to quantized {NEEDS_QUANTIZED[f]}; none of the settings "
                f"({', '.join(cfg.active_settings())}) quantizes them"
            )
        if reason is None:
            continue
        if where == "--set":
            refused.append(reason)
        else:
            unused[f] = reason
    if refused:
        raise InputError("quantize config: " + "; ".join(refused))
    if out is not None:
        m, st = cfg.save_target()
        if m is None or m not in cfg.methods:
            raise InputError(
                f"--out: the model to save ({'save_method ' + m if m else 'a packable method'}) is not among the "
                f"selected methods ({', '.join(cfg.methods)}); add it with --method, or set save_method"
            )
        if st is None or st not in cfg.active_settings():
            raise InputError(
                f"--out: the setting to save ({'save_setting ' + st if st else 'a W4/W8 setting'}) is not among the "
                f"selected settings ({', '.join(cfg.active_settings())}); add it with --setting, or set save_setting"
            )
        if parse_setting(st)[0] not in (4, 8):
            raise InputError(f"--out: only 4- and 8-bit weights are packed; cannot save {st} (set save_setting)")
        if m == "gptq":
            raise InputError(
                "--out: saving GPTQ's packed model is not supported yet (set save_method to rtn, smoothquant, "
                "quarot or fptquant)"
            )
    return unused


def check_text_tokens(cfg: Config, model_dir) -> None:
    """A user's --calib-text / --eval-text holds at least calib_tokens / eval_tokens tokens of
    the model's tokenizer; checked before the config record (InputError naming the file and the
    counts). The built-in corpus always has enough."""
    from transformers import AutoTokenizer

    extra = cfg.eval_tokens if cfg.eval_split == "validation" else 0  # the validation tokens follow calibration
    sides = [
        (o, f, n)
        for o, f, n in (
            ("--calib-text", cfg.calib_text, cfg.calib_tokens + extra),
            ("--eval-text", cfg.eval_text, cfg.eval_tokens),
        )
        if f is not None
    ]
    if not sides:
        return
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    for opt, f, n in sides:
        have = len(tok(read_text_file(f) + "\n\n", add_special_tokens=False)["input_ids"])
        if have < n:
            side = "calib_tokens" if opt == "--calib-text" else "eval_tokens"
            what = f"{n} needed ({side})"
            if opt == "--calib-text" and extra:
                what = f"{n} needed (calib_tokens + eval_tokens: eval_split=validation scores the text after them)"
            raise InputError(
                f"{opt} {str(f)!r} has only {have} tokens, {what}; "
                f"give a longer text or lower it with --set {side}=N (at least seq_len={cfg.seq_len})"
            )


def check_group_size(group_size: int, dims: dict[str, int]) -> None:
    """InputError when ``group_size`` (0 = per channel; >= a dimension = per channel for it)
    does not divide an input dimension of the quantized linear layers. ``dims``: name -> size."""
    bad = {n: k for n, k in dims.items() if group_size and group_size < k and k % group_size}
    if bad:
        named = ", ".join(f"{n}={k}" for n, k in bad.items())
        ok = sorted({g for g in (32, 64, 128, 256) if all(k % g == 0 or g >= k for k in dims.values())})
        hint = f"; e.g. {', '.join(map(str, ok))}" if ok else ""
        raise InputError(
            f"group_size {group_size} does not divide the model's linear input dimensions ({named}): "
            f"choose 0 (per channel) or a divisor of every one of {sorted(set(dims.values()))}{hint}"
        )


def model_dims(model_dir) -> dict[str, int]:
    """Input dimensions of the decoder's linear layers, read from an HF folder's config.json
    (empty when the config does not say). No weights are read."""
    try:
        c = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    c = c.get("text_config", c) if isinstance(c.get("text_config"), dict) else c
    dims = {}
    if isinstance(c.get("hidden_size"), int):
        dims["hidden_size"] = c["hidden_size"]
    if isinstance(c.get("intermediate_size"), int):
        dims["intermediate_size"] = c["intermediate_size"]
    heads, hd = c.get("num_attention_heads"), c.get("head_dim")
    if isinstance(heads, int) and not isinstance(hd, int) and dims.get("hidden_size"):
        hd = dims["hidden_size"] // heads
    if isinstance(heads, int) and isinstance(hd, int):
        dims["num_attention_heads*head_dim"] = heads * hd
    return dims
