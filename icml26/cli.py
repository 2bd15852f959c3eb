"""The ``icml26`` command line.

Each subcommand is one entry of ``COMMANDS``: (name, "module:attribute", help panel).
The attribute is a Typer command function, or a ``typer.Typer`` for a command group.
Command modules import only typer and ``icml26.core.options`` at import time, so
``icml26 --help`` loads no torch.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from icml26 import __version__

COMMANDS: list[tuple[str, str, str]] = [
    # name            module:attribute                              panel
    ("env", "icml26.commands.env:env", "Toolkit"),
    ("prepare-data", "icml26.commands.prepare_data:prepare_data", "Toolkit"),
    ("bai", "icml26.commands.bai:bai", "Pure exploration (VarDE)"),
    ("quantize", "icml26.commands.quantize:quantize", "LLM quantization (FPTQuant)"),
    ("evict-kv", "icml26.commands.evict_kv:evict_kv", "KV-cache eviction (CapKV)"),
    ("train-lfm", "icml26.commands.lfm:train_lfm", "Latent flow matching (LFM stability)"),
    ("sample-lfm", "icml26.commands.lfm:sample_lfm", "Latent flow matching (LFM stability)"),
    ("mcts", "icml26.commands.mcts:mcts", "Pure exploration (VarDE)"),
    ("bpi", "icml26.commands.bpi:bpi", "Pure exploration (VarDE)"),
    ("filter-data", "icml26.commands.filter_data:filter_app", "Data"),
    ("probe-syntax", "icml26.commands.probe_syntax:probe_syntax", "Interpretability"),
    ("traffic", "icml26.commands.traffic:traffic_app", "Traffic forecasting (MiniTraffic)"),
    ("sng", "icml26.commands.sng:sng", "Scientific ML (SNG / SPRING)"),
    ("jacobian-spectrum", "icml26.commands.jacobian_spectrum:jacobian_spectrum", "Theory as measurement"),
    ("equivariance", "icml26.commands.equivariance:equivariance", "Theory as measurement"),
    (
        "modality-pairing",
        "icml26.commands.modality_pairing:modality_pairing",
        "Multimodal learning (stochastic pairing)",
    ),
    ("geo-fusion", "icml26.commands.geo_fusion:geo_fusion_app", "Spatial reasoning (GeoThinker SGF)"),
    ("muse", "icml26.commands.muse:muse_app", "Efficient attention (MuSe)"),
    ("icr", "icml26.commands.icr:icr_app", "Diffusion representations (ICR)"),
    ("dsac-aid", "icml26.commands.dsac_aid:dsac_aid", "Reinforcement learning (DSAC-AID)"),
    ("bfq", "icml26.commands.bfq:bfq_app", "Offline reinforcement learning (BFQ)"),
    ("hdr-gs", "icml26.commands.hdr_gs:hdr_gs_app", "HDR novel-view synthesis (Expo-GS)"),
    ("mamoe", "icml26.commands.mamoe:mamoe_app", "Speech-text MoE (MoST MAMoE)"),
    ("fed-lora", "icml26.commands.fed_lora:fed_lora", "Federated LLM fine-tuning (Het-CPFLoRA)"),
]

# The Config of every command that takes settings (recipe, --set): "command [subcommand]" ->
# "module:Class". tests/test_lifecycle.py checks the lifecycle rules (help on every field, sized
# settings refused up front...) over this table; a new command adds its line here.
CONFIGS: dict[str, str] = {
    "bai": "icml26.methods.exploration.bai:Config",
    "quantize": "icml26.methods.quantization.config:Config",
    "evict-kv": "icml26.methods.kvcache.config:Config",
    "train-lfm": "icml26.methods.lfm.config:Config",
    "sample-lfm": "icml26.methods.lfm.sample_config:SampleConfig",
    "mcts": "icml26.methods.exploration.mcts:Config",
    "bpi": "icml26.methods.exploration.bpi:Config",
    "filter-data make-corpus": "icml26.methods.filtering.corpus:CorpusConfig",
    "filter-data train": "icml26.methods.filtering.classifiers:TrainConfig",
    "filter-data analyze": "icml26.methods.filtering.analysis:AnalyzeConfig",
    "filter-data proxy": "icml26.methods.filtering.proxy:ProxyConfig",
    "probe-syntax": "icml26.methods.probing.syntax_semantics:Config",
    "traffic run": "icml26.methods.traffic.config:Config",
    "sng": "icml26.methods.pinn.config:Config",
    "jacobian-spectrum": "icml26.methods.theory.spectrum_config:Config",
    "equivariance": "icml26.methods.theory.equivariance_config:Config",
    "modality-pairing": "icml26.methods.multimodal.config:Config",
    "geo-fusion make-bench": "icml26.methods.spatial.bench:BenchConfig",
    "geo-fusion train": "icml26.methods.spatial.config:Config",
    "muse bench": "icml26.methods.attention.config:Config",
    "muse eval": "icml26.methods.attention.config:Config",
    "muse train": "icml26.methods.attention.config:Config",
    "icr analyze": "icml26.methods.diffusion.config:AnalyzeConfig",
    "icr train": "icml26.methods.diffusion.config:TrainConfig",
    "dsac-aid": "icml26.methods.rl.dsac_config:Config",
    "bfq make-dataset": "icml26.methods.rl.offline_config:MakeConfig",
    "bfq train": "icml26.methods.rl.offline_config:Config",
    "hdr-gs train": "icml26.methods.splatting.config:Config",
    "mamoe train": "icml26.methods.speech.config:Config",
    "fed-lora": "icml26.methods.federated.config:Config",
}

app = typer.Typer(
    name="icml26",
    help="Methods of ICML 2026 papers, beside the baselines of their fields, on real models and data.\n\n"
    "Every command prints JSON lines on stdout (config, results, summary) and a table on stderr.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"icml26 {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """icml26 command line."""


def _os_error_line(e: BaseException) -> str | None:
    """One line for a file-system refusal (no permission, read-only, disk full), else None."""
    import errno

    if not isinstance(e, OSError):
        return None
    if not isinstance(e, PermissionError) and e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC):
        return None
    where = f": {str(e.filename)!r}" if getattr(e, "filename", None) else ""
    return f"icml26: error: {e.strerror or e}{where}"


def _one_line(e: BaseException) -> str:
    """An InputError's message on one line: newlines (a file name, a value shown as typed)
    become spaces, so every bad input stays one line on stderr whatever the parser said."""
    return " ".join(str(e).split())


def _guard(fn):
    """Map InputError (and a refused write: no permission, read-only, disk full) raised by a
    command to one line on stderr and exit code 2; an empty --out is refused the same way."""
    import functools

    if getattr(fn, "_icml26_guarded", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from icml26.core.errors import InputError

        try:
            if isinstance(kwargs.get("out"), str) and not kwargs["out"].strip():
                raise InputError("--out is empty; give a directory path")
            return fn(*args, **kwargs)
        except InputError as e:
            if os.environ.get("ICML26_DEBUG"):
                raise
            if os.environ.get("RANK", "0").strip() in ("", "0"):  # under torchrun every rank validates; rank 0 says why
                typer.echo(f"icml26: error: {_one_line(e)}", err=True)
            raise typer.Exit(2) from None
        except EOFError as e:
            # np.load / torch / h5py on an empty or truncated file; click would report it as Ctrl-C
            if os.environ.get("ICML26_DEBUG"):
                raise
            typer.echo(
                f"icml26: error: an input file ended early (empty or truncated?): {_one_line(e) or 'EOFError'}",
                err=True,
            )
            raise typer.Exit(2) from None
        except OSError as e:
            line = _os_error_line(e)
            if line is None or os.environ.get("ICML26_DEBUG"):
                raise
            typer.echo(line, err=True)
            raise typer.Exit(2) from None

    wrapper._icml26_guarded = True
    return wrapper


def _guard_group(group: typer.Typer) -> None:
    for c in group.registered_commands:
        c.callback = _guard(c.callback)
    for g in group.registered_groups:
        if g.typer_instance is not None:
            _guard_group(g.typer_instance)


def _register() -> None:
    for name, target, panel in COMMANDS:
        mod_name, attr = target.split(":")
        obj = getattr(importlib.import_module(mod_name), attr)
        if isinstance(obj, typer.Typer):
            _guard_group(obj)
            app.add_typer(obj, name=name, rich_help_panel=panel)
        else:
            app.command(name, rich_help_panel=panel)(_guard(obj))


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps InputError -> exit 2, other errors -> exit 1 (one line)."""
    from icml26.core.errors import InputError

    try:
        rc = app(args=argv, standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except SystemExit:
        raise
    except KeyboardInterrupt as e:
        if type(e).__name__ == "_Terminated":  # SIGTERM during a run with --out: the shell's 128 + 15
            print("icml26: terminated", file=sys.stderr)
            sys.exit(143)
        print("icml26: interrupted", file=sys.stderr)
        sys.exit(130)
    except InputError as e:
        if os.environ.get("ICML26_DEBUG"):
            raise
        print(f"icml26: error: {_one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001
        line = _os_error_line(e)  # no permission, read-only, disk full: one line, exit 2
        if line is not None and not os.environ.get("ICML26_DEBUG"):
            print(line, file=sys.stderr)
            sys.exit(2)
        if type(e).__name__ == "NoArgsIsHelpError":  # `icml26` alone: the help was printed
            sys.exit(0)
        if type(e).__name__ in (
            "UsageError",
            "BadParameter",
            "NoSuchOption",
            "MissingParameter",
            "BadOptionUsage",
            "BadArgumentUsage",
        ):
            # the parser's own errors: one line, exit 2 (as for every bad input)
            fmt = getattr(e, "format_message", None)
            print(f"icml26: error: {fmt() if fmt else e}".replace("\n", " "), file=sys.stderr)
            sys.exit(2)
        if type(e).__name__ == "Abort":
            print("icml26: interrupted", file=sys.stderr)
            sys.exit(130)
        if os.environ.get("ICML26_DEBUG"):
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"icml26: {type(e).__name__}: {msg} (ICML26_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
