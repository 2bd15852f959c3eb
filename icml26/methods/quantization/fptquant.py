"""FPTQuant: function-preserving transforms for LLM quantization (van Breugel, Bondarenko,
Whatmough, Nagel; ICML 2026; arXiv 2506.04985), beside the baselines of the field, in one
harness: the same model, calibration text, quantizers and evaluation for every method.

Methods
  fp           the floating-point (fp32) model
  rtn          round-to-nearest weights (+ the activation/KV quantizers of the setting)
  gptq         GPTQ weights (Frantar et al. 2022, gptq.py) on RTN's grid, layers quantized
               sequentially on the calibration text; activations/KV quantized as for RTN
  smoothquant  per-channel smoothing of activation outliers into weights (Xiao et al. 2023)
  quarot       QuaRot-style randomized Hadamard rotation of the residual stream, head-wise
               Hadamard on values and online Hadamard before down_proj (Ashkboos et al. 2024)
  fptquant     QuaRot's residual + down-projection rotations, plus FPTQuant's mergeable
               pre-RoPE Q/K transform, value transform (started at the head-wise Hadamard),
               MLP scaler and dynamic per-token scaling S_n; the transforms are trained
               locally (L4 norm of merged weights) and end to end (KL to the FP model on the
               calibration text), then merged.

Steps of ``run``:
 1. load the model and the text; split calibration / evaluation (evaluate.split_corpus);
 2. evaluate the FP model (perplexity, top-1 predictions, greedy continuations);
 3. per method: apply its function-preserving transforms once (checking that the FP
    perplexity is unchanged up to float error: ``fp_drift``);
 4. per setting: wrap the linears with quantizers (qmodel.quantize_model), train FPTQuant's
    transforms end to end for that setting, calibrate static activation ranges, evaluate;
 5. optionally save the packed INT4/INT8 model of one (method, setting) to ``--out``.
"""

from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

METHODS = ("fp", "rtn", "gptq", "smoothquant", "quarot", "fptquant")
DEFAULT_METHODS = ("fp", "rtn", "fptquant")  # FP, FPTQuant and the baseline every paper reports; "all" = METHODS
STANDARD_SETTINGS = ("W4A16", "W4A8", "W4A4", "W4A4KV4", "W8A8")  # the full comparison (methods "all")
QUANTIZED = METHODS[1:]

# Which methods read each setting (Config field). A field that is not listed (model, data,
# evaluation) is read by every method. ``check_settings`` refuses a field that was set but is
# read by none of the selected methods, and one that none of the selected settings uses.
HONOURED_BY: dict[str, tuple[str, ...]] = {
    **{
        f: QUANTIZED
        for f in (
            "group_size",
            "w_sym",
            "w_clip_search",
            "a_sym",
            "act_granularity",
            "a_clip_ratio",
            "kv_clip_ratio",
            "head_bits",
            "save_method",
            "save_setting",
        )
    },
    "smoothquant_alpha": ("smoothquant",),
    **{f: ("gptq",) for f in ("gptq_block_size", "gptq_percdamp", "gptq_act_order")},
    **{
        f: ("fptquant",)
        for f in (
            "fpt_qk",
            "fpt_v",
            "fpt_mlp",
            "fpt_dyn_scale",
            "fpt_rotate",
            "fpt_down_hadamard",
            "local_steps",
            "local_lr",
            "e2e_steps",
            "e2e_lr",
            "e2e_seq_len",
        )
    },
}
# ... and which quantizer a field belongs to: it needs a selected setting that quantizes it.
NEEDS_QUANTIZED: dict[str, str] = {
    **{f: "weights" for f in ("group_size", "w_sym", "w_clip_search")},
    **{f: "activations" for f in ("a_sym", "act_granularity", "a_clip_ratio")},
    "kv_clip_ratio": "kv",
}
GGUF_NOTE = (
    "SmolLM2/Gemma GGUF weights ship as 4-bit blocks of 32 (Q4_1/Q4_K); weights are quantized "
    "per channel (or in groups not aligned to 32), so 4-bit RTN does not reproduce the shipped grid"
)


def parse_setting(s: str) -> tuple[int, int, int]:
    """'W4A8' -> (4, 8, 16); 'W4A4KV4' -> (4, 4, 4)."""
    m = re.fullmatch(r"W(\d+)A(\d+)(?:KV(\d+))?", s.strip().upper())
    if not m:
        raise ValueError(f"setting {s!r} is not of the form W<bits>A<bits>[KV<bits>] (e.g. W4A8, W4A4KV4)")
    w, a, kv = int(m.group(1)), int(m.group(2)), int(m.group(3) or 16)
    for name, b in (("W", w), ("A", a), ("KV", kv)):
        if not (2 <= b <= 8 or b == 16):
            raise ValueError(f"setting {s!r}: {name} bits must be in 2..8 or 16, got {b}")
    return w, a, kv


@dataclass(frozen=True)
class Config:
    model: str = "llama"  # built-in name, HF folder or .gguf
    methods: tuple[str, ...] = DEFAULT_METHODS  # "all" = every method
    settings: tuple[str, ...] = ()  # () = implied_settings(): by bits; every standard setting for methods "all"
    bits: int = 0  # 0 = every setting; 4 / 8 keeps settings with that weight width
    corpus: str = "python-docs"
    calib_text: str | None = None  # user's plain-text file (replaces the corpus' calibration split)
    eval_text: str | None = None  # user's plain-text file (replaces the corpus' evaluation split)
    seq_len: int = 512
    calib_tokens: int = 4096
    eval_tokens: int = 4096
    group_size: int = 0  # 0 = per output channel
    w_sym: bool = True
    w_clip_search: bool = False  # MSE search of a clipping ratio per row (slow on 2 cores)
    a_sym: bool = False
    act_granularity: str = "per-token"  # per-token (dynamic) | per-tensor (static)
    a_clip_ratio: float = 0.9
    kv_clip_ratio: float = 0.95
    head_bits: int = 8  # embedding / lm_head weights (activations stay FP)
    smoothquant_alpha: float = 0.5
    gptq_block_size: int = 128  # GPTQ lazy-batch block B (Algorithm 1)
    gptq_percdamp: float = 0.01  # dampening lambda = percdamp * mean(diag H)
    gptq_act_order: bool = False  # quantize columns by decreasing diag(H)
    fpt_qk: bool = True
    fpt_v: bool = True
    fpt_mlp: bool = True
    fpt_dyn_scale: bool = True
    fpt_rotate: bool = True
    fpt_down_hadamard: bool = True
    local_steps: int = 50  # FPTQuant local steps (~2 CPU-s each on SmolLM2-135M)
    local_lr: float = 1e-2
    e2e_steps: int = 4  # FPTQuant end-to-end steps per setting (~8 CPU-s each)
    e2e_lr: float = 1e-3
    e2e_seq_len: int = 256
    greedy_prompts: int = 4
    greedy_tokens: int = 16
    save_method: str = ""  # "" = fptquant if selected, else the first selected method that can be packed
    save_setting: str = ""  # "" = the first setting that can be packed (W4/W8)

    def __post_init__(self):
        methods = tuple(self.methods)
        if "all" in methods:
            if len(methods) > 1:
                raise ValueError(f"methods: 'all' stands alone (it is every method: {', '.join(METHODS)})")
            methods = METHODS
        bad = [m for m in methods if m not in METHODS]
        if bad or not methods:
            raise ValueError(
                f"methods: unknown {bad[0] if bad else '(empty)'!r}; choose from {', '.join(METHODS)} or all"
            )
        object.__setattr__(self, "methods", tuple(dict.fromkeys(methods)))
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
                f"calib_tokens ({self.calib_tokens}) and eval_tokens ({self.eval_tokens}) must be >= seq_len ({self.seq_len})"
            )
        if self.group_size < 0:
            raise ValueError(f"group_size must be >= 0, got {self.group_size}")
        if self.calib_text is None or self.eval_text is None:
            from icml26.core.data.text import CORPORA

            if self.corpus not in CORPORA:
                raise ValueError(
                    f"corpus {self.corpus!r} is not a built-in corpus; choose from {', '.join(CORPORA)} "
                    "(or give calib_text and eval_text)"
                )
        if not (0 < self.a_clip_ratio <= 1 and 0 < self.kv_clip_ratio <= 1):
            raise ValueError("a_clip_ratio and kv_clip_ratio must be in (0, 1]")
        if self.head_bits not in (8, 16):
            raise ValueError(f"head_bits must be 8 or 16, got {self.head_bits}")
        for name in ("local_steps", "e2e_steps", "greedy_prompts", "greedy_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.save_method and (self.save_method not in METHODS or self.save_method == "fp"):
            raise ValueError(f"save_method must be one of {', '.join(METHODS[1:])}, got {self.save_method!r}")
        if self.save_setting:
            parse_setting(self.save_setting)
        if self.save_method == "gptq":
            raise ValueError(
                "save_method gptq: saving GPTQ's packed model is not supported yet (choose rtn, smoothquant, quarot or fptquant)"
            )
        if self.gptq_block_size < 1 or not self.gptq_percdamp > 0:
            raise ValueError("gptq_block_size must be >= 1 and gptq_percdamp > 0")

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
            (x for x in ("fptquant", "rtn", "quarot", "smoothquant") if x in self.methods), None
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
    from icml26.core.errors import InputError

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
            who = by[0] if len(by) == 1 else "the quantized methods"
            reason = (
                f"{f} is read by {who} only; the selected methods ({', '.join(cfg.methods)}) do not use it "
                f"(add {'--method ' + by[0] if len(by) == 1 else 'a quantized method'}, or drop {f})"
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
        raise InputError("; ".join(refused))
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
                "--out: saving GPTQ's packed model is not supported yet (set save_method to rtn, smoothquant, quarot or fptquant)"
            )
    return unused


def check_text_tokens(cfg: Config, model_dir) -> None:
    """A user's --calib-text / --eval-text holds at least calib_tokens / eval_tokens tokens of
    the model's tokenizer; checked before the config record (InputError naming the file and the
    counts). The built-in corpus always has enough."""
    from transformers import AutoTokenizer

    from icml26.core.data.text import read_text_file
    from icml26.core.errors import InputError

    sides = [
        (o, f, n)
        for o, f, n in (
            ("--calib-text", cfg.calib_text, cfg.calib_tokens),
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
            raise InputError(
                f"{opt} {str(f)!r} has only {have} tokens, {n} needed ({side}); "
                f"give a longer text or lower it with --set {side}=N (at least seq_len={cfg.seq_len})"
            )


def check_group_size(group_size: int, dims: dict[str, int]) -> None:
    """InputError when ``group_size`` (0 = per channel; >= a dimension = per channel for it)
    does not divide an input dimension of the quantized linear layers. ``dims``: name -> size."""
    from icml26.core.errors import InputError

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
    import json
    from pathlib import Path

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


# ----------------------------------------------------------------------------- data
def load_text(cfg: Config, tok):
    """(calibration chunks, evaluation chunks, e2e chunks, source description).

    Each side is the user's file when given (calib_text / eval_text), else the built-in
    corpus' split for that side (evaluate.split_corpus: doc i -> eval iff i % 10 == 9): a user
    file on one side and the corpus on the other is allowed (e.g. your own evaluation text,
    calibration on the corpus' calibration documents)."""
    from icml26.core.data.text import load_corpus, read_text_file
    from icml26.core.errors import InputError
    from icml26.methods.quantization import evaluate as E

    rule = f"{cfg.corpus}: doc i -> eval iff i % {E.EVAL_EVERY} == {E.EVAL_EVERY - 1}, else calibration"
    if cfg.calib_text is None or cfg.eval_text is None:
        corpus_calib, corpus_eval = E.split_corpus(load_corpus(cfg.corpus))
    calib_docs = [read_text_file(cfg.calib_text)] if cfg.calib_text is not None else corpus_calib
    eval_docs = [read_text_file(cfg.eval_text)] if cfg.eval_text is not None else corpus_eval
    if cfg.calib_text is not None and cfg.eval_text is not None:
        src = f"calib={cfg.calib_text}, eval={cfg.eval_text}"
    elif cfg.calib_text is None and cfg.eval_text is None:
        src = rule
    elif cfg.eval_text is not None:
        src = f"calib={cfg.corpus} calibration documents (built in; {rule}), eval={cfg.eval_text}"
    else:
        src = f"calib={cfg.calib_text}, eval={cfg.corpus} evaluation documents (built in; {rule})"
    try:
        cs = E.token_stream(tok, calib_docs, cfg.calib_tokens)
        es = E.token_stream(tok, eval_docs, cfg.eval_tokens)
    except ValueError as e:
        raise InputError(str(e)) from None
    return E.chunks(cs, cfg.seq_len), E.chunks(es, cfg.seq_len), E.chunks(cs, min(cfg.e2e_seq_len, cfg.seq_len)), src


def shared_lines(tok, calib: list, evalc: list, min_chars: int = 40) -> int:
    """Distinct lines (>= min_chars characters) of the calibration text used (chunks of token
    ids, decoded) that occur verbatim in the evaluation text used: 0 when the two are
    disjoint. The check of a user file against the corpus split on the other side."""
    ev = "\n".join(tok.decode(c[0].tolist()) for c in evalc)
    lines = {ln.strip() for c in calib for ln in tok.decode(c[0].tolist()).splitlines() if len(ln.strip()) >= min_chars}
    return sum(1 for ln in lines if ln in ev)


# ----------------------------------------------------------------------------- methods
def prepare(method: str, fp_model, cfg: Config, calib: list, seed: int):
    """A deep copy of the FP model with ``method``'s function-preserving transforms applied.

    Returns (model, extras) where extras holds what the quantized forward needs
    (online_down_hadamard, dyn_scale), FPTQuant's trainable state, and ``transforms``: the
    names of the transforms applied, in order (what each result record lists)."""
    from icml26.methods.quantization import hadamard as had
    from icml26.methods.quantization import smoothquant as sq
    from icml26.methods.quantization import train as TR
    from icml26.methods.quantization import transforms as T

    model = copy.deepcopy(fp_model)
    applied: list[str] = []
    extras: dict = {"online_down_hadamard": False, "dyn_scale": False, "transforms": applied}
    if method in ("fp", "rtn", "gptq"):
        return model, extras
    if method == "smoothquant":
        T.check_llama(model)  # folds 1/s into RMSNorm gains: LLaMA-style norms only
        sq.smooth(model, calib, cfg.smoothquant_alpha)
        applied.append(f"smoothquant_scales(alpha={cfg.smoothquant_alpha:g})")
        return model, extras
    T.check_llama(model)
    dm = T.dims(model)
    rotate = method == "quarot" or cfg.fpt_rotate
    want_down = method == "quarot" or cfg.fpt_down_hadamard
    down_h = want_down and had.has_hadamard(dm["I"])
    if want_down and not down_h:
        extras["not_applied"] = f"online_down_hadamard: no Hadamard matrix of order intermediate_size={dm['I']}"
    if rotate:
        if not had.has_hadamard(dm["D"]):
            raise ValueError(f"no Hadamard matrix of order hidden_size={dm['D']} is available")
        T.untie_embeddings(model)
        T.fuse_norms(model)
        T.rotate_residual(model, had.random_hadamard(dm["D"], seed))
        applied += ["untie_embeddings", "fuse_norms", "residual_hadamard"]
    extras["online_down_hadamard"] = down_h
    if method == "quarot":
        T.value_hadamard(model)
        applied.append("value_hadamard")
        if down_h:
            T.down_hadamard(model)
            applied.append("online_down_hadamard")
        return model, extras
    # FPTQuant: trainable mergeable transforms
    import torch

    v_init = had.hadamard(dm["d"]) if rotate else None
    params = [T.FPTParams(dm, qk=cfg.fpt_qk, v=cfg.fpt_v, mlp=cfg.fpt_mlp, v_init=v_init) for _ in T.layers(model)]
    bases = T.base_weights(model)
    curve = TR.train_local(bases, params, dm, steps=cfg.local_steps, lr=cfg.local_lr, down_hadamard=down_h)
    with torch.no_grad():
        T.merge_into(model, bases, params, dm, down_hadamard=down_h)
    applied += [
        name
        for on, name in (
            (cfg.fpt_qk, "qk_transform"),
            (cfg.fpt_v, "value_transform" + ("(from value_hadamard)" if rotate else "")),
            (cfg.fpt_mlp, "mlp_scaler"),
            (down_h, "online_down_hadamard"),
            (cfg.fpt_dyn_scale, "dyn_scale"),
        )
        if on
    ]
    extras.update(dyn_scale=cfg.fpt_dyn_scale, bases=bases, params=params, dm=dm, local_curve=curve)
    return model, extras


def model_size_bytes(model, method: str, spec) -> int:
    """Bytes of the stored model: fp32 for ``fp``; otherwise the packed layout of
    icml26.methods.quantization.pack (codes at wbits, fp16 scales, uint8 zeros if asym,
    embeddings/lm_head at head_bits, norms fp32)."""
    from icml26.methods.quantization import pack

    if method == "fp":
        seen, total = set(), 0
        for p in model.parameters():
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * 4
        return total
    return pack.packed_size_bytes(model, spec)


def tied_embeddings(model) -> bool:
    """True when lm_head shares the input embedding's weight (rotations untie them)."""
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


# Cost of each part of a run in FP-evaluation token equivalents (one unit = the time the FP
# model takes per evaluated token, measured in the run itself), from CPU times measured on
# SmolLM2-135M (one thread, 2-core EPYC; docs/quantize.md, "Run time"). A guide, not a promise.
COST = {
    "eval": 1.1,  # quantized evaluation (perplexity + greedy), x the FP one, weight-only settings
    "eval_act": 1.2,  # ... with activation / KV quantization
    "prepare": 1750,  # rotations + merges of quarot / fptquant (tokens), + the drift check (2 chunks)
    "local_step": 285,  # one FPTQuant local step (tokens)
    "e2e_step": 4.2,  # one FPTQuant end-to-end step, x e2e_seq_len tokens
    "gptq": 3.0,  # GPTQ per weight width, x calib_tokens (not measured: a rough guide)
}
LONG_RUN_S = 120.0  # the command prints the estimate when a run should take longer than this


def estimate_seconds(cfg: Config, *, eval_s: float, greedy_s: float) -> float:
    """Estimated wall seconds of the whole run, from the FP evaluation's measured time
    ``eval_s`` (perplexity over the eval tokens) and ``greedy_s`` (greedy continuations): the
    parts of the run (COST) in FP token equivalents times the measured seconds per token."""
    settings = [parse_setting(x) for x in cfg.active_settings()]
    per_tok = eval_s / max(cfg.eval_tokens, 1)  # seconds per evaluated token (FP, this run)
    total = eval_s + greedy_s
    for m in cfg.methods:
        if m == "fp":
            continue
        if m in ("quarot", "fptquant", "smoothquant"):
            total += (COST["prepare"] if m != "smoothquant" else 0) * per_tok + 2 * cfg.seq_len * per_tok
        if m == "smoothquant":
            total += cfg.calib_tokens * per_tok
        if m == "fptquant":
            total += cfg.local_steps * COST["local_step"] * per_tok
        if m == "gptq":
            total += COST["gptq"] * cfg.calib_tokens * per_tok * len({w for w, _, _ in settings if w < 16})
        for w, a, kv in settings:
            total += (COST["eval_act"] if a < 16 or kv < 16 else COST["eval"]) * (eval_s + greedy_s)
            if a < 16 and cfg.act_granularity == "per-tensor":
                total += cfg.calib_tokens * per_tok * (2 if m == "fptquant" else 1)
            if m == "fptquant":
                total += cfg.e2e_steps * COST["e2e_step"] * min(cfg.e2e_seq_len, cfg.seq_len) * per_tok
    return total


def run(cfg: Config, *, seed: int = 0, device: str = "cpu", out: str | None = None) -> Iterator[dict]:
    import torch

    from icml26.core.data.lm import load_causal_lm
    from icml26.core.errors import InputError
    from icml26.core.progress import progress
    from icml26.core.seed import seed_everything
    from icml26.methods.quantization import evaluate as E
    from icml26.methods.quantization import qmodel as QM
    from icml26.methods.quantization import train as TR

    seed_everything(seed)
    settings = cfg.active_settings()
    t0 = time.time()
    fp_model, tok = load_causal_lm(cfg.model)
    if cfg.group_size:
        check_group_size(
            cfg.group_size,
            {
                n: m.in_features
                for n, m in fp_model.named_modules()
                if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head")
            },
        )
    fp_model.eval()
    for p in fp_model.parameters():
        p.requires_grad_(False)
    arch = getattr(fp_model.config, "model_type", "?")
    calib, evalc, e2e_batches, src = load_text(cfg, tok)
    prompts = [c[:, : min(32, cfg.seq_len // 2)] for c in evalc[: cfg.greedy_prompts]]
    data = {
        "kind": "step",
        "stage": "data",
        "model": cfg.model,
        "arch": arch,
        "text": src,
        "calib_source": cfg.calib_text or f"{cfg.corpus} (built in, calibration documents)",
        "eval_source": cfg.eval_text or f"{cfg.corpus} (built in, evaluation documents)",
        "calib_tokens": sum(c.numel() for c in calib),
        "eval_tokens": sum(c.numel() for c in evalc),
        "weight_quant": cfg.weight_quant_note(),
        "note": GGUF_NOTE,
        "load_s": round(time.time() - t0, 2),
    }
    if (cfg.calib_text is None) != (cfg.eval_text is None):  # a user file against the corpus: check they share no text
        data["calib_eval_shared_lines"] = shared_lines(tok, calib, evalc)
    yield data

    # 2. FP reference
    t1 = time.time()
    fp_ppl, _, fp_top = E.perplexity(fp_model, evalc)
    t_eval = time.time() - t1
    fp_gen = E.greedy(fp_model, prompts, cfg.greedy_tokens) if prompts and cfg.greedy_tokens else []
    t_greedy = time.time() - t1 - t_eval
    est = estimate_seconds(cfg, eval_s=t_eval, greedy_s=t_greedy)
    yield {
        "kind": "step",
        "stage": "estimate",
        "estimated_s": round(est, 1),
        "fp_eval_s": round(t_eval, 2),
        "fp_greedy_s": round(t_greedy, 2),
        "fp_tokens_per_s": round(sum(c.numel() for c in evalc) / max(t_eval, 1e-9), 1),
        "runs": len([m for m in cfg.methods if m != "fp"]) * len(settings),
    }
    results: list[dict] = []
    if "fp" in cfg.methods:
        rec = {
            "kind": "result",
            "method": "fp",
            "setting": "FP32",
            "wbits": 32,
            "abits": 32,
            "kvbits": 32,
            "perplexity": fp_ppl,
            "top1_agreement": 1.0,
            "greedy_agreement": 1.0 if fp_gen else None,
            "size_bytes": model_size_bytes(fp_model, "fp", None),
            "time_s": round(time.time() - t1, 2),
        }
        results.append(rec)
        yield rec

    saved = None
    save_method, save_setting = cfg.save_target()
    qmethods = [m for m in cfg.methods if m != "fp"]
    fp_first = None
    with progress(len(qmethods) * len(settings), "quantize") as bar:
        for method in qmethods:
            t2 = time.time()
            try:
                base, extras = prepare(method, fp_model, cfg, calib, seed)
            except ValueError as e:
                yield {"kind": "step", "stage": "skip", "method": method, "reason": str(e)}
                for _ in settings:
                    bar.advance()
                continue
            prep_only_s = time.time() - t2
            # wrap in FP first (online Hadamard / S_n active) and check the function is preserved
            model = base
            QM.quantize_model(
                model,
                QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16),
                online_down_hadamard=extras["online_down_hadamard"],
                dyn_scale=extras["dyn_scale"],
            )
            drift = None
            if method not in ("rtn", "gptq"):
                ppl_t, _, _ = E.perplexity(model, evalc[:1])
                if fp_first is None:
                    fp_first = E.perplexity(fp_model, evalc[:1])[0]
                drift = abs(ppl_t - fp_first) / fp_first
            if cfg.head_bits < 16:
                QM.quantize_embeddings(model, cfg.head_bits)
            prep_s = time.time() - t2
            for setting in settings:
                t3 = time.time()
                spec = cfg.spec(setting)
                QM.set_spec(model, spec)
                rec_extra: dict = {}
                if method == "gptq" and spec.wbits < 16:
                    import dataclasses

                    from icml26.methods.quantization import gptq as GQ

                    key = (spec.wbits, spec.group_size, spec.w_sym)
                    done = extras.setdefault("gptq_done", set())
                    tg = time.time()
                    if key not in done:  # GPTQ weights depend on the weight grid only: shared by A/KV settings
                        QM.set_spec(model, dataclasses.replace(spec, abits=16, kvbits=16))
                        GQ.quantize_model_gptq(
                            model,
                            calib,
                            bits=spec.wbits,
                            sym=spec.w_sym,
                            group_size=spec.group_size,
                            clip_search=spec.w_clip_search,
                            block_size=cfg.gptq_block_size,
                            percdamp=cfg.gptq_percdamp,
                            act_order=cfg.gptq_act_order,
                        )
                        QM.set_spec(model, spec)
                        done.add(key)
                    rec_extra = {"gptq_s": round(time.time() - tg, 2)}
                QM.calibrate_static(model, calib, spec)
                te = time.time()
                if method == "fptquant":
                    from icml26.methods.quantization import transforms as T

                    params = copy.deepcopy(extras["params"])
                    curve = TR.train_e2e(
                        model,
                        fp_model,
                        extras["bases"],
                        params,
                        extras["dm"],
                        e2e_batches,
                        steps=cfg.e2e_steps,
                        lr=cfg.e2e_lr,
                        down_hadamard=extras["online_down_hadamard"],
                    )
                    if curve:
                        T.merge_into(
                            model, extras["bases"], params, extras["dm"], down_hadamard=extras["online_down_hadamard"]
                        )
                        QM.calibrate_static(model, calib, spec)
                    lc = extras.get("local_curve") or []
                    rec_extra = {
                        "local_loss_first": lc[0] if lc else None,
                        "local_loss_last": lc[-1] if lc else None,
                        "e2e_kl_first": curve[0] if curve else None,
                        "e2e_kl_last": curve[-1] if curve else None,
                        "local_train_s": round(prep_only_s, 2),
                        "e2e_train_s": round(time.time() - te, 2),
                    }
                ppl, agree, _ = E.perplexity(model, evalc, fp_top1=fp_top)
                gen = E.greedy(model, prompts, cfg.greedy_tokens) if fp_gen else []
                rec = {
                    "kind": "result",
                    "method": method,
                    "setting": setting,
                    "wbits": spec.wbits,
                    "abits": spec.abits,
                    "kvbits": spec.kvbits,
                    "perplexity": ppl,
                    "top1_agreement": agree,
                    "greedy_agreement": E.greedy_agreement(gen, fp_gen) if gen else None,
                    "size_bytes": model_size_bytes(model, method, spec),
                    "weight_quant": cfg.weight_quant_note(spec.wbits),
                    "clip_search": bool(spec.w_clip_search and spec.wbits < 16),
                    "transforms": list(extras["transforms"]),
                    "tied_embeddings": tied_embeddings(model),
                    "fp_drift": drift,
                    "time_s": round(time.time() - t3 + prep_s / len(settings), 2),
                    **rec_extra,
                }
                if extras.get("not_applied"):
                    rec["not_applied"] = extras["not_applied"]
                results.append(rec)
                yield rec
                if out is not None and saved is None and method == save_method and setting == save_setting:
                    from icml26.methods.quantization import pack

                    if spec.wbits not in (4, 8):
                        raise InputError(f"only 4- and 8-bit weights are packed; cannot save {setting}")
                    path = Path(out) / "model"
                    pack.save_quantized(
                        model, tok, path, spec, method=method, extras=extras, fp_perplexity=fp_ppl, perplexity=ppl
                    )
                    saved = str(path)
                    yield {
                        "kind": "step",
                        "stage": "saved",
                        "method": method,
                        "setting": setting,
                        "path": saved,
                        "perplexity": ppl,
                    }
                if method == "fptquant" and curve:
                    T.merge_into(
                        model,
                        extras["bases"],
                        extras["params"],
                        extras["dm"],
                        down_hadamard=extras["online_down_hadamard"],
                    )
                bar.advance()
            del base, model
    # summary
    summ: dict = {
        "kind": "summary",
        "model": cfg.model,
        "fp_perplexity": fp_ppl,
        "n_results": len(results),
        "eval_tokens": sum(c.numel() for c in evalc),
        "saved": saved,
        "time_s": round(time.time() - t0, 1),
        "estimated_s": round(est, 1),
    }
    for setting in settings:
        rs = [r for r in results if r["setting"] == setting]
        if rs:
            best = min(rs, key=lambda r: r["perplexity"] if r["perplexity"] == r["perplexity"] else float("inf"))
            summ[f"best_{setting}"] = best["method"]
            f = [r for r in rs if r["method"] == "fptquant"]
            others = [r["perplexity"] for r in rs if r["method"] != "fptquant"]
            if f and others:
                summ[f"fptquant_beats_baselines_{setting}"] = bool(f[0]["perplexity"] < min(others))
    yield summ


def is_packed_folder(name_or_path: str) -> bool:
    """True for a folder written by ``quantize --out`` (config.json with icml26's quantization_config)."""
    import json

    p = Path(name_or_path).expanduser()
    f = p / "config.json"
    if not f.is_file():
        return False
    try:
        qc = json.loads(f.read_text(encoding="utf-8")).get("quantization_config") or {}
    except (OSError, ValueError):
        return False
    from icml26.methods.quantization.pack import FORMAT

    return qc.get("format") == FORMAT


def run_packed(cfg: Config, *, seed: int = 0) -> Iterator[dict]:
    """Re-evaluate a saved packed model on the same evaluation text (real INT4/INT8 weights)."""
    from icml26.core.seed import seed_everything
    from icml26.methods.quantization import evaluate as E
    from icml26.methods.quantization import pack

    seed_everything(seed)
    t0 = time.time()
    model, tok, qc = pack.load_quantized(cfg.model)
    if tok is None:
        from icml26.core.errors import InputError

        raise InputError(f"{cfg.model!r} has no tokenizer files")
    _, evalc, _, src = load_text(cfg, tok)
    yield {
        "kind": "step",
        "stage": "data",
        "model": cfg.model,
        "text": src,
        "eval_tokens": sum(c.numel() for c in evalc),
        "load_s": round(time.time() - t0, 2),
    }
    ppl, _, _ = E.perplexity(model, evalc)
    setting = f"W{qc['wbits']}A{qc['abits']}" + (f"KV{qc['kvbits']}" if qc["kvbits"] < 16 else "")
    from icml26.ops import quant as ops

    rec = {
        "kind": "result",
        "method": qc["method"],
        "setting": setting,
        "wbits": qc["wbits"],
        "abits": qc["abits"],
        "kvbits": qc["kvbits"],
        "perplexity": ppl,
        "saved_perplexity": qc.get("perplexity"),
        "size_bytes": qc["size_bytes"],
        "packed": True,
        "kernel": ops.isa(),
        "time_s": round(time.time() - t0, 2),
    }
    yield rec
    yield {
        "kind": "summary",
        "model": cfg.model,
        "perplexity": ppl,
        "saved_perplexity": qc.get("perplexity"),
        "n_results": 1,
        "time_s": round(time.time() - t0, 1),
    }
