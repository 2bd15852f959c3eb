"""``icml26 fed-lora``: Het-CPFLoRA heterogeneous personalized federated LoRA on Flower, against
FedIT, FLoRA, HetLoRA, FFA-LoRA, FedSA-LoRA and local-only LoRA."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from icml26.core.options import DeviceOpt, OutOpt, QuietOpt, RecipeOpt, ResumeOpt, SeedOpt, SetOpt, split_csv


def fed_lora(
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="llama (SmolLM2-135M, built in) | tiny-llama (random, for tests) | a local HF folder | a .gguf file.",
            show_default=False,
        ),
    ] = None,
    clients: Annotated[
        Optional[int], typer.Option("--clients", help="Number of clients (default 6).", show_default=False)
    ] = None,
    rounds: Annotated[
        Optional[int], typer.Option("--rounds", help="Federated rounds (default 10).", show_default=False)
    ] = None,
    strategy: Annotated[
        Optional[List[str]],
        typer.Option(
            "--strategy",
            help="het-cpflora | fedit | flora | hetlora | ffa-lora | fedsa-lora | local (repeatable or "
            "comma-separated; default: all but fedsa-lora).",
            show_default=False,
        ),
    ] = None,
    ranks: Annotated[
        Optional[str],
        typer.Option(
            "--ranks", help="LoRA rank per client, comma-separated (default 4,8,16,16,32,8).", show_default=False
        ),
    ] = None,
    personal_ranks: Annotated[
        Optional[str],
        typer.Option(
            "--personal-ranks",
            help="Het-CPFLoRA personal slots per client, each < its rank (default 1,2,4,4,8,2).",
            show_default=False,
        ),
    ] = None,
    tasks: Annotated[
        Optional[str],
        typer.Option(
            "--tasks",
            help="debian (built-in Debian-text tasks) | your JSONL file of {instruction, output, category}.",
            show_default=False,
        ),
    ] = None,
    resume: ResumeOpt = False,
    recipe: RecipeOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Federated LoRA fine-tuning of an LLM on Flower: every strategy on the same clients
    (Dirichlet mixtures over text domains), reporting personalization (own test set),
    generalization (cross-domain test set) and communication.

    Records: `round` (round, strategy, mean_train_loss, upload_bytes, download_bytes); one
    `result` per strategy (local_perplexity, local_rouge1, global_perplexity, per_client,
    comm_bytes_total, wall_s); last `summary`. With --out every round is checkpointed
    (safetensors); --resume continues an interrupted run.

    Example: icml26 fed-lora --model llama --clients 6 --rounds 10 --strategy het-cpflora,fedit,flora,hetlora
    --ranks 4,8,16,16,32,8 --personal-ranks 1,2,4,4,8,2 --out runs/fed
    """
    from icml26.core.output import stream
    from icml26.core.preamble import parse_numbers, prepare

    run = prepare(
        "icml26.methods.federated.config:Config",
        "fed-lora",
        recipe=recipe,
        sets=set_,
        seed=seed,
        device=device,
        out=out,
        resume=resume,
        resumable=True,
        model=model,
        clients=clients,
        rounds=rounds,
        strategies=split_csv(strategy),
        ranks=parse_numbers(ranks, "--ranks", int),
        personal_ranks=parse_numbers(personal_ranks, "--personal-ranks", int),
        tasks=tasks,
    )
    from icml26.methods.federated import api as m

    m.preflight(run.cfg, run.seed)  # Flower/peft, ranks vs the model's dimensions, the task source
    cols = ["strategy", "local_perplexity", "local_rouge1", "global_perplexity", "comm_bytes_total", "wall_s"]
    stream(
        m.run(run.cfg, seed=run.seed, device=run.device, out=run.out, previous=run.previous),
        run=run,
        quiet=quiet,
        columns=cols,
    )
