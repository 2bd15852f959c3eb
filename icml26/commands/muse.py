"""``icml26 muse``: MuSe multipole semantic attention (arXiv 2509.10406; docs/muse.md), causal by
construction, against exact SDPA and the MoBA block baseline: isolated attention (bench), drop-in
perplexity (eval), and pretraining of a small LLaMA-style model (train).

Every subcommand reads the same settings (``recipes/muse/*.yaml`` with ``method: muse``;
``--set key=value``; ``--set help``).
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SetOpt, split_csv

muse_app = typer.Typer(
    help="MuSe multipole semantic attention: error and speed vs exact SDPA and block sparsity, drop-in perplexity, "
    "pretraining.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

MethodOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--method",
        help="sdpa | muse | muse-v1 | muse-noretrieval | block (repeatable or comma-separated).",
        show_default=False,
    ),
]
CtxOpt = Annotated[
    Optional[List[int]],
    typer.Option("--context-tokens", "-n", help="Context length in tokens (repeatable).", show_default=False),
]
TextOpt = Annotated[
    Optional[str],
    typer.Option(
        "--text",
        help="Your own UTF-8 text file instead of python-docs + GCIDE: bench / eval read the whole file "
        "(eval_split auto = all); train splits it train/val by the documented rule.",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="llama (SmolLM2-135M, built in) | a local LLaMA-architecture HF folder | a .gguf file.",
        show_default=False,
    ),
]
BENCH_COLS = [
    "method",
    "context_tokens:N",
    "seconds",
    "speedup_vs_sdpa:speed-up",
    "rel_squared_error:rel. sq. error",
    "sparsity",
    "backend",
]
EVAL_COLS = ["method", "context_tokens:N", "perplexity", "perplexity_ratio:ratio", "seconds", "windows"]
TRAIN_COLS = ["method", "context_tokens:N", "final_loss", "val_loss", "wall_s", "steps"]


CONFIG = "icml26.methods.attention.config:Config"  # torch-free: settings are checked before torch loads


def _ctx(context_tokens):
    from icml26.core.errors import InputError

    if context_tokens and any(n < 2 for n in context_tokens):
        raise InputError(f"--context-tokens must be >= 2, got {list(context_tokens)}")
    return tuple(context_tokens) if context_tokens else None


@muse_app.command("bench")
def bench(
    method: MethodOpt = None,
    context_tokens: CtxOpt = None,
    text: TextOpt = None,
    model: ModelOpt = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Isolated attention on real q/k/v (one SmolLM2 layer, real test text): seconds, speed-up vs
    SDPA, relative squared error and sparsity, one `result` per (method, context_tokens).

    Example: icml26 muse bench -n 4096 -n 8192 --method sdpa,muse,block
    """
    from icml26.core.preamble import prepare

    run = prepare(
        CONFIG,
        "muse bench",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # the C++ kernel and its timings are CPU ones
        out=out,
        methods=split_csv(method),
        context_tokens=_ctx(context_tokens),
        text=text,
        model=model,
    )
    from icml26.methods.attention.config import preflight

    preflight(run.cfg, "bench")  # inputs checked before torch loads
    from icml26.core.output import stream
    from icml26.methods.attention import api

    stream(api.run_bench(run.cfg, seed=run.seed), run=run, quiet=quiet, columns=BENCH_COLS)


@muse_app.command("eval")
def eval_(
    method: MethodOpt = None,
    context_tokens: CtxOpt = None,
    text: TextOpt = None,
    model: ModelOpt = None,
    windows: Annotated[
        Optional[int], typer.Option("--windows", help="Test windows per context length.", min=1, show_default=False)
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Perplexity of a pretrained LLaMA-style model with attn_implementation="muse" (sdpa is
    always run as the reference), one `result` per (method, context_tokens).

    Example: icml26 muse eval --model llama -n 2048 -n 8192 --windows 2 --method muse,block
    """
    from icml26.core.preamble import prepare

    run = prepare(
        CONFIG,
        "muse eval",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        methods=split_csv(method),
        context_tokens=_ctx(context_tokens),
        text=text,
        model=model,
        windows=windows,
    )
    from icml26.methods.attention.config import preflight

    preflight(run.cfg, "eval")  # inputs checked before torch loads
    from icml26.core.output import stream
    from icml26.methods.attention import api

    stream(api.run_eval(run.cfg, seed=run.seed, device=run.device), run=run, quiet=quiet, columns=EVAL_COLS)


@muse_app.command("train")
def train(
    method: MethodOpt = None,
    context_tokens: Annotated[
        Optional[int],
        typer.Option("--context-tokens", "-n", help="Training context in tokens (bytes).", min=2, show_default=False),
    ] = None,
    text: TextOpt = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Optimizer steps per method.", min=1, show_default=False)
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    resume: ResumeOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Pretrain a small LLaMA-style model per method at long context (same seed, data and steps);
    `step` records, one `result` per method; resumable with --out/--resume; runs under
    `torchrun --nproc_per_node 2` (gloo).

    Example: icml26 muse train -n 8192 --steps 200 --method sdpa,muse --out runs/muse-train
    """
    from icml26.core.dist import drain_unless_main, is_main
    from icml26.core.preamble import prepare

    run = prepare(
        CONFIG,
        "muse train",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        # torchrun: rank 0 checks --out (the others could see the folder rank 0 has just begun)
        out=out if resume or is_main() else None,
        resume=resume,
        resumable=True,
        methods=split_csv(method),
        context_tokens=(context_tokens,) if context_tokens else None,
        text=text,
        train_steps=steps,
    )
    from icml26.methods.attention.config import preflight

    preflight(run.cfg, "train")  # inputs checked before torch loads
    from icml26.core.output import stream
    from icml26.methods.attention import api

    gen = api.run_train(run.cfg, seed=run.seed, device=run.device, out=out, previous=run.previous)
    if drain_unless_main(gen):  # other torchrun ranks train silently; rank 0 writes
        return
    stream(gen, run=run, quiet=quiet, columns=TRAIN_COLS)
