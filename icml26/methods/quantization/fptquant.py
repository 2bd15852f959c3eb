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
GGUF_NOTE = ("SmolLM2/Gemma GGUF weights ship as 4-bit blocks of 32 (Q4_1/Q4_K); weights are quantized "
             "per channel (or in groups not aligned to 32), so 4-bit RTN does not reproduce the shipped grid")


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
    model: str = "llama"                     # built-in name, HF folder or .gguf
    methods: tuple[str, ...] = METHODS
    settings: tuple[str, ...] = ("W4A16", "W4A8", "W4A4", "W4A4KV4", "W8A8")
    bits: int = 0                            # 0 = every setting; 4 / 8 keeps settings with that weight width
    corpus: str = "python-docs"
    calib_text: str | None = None            # user's plain-text file (replaces the corpus split)
    eval_text: str | None = None
    seq_len: int = 512
    calib_tokens: int = 4096
    eval_tokens: int = 4096
    group_size: int = 0                      # 0 = per output channel
    w_sym: bool = True
    w_clip_search: bool = False             # MSE search of a clipping ratio per row (slow on 2 cores)
    a_sym: bool = False
    act_granularity: str = "per-token"       # per-token (dynamic) | per-tensor (static)
    a_clip_ratio: float = 0.9
    kv_clip_ratio: float = 0.95
    head_bits: int = 8                       # embedding / lm_head weights (activations stay FP)
    smoothquant_alpha: float = 0.5
    gptq_block_size: int = 128               # GPTQ lazy-batch block B (Algorithm 1)
    gptq_percdamp: float = 0.01              # dampening lambda = percdamp * mean(diag H)
    gptq_act_order: bool = False             # quantize columns by decreasing diag(H)
    fpt_qk: bool = True
    fpt_v: bool = True
    fpt_mlp: bool = True
    fpt_dyn_scale: bool = True
    fpt_rotate: bool = True
    fpt_down_hadamard: bool = True
    local_steps: int = 200
    local_lr: float = 1e-2
    e2e_steps: int = 16
    e2e_lr: float = 1e-3
    e2e_seq_len: int = 256
    greedy_prompts: int = 4
    greedy_tokens: int = 16
    save_method: str = "fptquant"
    save_setting: str = ""                   # "" = the first setting that can be packed (W4/W8)

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods: unknown {bad[0] if bad else '(empty)'!r}; choose from {', '.join(METHODS)}")
        if not self.settings:
            raise ValueError("settings: give at least one, e.g. W4A8")
        for s in self.settings:
            parse_setting(s)
        if self.bits not in (0, 2, 3, 4, 5, 6, 7, 8):
            raise ValueError(f"bits must be 0 (all settings) or a weight width in 2..8, got {self.bits}")
        if self.bits and not self.active_settings():
            raise ValueError(f"bits={self.bits}: none of the settings {', '.join(self.settings)} has {self.bits}-bit weights")
        if self.act_granularity not in ("per-token", "per-tensor"):
            raise ValueError(f"act_granularity must be per-token or per-tensor, got {self.act_granularity!r}")
        for name in ("seq_len", "calib_tokens", "eval_tokens", "e2e_seq_len"):
            if getattr(self, name) < 8:
                raise ValueError(f"{name} must be >= 8, got {getattr(self, name)}")
        if self.eval_tokens < self.seq_len or self.calib_tokens < self.seq_len:
            raise ValueError(f"calib_tokens ({self.calib_tokens}) and eval_tokens ({self.eval_tokens}) must be >= seq_len ({self.seq_len})")
        if self.group_size < 0:
            raise ValueError(f"group_size must be >= 0, got {self.group_size}")
        if self.calib_text is None:
            from icml26.core.data.text import CORPORA

            if self.corpus not in CORPORA:
                raise ValueError(f"corpus {self.corpus!r} is not a built-in corpus; choose from {', '.join(CORPORA)} "
                                 "(or give calib_text and eval_text)")
        if not (0 < self.a_clip_ratio <= 1 and 0 < self.kv_clip_ratio <= 1):
            raise ValueError("a_clip_ratio and kv_clip_ratio must be in (0, 1]")
        if self.head_bits not in (8, 16):
            raise ValueError(f"head_bits must be 8 or 16, got {self.head_bits}")
        for name in ("local_steps", "e2e_steps", "greedy_prompts", "greedy_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.save_method not in METHODS or self.save_method == "fp":
            raise ValueError(f"save_method must be one of {', '.join(METHODS[1:])}, got {self.save_method!r}")
        if self.save_setting:
            parse_setting(self.save_setting)
        if self.save_method == "gptq":
            raise ValueError("save_method gptq: saving GPTQ's packed model is not supported yet (choose rtn, smoothquant, quarot or fptquant)")
        if self.gptq_block_size < 1 or not self.gptq_percdamp > 0:
            raise ValueError("gptq_block_size must be >= 1 and gptq_percdamp > 0")

    def active_settings(self) -> list[str]:
        return [s.upper() for s in self.settings if not self.bits or parse_setting(s)[0] == self.bits]

    def spec(self, setting: str):
        from icml26.methods.quantization.qmodel import QSpec

        w, a, kv = parse_setting(setting)
        return QSpec(wbits=w, abits=a, kvbits=kv, w_sym=self.w_sym, group_size=self.group_size,
                     w_clip_search=self.w_clip_search, a_sym=self.a_sym, act_granularity=self.act_granularity,
                     a_clip_ratio=self.a_clip_ratio, kv_clip_ratio=self.kv_clip_ratio, head_bits=self.head_bits)

    def weight_quant_note(self) -> str:
        g = "per-channel" if self.group_size == 0 else f"group {self.group_size}"
        return f"{g} {'sym' if self.w_sym else 'asym'}"


def check_group_size(group_size: int, dims: dict[str, int]) -> None:
    """InputError when ``group_size`` (0 = per channel; >= a dimension = per channel for it)
    does not divide an input dimension of the quantized linear layers. ``dims``: name -> size."""
    from icml26.core.errors import InputError

    bad = {n: k for n, k in dims.items() if group_size and group_size < k and k % group_size}
    if bad:
        named = ", ".join(f"{n}={k}" for n, k in bad.items())
        ok = sorted({g for g in (32, 64, 128, 256) if all(k % g == 0 or g >= k for k in dims.values())})
        hint = f"; e.g. {', '.join(map(str, ok))}" if ok else ""
        raise InputError(f"group_size {group_size} does not divide the model's linear input dimensions ({named}): "
                         f"choose 0 (per channel) or a divisor of every one of {sorted(set(dims.values()))}{hint}")


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
    """(calibration chunks, evaluation chunks, e2e chunks, source description)."""
    from icml26.core.data.text import load_corpus, read_text_file
    from icml26.methods.quantization import evaluate as E

    if (cfg.calib_text is None) != (cfg.eval_text is None):
        from icml26.core.errors import InputError

        raise InputError("give both calib_text and eval_text (or neither, to split a built-in corpus)")
    if cfg.calib_text is not None:
        calib_docs, eval_docs = [read_text_file(cfg.calib_text)], [read_text_file(cfg.eval_text)]
        src = f"calib={cfg.calib_text}, eval={cfg.eval_text}"
    else:
        calib_docs, eval_docs = E.split_corpus(load_corpus(cfg.corpus))
        src = f"{cfg.corpus}: doc i -> eval iff i % 10 == 9, else calibration"
    from icml26.core.errors import InputError

    try:
        cs = E.token_stream(tok, calib_docs, cfg.calib_tokens)
        es = E.token_stream(tok, eval_docs, cfg.eval_tokens)
    except ValueError as e:
        raise InputError(str(e)) from None
    return E.chunks(cs, cfg.seq_len), E.chunks(es, cfg.seq_len), E.chunks(cs, min(cfg.e2e_seq_len, cfg.seq_len)), src


# ----------------------------------------------------------------------------- methods
def prepare(method: str, fp_model, cfg: Config, calib: list, seed: int):
    """A deep copy of the FP model with ``method``'s function-preserving transforms applied.

    Returns (model, extras) where extras holds what the quantized forward needs
    (online_down_hadamard, dyn_scale) and FPTQuant's trainable state."""
    from icml26.methods.quantization import hadamard as had
    from icml26.methods.quantization import smoothquant as sq
    from icml26.methods.quantization import train as TR
    from icml26.methods.quantization import transforms as T

    model = copy.deepcopy(fp_model)
    extras: dict = {"online_down_hadamard": False, "dyn_scale": False}
    if method in ("fp", "rtn", "gptq"):
        return model, extras
    if method == "smoothquant":
        T.check_llama(model)  # folds 1/s into RMSNorm gains: LLaMA-style norms only
        sq.smooth(model, calib, cfg.smoothquant_alpha)
        return model, extras
    T.check_llama(model)
    dm = T.dims(model)
    rotate = method == "quarot" or cfg.fpt_rotate
    down_h = (method == "quarot" or cfg.fpt_down_hadamard) and had.has_hadamard(dm["I"])
    if rotate:
        if not had.has_hadamard(dm["D"]):
            raise ValueError(f"no Hadamard matrix of order hidden_size={dm['D']} is available")
        T.untie_embeddings(model)
        T.fuse_norms(model)
        T.rotate_residual(model, had.random_hadamard(dm["D"], seed))
    extras["online_down_hadamard"] = down_h
    if method == "quarot":
        T.value_hadamard(model)
        if down_h:
            T.down_hadamard(model)
        return model, extras
    # FPTQuant: trainable mergeable transforms
    import torch

    v_init = had.hadamard(dm["d"]) if rotate else None
    params = [T.FPTParams(dm, qk=cfg.fpt_qk, v=cfg.fpt_v, mlp=cfg.fpt_mlp, v_init=v_init) for _ in T.layers(model)]
    bases = T.base_weights(model)
    curve = TR.train_local(bases, params, dm, steps=cfg.local_steps, lr=cfg.local_lr, down_hadamard=down_h)
    with torch.no_grad():
        T.merge_into(model, bases, params, dm, down_hadamard=down_h)
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
        check_group_size(cfg.group_size, {n: m.in_features for n, m in fp_model.named_modules()
                                          if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head")})
    fp_model.eval()
    for p in fp_model.parameters():
        p.requires_grad_(False)
    arch = getattr(fp_model.config, "model_type", "?")
    calib, evalc, e2e_batches, src = load_text(cfg, tok)
    prompts = [c[:, : min(32, cfg.seq_len // 2)] for c in evalc[: cfg.greedy_prompts]]
    yield {"kind": "step", "stage": "data", "model": cfg.model, "arch": arch, "text": src,
           "calib_tokens": sum(c.numel() for c in calib), "eval_tokens": sum(c.numel() for c in evalc),
           "weight_quant": cfg.weight_quant_note(), "note": GGUF_NOTE, "load_s": round(time.time() - t0, 2)}

    # 2. FP reference
    t1 = time.time()
    fp_ppl, _, fp_top = E.perplexity(fp_model, evalc)
    fp_gen = E.greedy(fp_model, prompts, cfg.greedy_tokens) if prompts and cfg.greedy_tokens else []
    results: list[dict] = []
    if "fp" in cfg.methods:
        rec = {"kind": "result", "method": "fp", "setting": "FP32", "wbits": 32, "abits": 32, "kvbits": 32,
               "perplexity": fp_ppl, "top1_agreement": 1.0, "greedy_agreement": 1.0 if fp_gen else None,
               "size_bytes": model_size_bytes(fp_model, "fp", None), "time_s": round(time.time() - t1, 2)}
        results.append(rec)
        yield rec

    saved = None
    save_setting = cfg.save_setting.upper() if cfg.save_setting else next((s for s in settings if parse_setting(s)[0] in (4, 8)), None)
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
            # wrap in FP first (online Hadamard / S_n active) and check the function is preserved
            model = base
            QM.quantize_model(model, QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16),
                              online_down_hadamard=extras["online_down_hadamard"], dyn_scale=extras["dyn_scale"])
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
                        GQ.quantize_model_gptq(model, calib, bits=spec.wbits, sym=spec.w_sym, group_size=spec.group_size,
                                               clip_search=spec.w_clip_search, block_size=cfg.gptq_block_size,
                                               percdamp=cfg.gptq_percdamp, act_order=cfg.gptq_act_order)
                        QM.set_spec(model, spec)
                        done.add(key)
                    rec_extra = {"gptq_s": round(time.time() - tg, 2)}
                QM.calibrate_static(model, calib, spec)
                if method == "fptquant":
                    from icml26.methods.quantization import transforms as T

                    params = copy.deepcopy(extras["params"])
                    curve = TR.train_e2e(model, fp_model, extras["bases"], params, extras["dm"], e2e_batches,
                                         steps=cfg.e2e_steps, lr=cfg.e2e_lr, down_hadamard=extras["online_down_hadamard"])
                    if curve:
                        T.merge_into(model, extras["bases"], params, extras["dm"], down_hadamard=extras["online_down_hadamard"])
                        QM.calibrate_static(model, calib, spec)
                    lc = extras.get("local_curve") or []
                    rec_extra = {"local_loss_first": lc[0] if lc else None, "local_loss_last": lc[-1] if lc else None,
                                 "e2e_kl_first": curve[0] if curve else None, "e2e_kl_last": curve[-1] if curve else None}
                ppl, agree, _ = E.perplexity(model, evalc, fp_top1=fp_top)
                gen = E.greedy(model, prompts, cfg.greedy_tokens) if fp_gen else []
                rec = {"kind": "result", "method": method, "setting": setting, "wbits": spec.wbits, "abits": spec.abits,
                       "kvbits": spec.kvbits, "perplexity": ppl, "top1_agreement": agree,
                       "greedy_agreement": E.greedy_agreement(gen, fp_gen) if gen else None,
                       "size_bytes": model_size_bytes(model, method, spec), "weight_quant": cfg.weight_quant_note(),
                       "fp_drift": drift, "time_s": round(time.time() - t3 + prep_s / len(settings), 2), **rec_extra}
                results.append(rec)
                yield rec
                if out is not None and saved is None and method == cfg.save_method and setting == save_setting:
                    from icml26.methods.quantization import pack

                    if spec.wbits not in (4, 8):
                        raise InputError(f"only 4- and 8-bit weights are packed; cannot save {setting}")
                    path = Path(out) / "model"
                    pack.save_quantized(model, tok, path, spec, method=method, extras=extras, fp_perplexity=fp_ppl, perplexity=ppl)
                    saved = str(path)
                    yield {"kind": "step", "stage": "saved", "method": method, "setting": setting, "path": saved,
                           "perplexity": ppl}
                if method == "fptquant" and curve:
                    T.merge_into(model, extras["bases"], extras["params"], extras["dm"], down_hadamard=extras["online_down_hadamard"])
                bar.advance()
            del base, model
    # summary
    summ: dict = {"kind": "summary", "model": cfg.model, "fp_perplexity": fp_ppl, "n_results": len(results),
                  "eval_tokens": sum(c.numel() for c in evalc), "saved": saved, "time_s": round(time.time() - t0, 1)}
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
    yield {"kind": "step", "stage": "data", "model": cfg.model, "text": src, "eval_tokens": sum(c.numel() for c in evalc),
           "load_s": round(time.time() - t0, 2)}
    ppl, _, _ = E.perplexity(model, evalc)
    setting = f"W{qc['wbits']}A{qc['abits']}" + (f"KV{qc['kvbits']}" if qc["kvbits"] < 16 else "")
    from icml26.ops import quant as ops

    rec = {"kind": "result", "method": qc["method"], "setting": setting, "wbits": qc["wbits"], "abits": qc["abits"],
           "kvbits": qc["kvbits"], "perplexity": ppl, "saved_perplexity": qc.get("perplexity"),
           "size_bytes": qc["size_bytes"], "packed": True, "kernel": ops.isa(), "time_s": round(time.time() - t0, 2)}
    yield rec
    yield {"kind": "summary", "model": cfg.model, "perplexity": ppl, "saved_perplexity": qc.get("perplexity"),
           "n_results": 1, "time_s": round(time.time() - t0, 1)}
