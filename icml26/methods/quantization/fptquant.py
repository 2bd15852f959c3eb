"""``icml26 quantize``: FPTQuant (van Breugel, Bondarenko, Whatmough, Nagel; ICML 2026; arXiv
2506.04985) beside the baselines of the field in one harness: the same model, calibration text,
quantizers and evaluation for every method (methods and variants: config.py, prepare.py).

Steps of ``run``:
 1. load the model and the text; split calibration / evaluation (textdata.load_text);
 2. evaluate the FP model (perplexity, top-1 predictions, greedy continuations) and estimate
    the run's time from that measured rate (estimate.py);
 3. per method: apply its function-preserving transforms once (prepare.prepare), checking that
    the FP perplexity is unchanged up to float error (``fp_drift``); a model the transforms
    cannot take gives a ``skipped`` record with the reason;
 4. per setting, on a fresh copy of the prepared model (no state carried between settings):
    wrap the linears with quantizers (qmodel), run FPTQuant's end-to-end stage, calibrate
    static activation ranges, evaluate;
 5. optionally save the packed model of one (method, setting) to ``--out`` (pack.py; the
    fptquant-merged model is written in the compressed-tensors format, export.py).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from icml26.core.data.lm import load_causal_lm
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.core.seed import seed_everything
from icml26.core.verdict import verdict
from icml26.methods.quantization import evaluate as E
from icml26.methods.quantization import export as X
from icml26.methods.quantization import gptq as GQ
from icml26.methods.quantization import pack
from icml26.methods.quantization import qmodel as QM
from icml26.methods.quantization import train as TR
from icml26.methods.quantization import transforms as T
from icml26.methods.quantization.config import (  # noqa: F401  (the command's names)
    DEFAULT_METHODS,
    FPT_METHODS,
    FPT_NAMES,
    FPT_VARIANTS,
    GGUF_NOTE,
    HONOURED_BY,
    METHODS,
    NEEDS_QUANTIZED,
    QUANTIZED,
    STANDARD_SETTINGS,
    Config,
    check_group_size,
    check_settings,
    check_text_tokens,
    model_dims,
    parse_setting,
    prepare_key,
    result_name,
    stage_steps,
    variant_of,
)
from icml26.methods.quantization.estimate import COST, LONG_RUN_S, estimate_cpu_seconds  # noqa: F401
from icml26.methods.quantization.prepare import calibration_use, model_size_bytes, prepare, stages, tied_embeddings
from icml26.methods.quantization.textdata import eval_chunks, load_text, shared_lines
from icml26.ops import quant as ops


def run(cfg: Config, *, seed: int = 0, device: str = "cpu", out: str | None = None) -> Iterator[dict]:
    seed_everything(seed)
    settings = cfg.active_settings()
    t0, c0 = time.time(), time.process_time()
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
        "eval_split": cfg.eval_split,
        "calib_tokens": sum(c.numel() for c in calib),
        "eval_tokens": sum(c.numel() for c in evalc),
        "weight_quant": cfg.weight_quant_note(),
        "group_size": cfg.group_size,
        "note": GGUF_NOTE,
        "load_s": round(time.time() - t0, 2),
    }
    if cfg.eval_split == "validation":  # scored text: held out of the calibration source, not the evaluation text
        data["scored"] = "validation"
        data["calib_validation_shared_lines"] = shared_lines(tok, calib, evalc)
        data["validation_eval_shared_lines"] = shared_lines(tok, evalc, eval_chunks(cfg, tok))
    elif (cfg.calib_text is None) != (cfg.eval_text is None):  # a user file against the corpus: no shared text
        data["calib_eval_shared_lines"] = shared_lines(tok, calib, evalc)
    yield data

    # 2. FP reference
    t1, c1 = time.time(), time.process_time()
    fp_nll: list[float] = []
    fp_ppl, _, fp_top = E.perplexity(fp_model, evalc, chunk_nll=fp_nll)
    t_eval, c_eval = time.time() - t1, time.process_time() - c1
    fp_gen = E.greedy(fp_model, prompts, cfg.greedy_tokens) if prompts and cfg.greedy_tokens else []
    t_greedy, c_greedy = time.time() - t1 - t_eval, time.process_time() - c1 - c_eval
    done_cpu = time.process_time() - c0
    est_cpu = estimate_cpu_seconds(cfg, eval_cpu_s=c_eval, greedy_cpu_s=c_greedy, done_cpu_s=done_cpu)
    # wall time: the rest of the CPU estimate at the wall / CPU ratio the FP evaluation just had
    est = time.time() - t0 + (est_cpu - done_cpu) * (t_eval + t_greedy) / max(c_eval + c_greedy, 1e-9)
    yield {
        "kind": "step",
        "stage": "estimate",
        "estimated_s": round(est, 1),
        "estimated_cpu_s": round(est_cpu, 1),
        "fp_eval_s": round(t_eval, 2),
        "fp_eval_cpu_s": round(c_eval, 2),
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
            **ppl_interval(fp_nll, evalc),
            "top1_agreement": 1.0,
            "greedy_agreement": 1.0 if fp_gen else None,
            "size_bytes": model_size_bytes(fp_model, "fp", None),
            "group_size": None,
            "transforms": [],
            "stages": [],
            "calibration_use": [],
            "eval_split": cfg.eval_split,
            "seeds": [seed],
            "time_s": round(time.time() - t1, 2),
        }
        results.append(rec)
        yield rec

    saved = None
    skipped: list[dict] = []
    save_method, save_setting = cfg.save_target()
    qmethods = [m for m in cfg.methods if m != "fp"]
    fp_first = None
    gptq_done: dict[tuple, list] = {}
    prepared: dict[tuple, tuple] = {}
    with progress(len(qmethods) * len(settings), "quantize") as bar:
        for method in qmethods:
            t2 = time.time()
            seed_everything(seed)  # each method starts from the same random state, whatever ran before
            key = prepare_key(method, cfg)
            if key in prepared:  # e.g. fptquant-merged and fptquant-merged-local: one local stage, reused
                base, extras, prep_only_s = copy.deepcopy(prepared[key])
            else:
                try:
                    base, extras = prepare(method, fp_model, cfg, calib, seed)
                except ValueError as e:
                    rec = {"kind": "skipped", "method": method, "reason": str(e)}
                    skipped.append({"method": method, "reason": str(e)})
                    yield rec
                    bar.advance(len(settings))
                    continue
                prep_only_s = time.time() - t2
                if key is not None and sum(prepare_key(x, cfg) == key for x in qmethods) > 1:
                    prepared[key] = copy.deepcopy((base, extras, prep_only_s))
            # wrap in FP first (online Hadamard / S_n active) and check the function is preserved
            QM.quantize_model(
                base,
                QM.QSpec(wbits=16, abits=16, kvbits=16, head_bits=16),
                online_down_hadamard=extras["online_down_hadamard"],
                dyn_scale=extras["dyn_scale"],
            )
            drift = None
            if method not in ("rtn", "gptq"):
                ppl_t, _, _ = E.perplexity(base, evalc[:1])
                if fp_first is None:
                    fp_first = E.perplexity(fp_model, evalc[:1])[0]
                drift = abs(ppl_t - fp_first) / fp_first
            if cfg.head_bits < 16:
                QM.quantize_embeddings(base, cfg.head_bits)
            prep_s = time.time() - t2
            for setting in settings:
                t3 = time.time()
                seed_everything(seed)
                spec = cfg.spec(setting)
                model = copy.deepcopy(base)  # a fresh copy: no state carried from another setting
                QM.set_spec(model, spec)
                rec_extra: dict = {}
                if method == "gptq" and spec.wbits < 16:
                    tg = time.time()
                    key = (spec.wbits, spec.group_size, spec.w_sym)
                    if key in gptq_done:  # GPTQ weights depend on the weight grid only: shared by A/KV settings
                        for (_, ql), fw in zip(QM.quant_linears(model), gptq_done[key]):
                            ql.fixed_weight = fw
                    else:
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
                        gptq_done[key] = [ql.fixed_weight for _, ql in QM.quant_linears(model)]
                    QM.set_spec(model, spec)
                    rec_extra = {"gptq_s": round(time.time() - tg, 2)}
                QM.calibrate_static(model, calib, spec)
                te = time.time()
                e2e_steps = stage_steps(method, cfg)[1]
                if method in FPT_NAMES:
                    curve = []
                    if e2e_steps:
                        params = copy.deepcopy(extras["params"])
                        curve = TR.train_e2e(
                            model,
                            fp_model,
                            extras["bases"],
                            params,
                            extras["dm"],
                            e2e_batches,
                            steps=e2e_steps,
                            lr=cfg.e2e_lr,
                            down_hadamard=extras["online_down_hadamard"],
                        )
                        if curve:
                            T.merge_into(
                                model,
                                extras["bases"],
                                params,
                                extras["dm"],
                                down_hadamard=extras["online_down_hadamard"],
                            )
                            QM.calibrate_static(model, calib, spec)
                    lc = extras.get("local_curve") or []
                    rec_extra = {
                        "local_loss_first": lc[0] if lc else None,
                        "local_loss_last": lc[-1] if lc else None,
                        "local_train_s": round(prep_only_s, 2),
                    }
                    if e2e_steps:
                        rec_extra.update(
                            e2e_kl_first=curve[0] if curve else None,
                            e2e_kl_last=curve[-1] if curve else None,
                            e2e_train_s=round(time.time() - te, 2),
                        )
                nll: list[float] = []
                ppl, agree, _ = E.perplexity(model, evalc, fp_top1=fp_top, chunk_nll=nll)
                gen = E.greedy(model, prompts, cfg.greedy_tokens) if fp_gen else []
                rec = {
                    "kind": "result",
                    "method": result_name(method, cfg),
                    "variant": variant_of(method),
                    "setting": setting,
                    "wbits": spec.wbits,
                    "abits": spec.abits,
                    "kvbits": spec.kvbits,
                    "perplexity": ppl,
                    **ppl_interval(nll, evalc),
                    "top1_agreement": agree,
                    "greedy_agreement": E.greedy_agreement(gen, fp_gen) if gen else None,
                    "size_bytes": model_size_bytes(model, method, spec),
                    "group_size": cfg.group_size if spec.wbits < 16 else None,
                    "weight_quant": cfg.weight_quant_note(spec.wbits),
                    "clip_search": bool(spec.w_clip_search and spec.wbits < 16),
                    "transforms": list(extras["transforms"]),
                    "stages": stages(method, cfg),
                    "calibration_use": calibration_use(method, cfg, spec.abits, spec.wbits),
                    "eval_split": cfg.eval_split,
                    "tied_embeddings": tied_embeddings(model),
                    "fp_drift": drift,
                    "seeds": [seed],
                    "time_s": round(time.time() - t3 + prep_s / len(settings), 2),
                    **rec_extra,
                }
                if extras.get("not_applied"):
                    rec["not_applied"] = extras["not_applied"]
                results.append(rec)
                yield rec
                if out is not None and saved is None and method == save_method and setting == save_setting:
                    if spec.wbits not in (4, 8):
                        raise InputError(f"only 4- and 8-bit weights are packed; cannot save {setting}")
                    path = Path(out) / "model"
                    if X.exportable(method, spec):  # transformers loads it without icml26
                        X.save_compressed(
                            model, tok, path, spec, method=rec["method"], transforms=rec["transforms"], perplexity=ppl
                        )
                        fmt = X.FORMAT
                    else:  # online Hadamard / S_n / asymmetric zero points: icml26's own loader and lean runtime
                        pack.save_quantized(
                            model,
                            tok,
                            path,
                            spec,
                            method=rec["method"],
                            extras=extras,
                            fp_perplexity=fp_ppl,
                            perplexity=ppl,
                        )
                        fmt = pack.FORMAT
                    saved = str(path)
                    yield {
                        "kind": "step",
                        "stage": "saved",
                        "method": rec["method"],
                        "setting": setting,
                        "path": saved,
                        "format": fmt,
                        "perplexity": ppl,
                    }
                del model
                bar.advance()
            del base
    yield summary(
        cfg, results, skipped, settings, fp_ppl=fp_ppl, evalc=evalc, saved=saved, t0=t0, est=est, c0=c0, est_cpu=est_cpu
    )


# Methods whose perplexity does not depend on the seed (no random rotation, no training):
# compared on the same text, their point values are the whole answer (exact verdict).
DETERMINISTIC = ("fp", "rtn", "gptq", "smoothquant")


def ppl_interval(chunk_nll: list[float], evalc: list) -> dict:
    """A result's ``chunk_nll`` (mean NLL per evaluation chunk), ``perplexity_ci`` (95% over the
    chunks, ``evaluate.chunk_interval``; None with one chunk) and ``perplexity_ci_method``."""
    return {
        "chunk_nll": [round(x, 6) for x in chunk_nll],
        "perplexity_ci": E.chunk_interval(chunk_nll),
        "perplexity_ci_method": E.CI_METHOD.format(n=len(evalc), t=evalc[0].shape[-1] if evalc else 0),
    }


def summary(cfg: Config, results: list[dict], skipped: list[dict], settings: list[str], **kw) -> dict:
    """The run's summary: per setting ``best_<setting>`` / ``tied_with_best_<setting>``
    (core.verdict on perplexity) with ``verdict_<setting>`` saying on what: exact point values when
    every compared method is deterministic (DETERMINISTIC, all on the same evaluation text), else
    the 95% intervals over evaluation chunks (``perplexity_ci``), a winner only where they separate.
    For each FPTQuant variant, its perplexity over the best baseline's
    (``<variant>_vs_best_baseline_<setting>``, <= 1 = at least as good) with a paired 95% interval
    over the chunks (``..._ci``); the methods skipped, with their reasons."""
    summ: dict = {
        "kind": "summary",
        "model": cfg.model,
        "fp_perplexity": kw["fp_ppl"],
        "n_results": len(results),
        "eval_tokens": sum(c.numel() for c in kw["evalc"]),
        "group_size": cfg.group_size,
        "eval_split": cfg.eval_split,
        "skipped": skipped,
        "saved": kw["saved"],
        "time_s": round(time.time() - kw["t0"], 1),
        "estimated_s": round(kw["est"], 1),
        "cpu_s": round(time.process_time() - kw["c0"], 1),
        "estimated_cpu_s": round(kw["est_cpu"], 1),
    }
    for setting in settings:
        rs = [r for r in results if r["setting"] == setting]
        if not rs:
            continue
        exact = all(r["method"] in DETERMINISTIC for r in rs)
        v = verdict(rs, "perplexity", "method", ci_key="perplexity_ci", exact=exact, metric=setting)
        summ[f"best_{setting}"], summ[f"tied_with_best_{setting}"] = (
            v[f"best_{setting}"],
            v[f"tied_with_best_{setting}"],
        )
        summ[f"verdict_{setting}"] = (
            "exact: deterministic methods, point values on the same evaluation text"
            if exact
            else "95% intervals over evaluation chunks (perplexity_ci): seed-dependent methods ("
            + ", ".join(r["method"] for r in rs if r["method"] not in DETERMINISTIC)
            + ") ran one seed; a winner only where the intervals separate"
        )
        brs = [r for r in rs if r["method"] not in FPT_NAMES and r["method"] != "fp"]
        base = [r["perplexity"] for r in brs]
        for r in rs:
            if r["method"] in FPT_NAMES and base:
                b = min(brs, key=lambda x: x["perplexity"])
                key = f"{r['method']}_vs_best_baseline_{setting}"
                summ[key] = round(r["perplexity"] / b["perplexity"], 4)
                ci = E.paired_ratio_interval(r.get("chunk_nll", []), b.get("chunk_nll", []))
                summ[key + "_ci"] = None if ci is None else [round(ci[0], 4), round(ci[1], 4)]
                if any("e2e" in u for u in r.get("calibration_use", [])) and not any(
                    b.get("calibration_use") for b in brs
                ):  # the ratio mixes the transforms with training on data no baseline here had
                    summ.setdefault("unequal_calibration", []).append(
                        f"{r['method']} {setting}: trained end to end on the calibration text; no baseline in "
                        "this run used it (add --method gptq for one that does)"
                    )
    return summ


def is_packed_folder(name_or_path: str) -> bool:
    """True for a folder written by ``quantize --out`` (icml26's packed format or the export)."""
    return pack.is_packed_folder(name_or_path) or X.is_export_folder(name_or_path)


def run_packed(cfg: Config, *, seed: int = 0) -> Iterator[dict]:
    """Re-evaluate a saved packed model on the same evaluation text (real INT4/INT8 weights)."""
    seed_everything(seed)
    t0 = time.time()
    exported = X.is_export_folder(cfg.model)
    if exported:  # loaded by transformers (compressed-tensors), as a user would
        model, tok = load_causal_lm(cfg.model)
        qc = X.read_icml26(cfg.model)
    else:
        model, tok, qc = pack.load_quantized(cfg.model)
    if tok is None:
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
    nll: list[float] = []
    ppl, _, _ = E.perplexity(model, evalc, chunk_nll=nll)
    setting = f"W{qc['wbits']}A{qc['abits']}" + (f"KV{qc['kvbits']}" if qc["kvbits"] < 16 else "")

    rec = {
        "kind": "result",
        "method": qc["method"],
        "setting": setting,
        "wbits": qc["wbits"],
        "abits": qc["abits"],
        "kvbits": qc["kvbits"],
        "perplexity": ppl,
        **ppl_interval(nll, evalc),
        "saved_perplexity": qc.get("perplexity"),
        "size_bytes": qc["size_bytes"],
        "group_size": qc.get("group_size"),
        "packed": True,
        "format": qc.get("format", X.FORMAT if exported else pack.FORMAT),
        "kernel": None if exported else ops.isa(),  # the export runs transformers' dense layers
        "seeds": [seed],
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
