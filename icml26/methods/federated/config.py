"""Settings of ``icml26 fed-lora`` (torch-free): model, clients and their LoRA ranks, strategies,
data sizes, training, Het-CPFLoRA's options and Flower's strategy settings (min_available_clients,
accept_failures)."""

from __future__ import annotations

from dataclasses import dataclass

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
    # Flower's strategy settings (flwr FedAvg's min_available_clients / accept_failures): a deployment waits
    # for this many SuperNodes and runs with those that answer (0: every client); accept_failures: a round
    # aggregates the clients that replied when some raised (False: a round with a failure is not aggregated)
    min_available_clients: int = 0
    accept_failures: bool = True

    def __post_init__(self) -> None:
        from icml26.methods.federated.strategies import STRATEGIES  # torch: only when a Config is built

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
        if not 0 <= self.min_available_clients <= self.clients:
            raise ValueError(
                f"min_available_clients must be in [0, clients = {self.clients}], got {self.min_available_clients}"
            )

    @property
    def min_clients(self) -> int:
        """The fewest clients a run (and a round) goes on with: min_available_clients, 0 = all."""
        return self.min_available_clients or self.clients
