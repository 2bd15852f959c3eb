"""``icml26 fed-lora``: Het-CPFLoRA and the federated LoRA baselines on Flower, one harness.

Het-CPFLoRA (ICML 2026 poster 66545; official code tongxin-tx/Het-CPFLoRA; notes in
shared/methods/het_cpflora.md): one LoRA of rank r_i per client, rank slots split into
generalized (r_s) and personal (r_p); the server sums the generalized products and sends each
client the truncated SVD at its r_s; at inference an OOD weight from the prompt's perplexity
scales the two parts. Baselines (strategies.py): FedIT, FLoRA, HetLoRA, FFA-LoRA, FedSA-LoRA,
local-only, all in the same round loop, data and evaluation.

Per strategy: a fresh federation (every client a Flower node with its own Context), ``rounds``
rounds of (train on every client, aggregate), then every client's final model is evaluated on
its own test set (perplexity, ROUGE-1 of greedy answers) and on the cross-domain test set.
Records: ``round`` (round, strategy, mean_train_loss, upload_bytes, download_bytes), one
``result`` per strategy (local_perplexity, local_rouge1, global_perplexity, per_client,
comm_bytes_total, wall_s), a ``summary``. With ``out`` every round is checkpointed (server and
client tensors in safetensors) and ``resume`` continues from the last one.

Fixed vs the official code (options keep its behaviour): the LoRA scaling alpha / r_i enters the
aggregation (``scale_aware``; False: ignored, as the official code); at inference the two part
weights are divided by the larger (``ood_weighting: sigma``; ``sigma-official`` shrinks the adapter
as the official code does). RECON: the paper's text was not found; defaults follow the code.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from icml26.methods.federated.strategies import STRATEGIES

DEFAULT_STRATEGIES = ("het-cpflora", "fedit", "flora", "hetlora", "ffa-lora", "local")


@dataclass(frozen=True)
class Config:
    model: str = "llama"  # llama (SmolLM2-135M) | tiny-llama (random, tests) | a local HF folder / .gguf
    clients: int = 6
    rounds: int = 10
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    ranks: tuple[int, ...] = (4, 8, 16, 16, 32, 8)  # LoRA rank per client (heterogeneous strategies)
    personal_ranks: tuple[int, ...] = (1, 2, 4, 4, 8, 2)  # Het-CPFLoRA personal slots per client, in [0, rank)
    homogeneous_rank: int = 8  # FedIT / FFA-LoRA / FedSA-LoRA: one rank for all
    lora_alpha: float = 16.0
    lora_dropout: float = 0.05
    targets: str = "qv"  # qv (q_proj, v_proj; official) | attention | attention+mlp
    tasks: str = "debian"  # debian (5 domains of Debian texts) | a JSONL file of {instruction, output, category}
    domains: tuple[str, ...] = ()  # the task domains used (empty: all; debian: wordnet gcide kjv fortunes python-docs)
    dirichlet_alpha: float = 0.5  # non-IID mixtures over domains (smaller: fewer domains per client)
    train_examples: int = 64  # per client
    test_examples: int = 16  # per client (own mixture)
    global_test_examples: int = 40  # cross-domain test set (equal per domain)
    generation_examples: int = 8  # own test examples decoded for ROUGE-1
    max_new_tokens: int = 32
    max_seq_tokens: int = 128
    local_epochs: int = 1
    batch_size: int = 8
    lr: float = 3e-4
    aggregation_weights: str = "shared-rank"  # het-cpflora: shared-rank (official) | data-size
    scale_aware: bool = True  # het-cpflora: include alpha / r_i in the sum (False: official quirk)
    ood_weighting: str = "sigma"  # het-cpflora inference: sigma | sigma-official | fixed (1/1) | half (0.5/0.5)
    threads: int = 0  # torch CPU threads (0: torch's default)

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategies", tuple(dict.fromkeys(self.strategies)))
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ValueError(f"strategies: unknown {s!r}; valid: {', '.join(STRATEGIES)}")
        if not self.strategies:
            raise ValueError("strategies: give at least one")
        if not 1 <= self.clients <= 64:
            raise ValueError(f"clients must be in [1, 64], got {self.clients}")
        if not 1 <= self.rounds <= 1000:
            raise ValueError(f"rounds must be in [1, 1000], got {self.rounds}")
        if len(self.ranks) != self.clients:
            raise ValueError(f"ranks: {len(self.ranks)} values for {self.clients} clients (give one rank per client)")
        if len(self.personal_ranks) != self.clients:
            raise ValueError(
                f"personal_ranks: {len(self.personal_ranks)} values for {self.clients} clients (give one per client)"
            )
        for i, (r, p) in enumerate(zip(self.ranks, self.personal_ranks)):
            if r < 1:
                raise ValueError(f"ranks: client {i} has rank {r}; ranks must be >= 1")
            if not 0 <= p < r:
                raise ValueError(f"personal_ranks: client {i} has {p} personal of rank {r}; need 0 <= personal < rank")
        if self.homogeneous_rank < 1:
            raise ValueError(f"homogeneous_rank must be >= 1, got {self.homogeneous_rank}")
        if not self.lora_alpha > 0 or not 0 <= self.lora_dropout < 1:
            raise ValueError("lora_alpha must be > 0 and lora_dropout in [0, 1)")
        from icml26.methods.federated.model import TARGETS

        if self.targets not in TARGETS:
            raise ValueError(f"targets: {self.targets!r} is not one of {', '.join(TARGETS)}")
        if not self.dirichlet_alpha > 0:
            raise ValueError(f"dirichlet_alpha must be > 0, got {self.dirichlet_alpha}")
        for k in (
            "train_examples",
            "test_examples",
            "global_test_examples",
            "max_new_tokens",
            "local_epochs",
            "batch_size",
        ):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.generation_examples < 0:
            raise ValueError(f"generation_examples must be >= 0, got {self.generation_examples}")
        if not 16 <= self.max_seq_tokens <= 4096:
            raise ValueError(f"max_seq_tokens must be in [16, 4096], got {self.max_seq_tokens}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        if self.aggregation_weights not in ("shared-rank", "data-size"):
            raise ValueError(f"aggregation_weights must be shared-rank or data-size, got {self.aggregation_weights!r}")
        if self.ood_weighting not in ("sigma", "sigma-official", "fixed", "half"):
            raise ValueError(f"ood_weighting must be sigma, sigma-official, fixed or half, got {self.ood_weighting!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")


def preflight(cfg: Config, seed: int = 0) -> None:
    """Checks that need the model's shapes or the data (InputError, before the config record):
    Flower and peft installed, every rank within the targeted projections' dimensions, the
    task source readable and large enough for the clients' split (built here, cached for the run)."""
    from icml26.core.errors import InputError, MissingDataError

    try:
        import flwr  # noqa: F401
        import peft  # noqa: F401
    except ImportError:
        raise MissingDataError("fed-lora needs Flower and peft: pip install 'icml26[federated]'") from None
    from icml26.methods.federated.model import module_dims

    dims = module_dims(cfg.model, cfg.targets)
    limit = min(min(d) for d in dims.values())
    which = min(dims, key=lambda k: min(dims[k]))
    uses_het = any(s not in ("fedit", "ffa-lora", "fedsa-lora") for s in cfg.strategies)
    if uses_het:
        for i, r in enumerate(cfg.ranks):
            if r > limit:
                raise InputError(
                    f"ranks: client {i} has rank {r}, above {which}'s smallest dimension {limit} in {cfg.model!r} "
                    f"(a LoRA rank is at most min(d_in, d_out))"
                )
    if any(s in ("fedit", "ffa-lora", "fedsa-lora") for s in cfg.strategies) and cfg.homogeneous_rank > limit:
        raise InputError(
            f"homogeneous_rank {cfg.homogeneous_rank} is above {which}'s smallest dimension {limit} in {cfg.model!r}"
        )
    from icml26.core.data.instructions import require_tasks

    require_tasks(cfg.tasks, cfg.domains)
    from icml26.methods.federated.apps import client_split

    client_split(cfg, seed)  # too few examples for the sizes asked: InputError now


def run_on_grid(
    cfg: Config,
    seed: int,
    make_grid: Callable[[], object],
    *,
    ckpt_dir: Path | None = None,
    previous: list[dict] | None = None,
) -> Iterator[dict]:
    """The records of every strategy, each on a grid from ``make_grid()`` (a fresh in-process
    federation, or the deployment's grid). ``ckpt_dir``: per-round checkpoints (in-process
    grids); ``previous``: records of an interrupted run (results replayed, the unfinished strategy
    continued from its checkpoint)."""
    from icml26.core.output import previous_results
    from icml26.methods.federated import apps

    done = previous_results(previous, "strategy")
    prev_rounds: dict[str, list[dict]] = {}
    for r in previous or ():
        if r.get("kind") == "round":
            prev_rounds.setdefault(r["strategy"], []).append(r)
    results = []
    for name in cfg.strategies:
        if (name,) in done:
            yield from prev_rounds.get(name, [])
            results.append(done[(name,)])
            yield done[(name,)]
            continue
        t0 = time.perf_counter()
        grid = make_grid()
        specs = apps.client_specs(cfg, grid)
        strat = apps.strategy_for(cfg, name, specs, seed)
        recs: list[dict] = []
        start, wall0 = 1, 0.0
        if ckpt_dir is not None and previous is not None:
            st = _load_ckpt(ckpt_dir, name, strat, grid)
            if st is not None:
                recs, wall0 = st["rounds"], st["wall_s"]
                start = len(recs) + 1
                yield from recs

        def save(rec, _name=name, _strat=strat, _grid=grid, _t0=t0, _wall0=wall0, _recs=recs):
            _recs.append(rec)
            if ckpt_dir is not None:
                _save_ckpt(ckpt_dir, _name, _strat, _grid, _recs, _wall0 + time.perf_counter() - _t0)

        for rec in apps.federated_rounds(strat, grid, cfg.rounds, start_round=start, on_round=save):
            yield rec
        metrics = apps.final_evaluation(strat, grid, cfg.rounds)
        res = apps.result_record(
            cfg, strat, recs, metrics, strat.last["download_bytes"], wall0 + time.perf_counter() - t0
        )
        results.append(res)
        yield res
    summary = {
        "kind": "summary",
        "model": cfg.model,
        "clients": cfg.clients,
        "rounds": cfg.rounds,
        "strategies": list(cfg.strategies),
    }
    if results:
        from icml26.core.stats import best_of  # None when strategies tie

        summary["best_local_perplexity"] = best_of(results, "local_perplexity", "strategy")
        summary["best_global_perplexity"] = best_of(results, "global_perplexity", "strategy")
        summary["best_local_rouge1"] = best_of(results, "local_rouge1", "strategy", lower=False)
    yield summary


def _ckpt_paths(ckpt_dir: Path, name: str) -> tuple[Path, Path]:
    d = Path(ckpt_dir) / name
    return d / "state.safetensors", d / "state.json"


def _save_ckpt(ckpt_dir: Path, name: str, strat, grid, recs: list[dict], wall_s: float) -> None:
    """Server tensors + every node's state (safetensors), then the round records (JSON, written
    last: a checkpoint counts only once its JSON names its round)."""
    from safetensors.torch import save_file

    from icml26.core.output import atomic_path, atomic_write_text, to_json

    st, js = _ckpt_paths(ckpt_dir, name)
    tensors = {f"server/{k}": v for k, v in strat.state_dict().items()}
    tensors.update({f"clients/{k}": v for k, v in grid.state_tensors().items()})
    with atomic_path(st) as tmp:
        save_file(tensors, str(tmp))
    atomic_write_text(js, to_json({"strategy": name, "round": len(recs), "rounds": recs, "wall_s": wall_s}) + "\n")


def _load_ckpt(ckpt_dir: Path, name: str, strat, grid) -> dict | None:
    from safetensors.torch import load_file

    st, js = _ckpt_paths(ckpt_dir, name)
    if not (st.is_file() and js.is_file()):
        return None
    meta = json.loads(js.read_text(encoding="utf-8"))
    sd = load_file(str(st))
    strat.load_state_dict({k[len("server/") :]: v for k, v in sd.items() if k.startswith("server/")})
    grid.load_state_tensors({k[len("clients/") :]: v for k, v in sd.items() if k.startswith("clients/")})
    return meta


def run(
    cfg: Config, *, seed: int = 0, device: str = "cpu", out: str | None = None, previous: list[dict] | None = None
) -> Iterator[dict]:
    """Every strategy on an in-process Flower federation (see module doc)."""
    import torch

    from icml26.core.seed import seed_everything
    from icml26.methods.federated import apps

    seed_everything(seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    elif cfg.model == "tiny-llama":
        torch.set_num_threads(1)  # a 32-wide model: more threads only contend
    apps._DEVICE[0] = device
    ckpt = Path(out) / "checkpoints" if out else None
    yield from run_on_grid(cfg, seed, lambda: apps.InProcessGrid.for_run(cfg, seed), ckpt_dir=ckpt, previous=previous)
