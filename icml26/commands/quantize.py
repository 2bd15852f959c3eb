"""``icml26 quantize``: FPTQuant function-preserving transforms + INT4/INT8 quantization of a
LLaMA-architecture model, beside RTN, GPTQ, SmoothQuant and QuaRot-style rotation."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt, split_csv


def quantize(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="llama (SmolLM2-135M, default) | gemma3-270m | an HF folder | a .gguf | a folder saved by `quantize --out` (re-evaluated).", show_default=False)] = None,
    bits: Annotated[Optional[int], typer.Option("--bits", "-b", help="Keep only the settings with this weight width (4 or 8; default: all settings).", show_default=False)] = None,
    method: Annotated[Optional[List[str]], typer.Option("--method", help="fp | rtn | gptq | smoothquant | quarot | fptquant (repeatable or comma-separated; default all).", show_default=False)] = None,
    setting: Annotated[Optional[List[str]], typer.Option("--setting", help="W4A16 | W4A8 | W4A4 | W4A4KV4 | W8A8 | W<b>A<b>[KV<b>] (repeatable).", show_default=False)] = None,
    calib_text: Annotated[Optional[str], typer.Option("--calib-text", help="Your own plain-text calibration file (needs --eval-text).", show_default=False)] = None,
    eval_text: Annotated[Optional[str], typer.Option("--eval-text", help="Your own plain-text evaluation file (needs --calib-text).", show_default=False)] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: Annotated[str, typer.Option("--device", help="cpu (auto = cpu): the quantize pipeline runs on the CPU; cuda is not supported here yet.")] = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Quantize a real LLM with FPTQuant and the baselines; perplexity on held-out real text.

    One result record per (method, setting): perplexity, top-1 / greedy agreement with the
    FP model, size in bytes. --out saves the packed INT4/INT8 model (safetensors) of
    save_method/save_setting; pass that folder back as --model to re-evaluate it.

    Example: icml26 quantize --model llama --bits 4 --recipe recipes/quantize/smollm2.yaml
    """
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.recipe import recipe_seed, resolve
    from icml26.methods.quantization import fptquant as m

    methods = split_csv(method)
    settings = tuple(x.upper() for x in split_csv(setting)) if setting else None
    cfg = resolve(m.Config, "quantize", recipe, set_, model=model, bits=bits, methods=methods, settings=settings,
                  calib_text=calib_text, eval_text=eval_text)
    if device not in ("cpu", "auto"):
        raise InputError(f"--device {device!r}: quantize runs on the CPU; use --device cpu (or auto)")
    if (cfg.calib_text is None) != (cfg.eval_text is None):
        raise InputError("--calib-text and --eval-text go together (or neither, to split a built-in corpus)")
    for f in (cfg.calib_text, cfg.eval_text):
        if f is not None:
            from icml26.core.data.text import read_text_file

            read_text_file(f)
    packed = m.is_packed_folder(cfg.model)
    if not packed:
        from icml26.core.data.lm import model_path

        mdir = model_path(cfg.model)  # bad path / corrupt files / missing package -> exit 2 before any output
        if cfg.group_size:
            m.check_group_size(cfg.group_size, m.model_dims(mdir))  # before the model load
    s = recipe_seed(recipe, "quantize", seed) or 0
    cols = ["method", "setting", "wbits", "abits", "kvbits", "perplexity", "top1_agreement", "greedy_agreement", "size_bytes", "time_s"]
    gen = m.run_packed(cfg, seed=s) if packed else m.run(cfg, seed=s, out=out)
    stream(gen, command="quantize", config=cfg, seed=s, out=out, quiet=quiet, columns=cols)
