"""``icml26 jacobian-spectrum``: Lyapunov exponents, gaps and alignment of deep Jacobians."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, SeedOpt, SetOpt, split_csv


def jacobian_spectrum(
    arch: Annotated[
        Optional[str], typer.Option("--arch", help="mlp | fgln (fixed-gates linear net) | cnn.", show_default=False)
    ] = None,
    width: Annotated[
        Optional[int],
        typer.Option(
            "--width", help="Hidden units (cnn: channels on 14x14 maps); default 256.", min=2, show_default=False
        ),
    ] = None,
    depth: Annotated[
        Optional[List[str]],
        typer.Option(
            "--depth", help="Core depths L, comma-separated or repeated (default 8,16,32,64).", show_default=False
        ),
    ] = None,
    init: Annotated[
        Optional[str], typer.Option("--init", help="he | lecun | xavier | orthogonal.", show_default=False)
    ] = None,
    act: Annotated[Optional[str], typer.Option("--act", help="relu | leaky_relu.", show_default=False)] = None,
    top_k: Annotated[
        Optional[int],
        typer.Option("--top-k", help="Exponents / singular values measured (default 16).", min=1, show_default=False),
    ] = None,
    gates: Annotated[
        Optional[List[str]],
        typer.Option(
            "--gates",
            help="fixed (masks of one input) and/or free (Bernoulli masks redrawn per layer).",
            show_default=False,
        ),
    ] = None,
    train: Annotated[
        Optional[str],
        typer.Option(
            "--train",
            help="Also measure after training on mnist | fashion-mnist | your images (.npz, IDX, folder).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            help="Your own MLP as .safetensors (2-D ...weight tensors in name order, optional ...bias).",
            show_default=False,
        ),
    ] = None,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "auto",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Deep Jacobian spectra of piecewise-linear nets (Haas et al., ICML 2026, arXiv 2602.12384).

    For each depth: Lyapunov exponents of the top k singular values by QR along the product
    of masked layers, against the masked model's closed form; finite-depth gap ratios;
    singular-vector alignment of partial products; at init and after training (step records
    carry the singular-value trajectories). One `result` per (arch, depth, phase, gates).

    Example: icml26 jacobian-spectrum --arch mlp --width 256 --depth 8,16,32,64 --init he --top-k 16
    --train mnist --out runs/js
    """
    from icml26.core.errors import InputError
    from icml26.core.output import stream
    from icml26.core.preamble import parse_numbers, prepare

    run = prepare(
        "icml26.methods.theory.spectrum_config:Config",
        "jacobian-spectrum",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        devices=("cpu",),  # the spectra are measured on the CPU
        out=out,
        arch=arch,
        width=width,
        depths=parse_numbers(depth, "--depth", int),
        init=init,
        act=act,
        top_k=top_k,
        gates=split_csv(gates),
        train=train,
        model=model,
    )
    cfg, s = run.cfg, run.seed
    from icml26.methods.theory.api import spectrum as m

    user = None
    if cfg.model is not None:
        user = m.load_user_mlp(cfg.model)
        if cfg.top_k > min(w.shape[0] for w in user[0]):
            raise InputError(
                f"top_k {cfg.top_k} exceeds the narrowest layer of {cfg.model!r} ({min(w.shape[0] for w in user[0])} "
                "units)"
            )
        m.probe_inputs(cfg, user[0][0].shape[1], s)
    else:
        m.probe_inputs(cfg, m.check_train_data(cfg) if cfg.train is not None else 784, s)
    stream(
        m.run(cfg, seed=s, device="cpu", user_model=user),
        run=run,
        quiet=quiet,
        columns=list(m.COLUMNS),
        plot=m.plot,
    )
