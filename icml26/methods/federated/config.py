"""Settings of ``icml26 fed-lora`` (torch-free): model, clients and their LoRA ranks, strategies,
data sizes, training, Het-CPFLoRA's options and Flower's strategy settings (min_available_clients,
accept_failures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from icml26.core.settings import Work, setting

STRATEGIES = ("het-cpflora", "fedit", "flora", "hetlora", "ffa-lora", "fedsa-lora", "local")
HOMOGENEOUS = ("fedit", "ffa-lora", "fedsa-lora")  # one rank for every client
DEFAULT_STRATEGIES = ("het-cpflora", "fedit", "flora", "hetlora", "ffa-lora", "local")
TARGET_NAMES = ("qv", "attention", "attention+mlp")  # model.TARGETS' keys


@dataclass(frozen=True)
class Config:
    model: str = "llama"  # llama (SmolLM2-135M) | tiny-llama (random, tests) | a local HF folder / .gguf
    clients: int = setting(6, "federated clients (Flower SuperNodes)", ge=1, le=64)
    rounds: int = setting(
        10, "federated rounds (each: local training on every client, then aggregation)", unit="rounds", ge=1, sized=1000
    )
    strategies: tuple[str, ...] = (
        DEFAULT_STRATEGIES  # strategies compared: het-cpflora | fedit | flora | hetlora | ffa-lora | fedsa-lora | local
    )
    ranks: tuple[int, ...] = (4, 8, 16, 16, 32, 8)  # LoRA rank per client (heterogeneous strategies)
    personal_ranks: tuple[int, ...] = (1, 2, 4, 4, 8, 2)  # Het-CPFLoRA personal slots per client, in [0, rank)
    homogeneous_rank: int = 8  # FedIT / FFA-LoRA / FedSA-LoRA: one rank for all
    lora_alpha: float = setting(16.0, "LoRA scale numerator (the update is alpha / r x B A)", gt=0)
    lora_dropout: float = setting(0.05, "dropout on the LoRA input", unit="probability", ge=0, lt=1)
    targets: Literal["qv", "attention", "attention+mlp"] = (
        "qv"  # qv (q_proj, v_proj; official) | attention | attention+mlp
    )
    tasks: str = "debian"  # debian (5 domains of Debian texts) | a JSONL file of {instruction, output, category}
    domains: tuple[str, ...] = ()  # the task domains used (empty: all; debian: wordnet gcide kjv fortunes python-docs)
    dirichlet_alpha: float = 0.5  # non-IID mixtures over domains (smaller: fewer domains per client)
    train_examples: int = setting(64, "training examples per client", ge=1, sized=10**6)
    test_examples: int = setting(16, "test examples per client (its own mixture)", ge=1, sized=10**6)
    global_test_examples: int = setting(40, "cross-domain test set (equal per domain)", ge=1, sized=10**6)
    generation_examples: int = setting(8, "own test examples decoded for ROUGE-1", ge=0, sized=10**5)
    max_new_tokens: int = setting(
        32, "tokens decoded per generation example (ROUGE-1)", unit="tokens", ge=1, sized=4096
    )
    max_seq_tokens: int = setting(
        128, "training / scoring sequence length (prompt + answer, truncated)", unit="tokens", ge=16, le=4096
    )
    local_epochs: int = setting(
        1, "passes over a client's training examples per round", unit="epochs", ge=1, sized=1000
    )
    batch_size: int = setting(8, "sequences per local optimizer step", ge=1, sized=65536)
    lr: float = setting(3e-4, "AdamW learning rate of the LoRA factors", gt=0, lt=1)
    aggregation_weights: Literal["shared-rank", "data-size"] = (
        "shared-rank"  # het-cpflora: shared-rank (official) | data-size
    )
    scale_aware: bool = True  # het-cpflora: include alpha / r_i in the sum (False: official quirk)
    ood_weighting: Literal["sigma", "sigma-official", "fixed", "half"] = (
        "sigma"  # het-cpflora inference: sigma | sigma-official | fixed (1/1) | half (0.5/0.5)
    )
    threads: int = 0  # torch CPU threads (0: torch's default)
    # Flower's strategy settings (flwr FedAvg's min_available_clients / accept_failures): a deployment waits
    # for this many SuperNodes and runs with those that answer (0: every client); accept_failures: a round
    # aggregates the clients that replied when some raised (False: a round with a failure is not aggregated)
    min_available_clients: int = 0
    accept_failures: bool = True  # a round aggregates the clients that replied when some raised (see above)

    def work(self) -> list[Work]:
        """Training tokens of a run: strategies x rounds x clients x local_epochs x train_examples x
        max_seq_tokens, against 1e9 (SmolLM2-135M trains a few thousand tokens/s on a CPU core)."""
        toks = float(len(self.strategies)) * self.rounds * self.clients * self.local_epochs
        toks *= self.train_examples * self.max_seq_tokens
        return [Work(toks, 1e9, "training tokens", "rounds, clients, local_epochs, train_examples or max_seq_tokens")]

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategies", tuple(dict.fromkeys(self.strategies)))
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ValueError(f"strategies: unknown {s!r}; valid: {', '.join(STRATEGIES)}")
        if not self.strategies:
            raise ValueError("strategies: give at least one")
        if not 1 <= self.clients <= 64:
            raise ValueError(f"clients must be in [1, 64], got {self.clients}")
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
        if not self.dirichlet_alpha > 0:
            raise ValueError(f"dirichlet_alpha must be > 0, got {self.dirichlet_alpha}")
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
