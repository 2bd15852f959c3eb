"""Federated LoRA strategies as Flower ``Strategy`` objects (server side) and client rules.

Each strategy is one Flower ``flwr.serverapp.strategy.Strategy`` (``configure_train`` /
``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate``) and one client rule
(what a client builds from the server's arrays and what it uploads), both over the same LoRA
tensors; the round loop, the clients' training and the evaluation are shared (``apps.py``).

- ``het-cpflora`` (Het-CPFLoRA, ICML 2026; docs/fed-lora.md): rank-slot split,
  clients upload the generalized factors, the server sums ``w_i s_i B_s,i A_s,i`` (``s_i`` =
  alpha / r_i; ``scale_aware=False``: the official code's sum without it) and sends every client
  the truncated SVD at its r_s (scaled back by 1 / s_j); the personal slots stay on the client.
- ``fedit`` (FedIT, Zhang et al. 2024): FedAvg of A and B at one rank (``homogeneous_rank``).
- ``flora`` (FLoRA, Wang et al. 2024, arXiv 2409.05976): the server stacks the clients'
  ``(A_i, p_i s_i B_i)``; every client adds the stacked product to its base weights and starts
  a fresh LoRA of its own rank each round.
- ``hetlora`` (HetLoRA, Cho et al. 2024): zero-pad to the largest rank, data-size-weighted average,
  truncate to each client's rank (RECON: the paper's rank self-pruning and sparsity-weighted
  aggregation are not implemented).
- ``ffa-lora`` (FFA-LoRA, Sun et al. 2024, arXiv 2403.12313): A frozen at a shared random init, only
  B trained and averaged (homogeneous rank).
- ``fedsa-lora`` (FedSA-LoRA, Guo et al. 2025, arXiv 2410.01463): A shared and averaged, B kept
  local (homogeneous rank).
- ``local``: each client trains its own LoRA (rank r_i); nothing is sent.
Averages weight by data size (FedAvg); Het-CPFLoRA by shared rank (the official code) or data
size (``aggregation_weights``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from icml26.methods.federated import lora_math as L
from icml26.methods.federated.config import HOMOGENEOUS, STRATEGIES  # noqa: E402,F401  (names, torch-free)


@dataclass(frozen=True)
class ClientSpec:
    """What the server knows of one client: its node id, rank, personal rank, train examples, and
    its data partition (the SuperNode's ``partition-id``; -1: not known)."""

    node_id: int
    rank: int
    personal_rank: int
    n_train: int
    partition_id: int = -1

    @property
    def shared_rank(self) -> int:
        return self.rank - self.personal_rank


def client_rank(strategy: str, spec: ClientSpec, homogeneous_rank: int) -> int:
    return homogeneous_rank if strategy in HOMOGENEOUS else spec.rank


def to_record(adapter: dict, parts: str = "AB"):
    """{module: (A, B)} -> a Flower ArrayRecord with keys ``<module>.A`` / ``<module>.B`` (``parts``
    picks which)."""
    from flwr.app import ArrayRecord

    d = {}
    for mn, (A, B) in adapter.items():
        if "A" in parts:
            d[f"{mn}.A"] = A.detach().float().contiguous().cpu()
        if "B" in parts:
            d[f"{mn}.B"] = B.detach().float().contiguous().cpu()
    return ArrayRecord(d) if d else ArrayRecord()


def from_record(rec) -> dict:
    """Inverse of :func:`to_record`: {module: {"A": tensor, "B": tensor}} (the parts present)."""
    out: dict = {}
    if rec is None:
        return out
    for k, t in rec.to_torch_state_dict().items():
        mn, part = k.rsplit(".", 1)
        out.setdefault(mn, {})[part] = t
    return out


def record_bytes(rec) -> int:
    """Bytes of the tensors in an ArrayRecord (elements x element size; no framing)."""
    if rec is None:
        return 0
    return int(sum(a.numpy().nbytes for a in rec.values()))


def _init(dims: dict[str, tuple[int, int]], rank: int, gen) -> dict:
    out = {}
    for mn, (d_in, d_out) in dims.items():
        b = 1.0 / math.sqrt(d_in)
        out[mn] = ((torch.rand(rank, d_in, generator=gen) * 2 - 1) * b, torch.zeros(d_out, rank))
    return out


def _avg(adapters: list[dict], weights: list[float], part: str) -> dict:
    w = L.normalized(weights)
    out = {}
    for mn in adapters[0]:
        out[mn] = sum(wi * a[mn][part] for a, wi in zip(adapters, w))
    return out


try:  # Flower's strategy base (flwr >= 1.21); the module imports without flwr for the pure math
    from flwr.serverapp.strategy import Strategy as _FlowerStrategy
except ImportError:  # pragma: no cover
    _FlowerStrategy = object  # type: ignore[misc,assignment]


class LoraStrategy(_FlowerStrategy):
    """Shared plumbing: one message per client (its own arrays), replies parsed into uploads,
    byte counters, per-round metrics, a state dict for per-round checkpoints.

    specs: the clients; dims: {module: (d_in, d_out)}; alpha: LoRA alpha (scaling alpha / r)."""

    name = "base"

    def __init__(
        self,
        specs: list[ClientSpec],
        dims: dict,
        *,
        alpha: float,
        homogeneous_rank: int,
        seed: int,
        aggregation_weights: str = "shared-rank",
        scale_aware: bool = True,
        accept_failures: bool = True,
    ):
        self.specs = specs
        self.dims = dims
        self.alpha = alpha
        self.homogeneous_rank = homogeneous_rank
        self.seed = seed
        self.aggregation_weights = aggregation_weights
        self.scale_aware = scale_aware
        self.accept_failures = accept_failures  # Flower's accept_failures (FedAvg)
        self.state: dict[str, torch.Tensor] = {}  # server-held tensors (checkpointed)
        self.last = {
            "upload_bytes": 0,
            "download_bytes": 0,
            "mean_train_loss": float("nan"),
            "failures": 0,
            "aggregated": False,
        }
        self.failed_eval: list[int] = []  # nodes whose evaluation raised (accept_failures)
        self.eval_metrics: dict[int, dict] = {}
        self.init_state()

    # -- what the subclasses define
    def init_state(self) -> None:
        pass

    def download(self, spec: ClientSpec, server_round: int) -> dict:
        """{module: (A, B)} or {module: {"A"/"B": t}} sent to a client (empty: nothing)."""
        return {}

    def aggregate(self, server_round: int, uploads: list[tuple[ClientSpec, dict]]) -> None:
        pass

    # -- Flower Strategy
    def rank_of(self, spec: ClientSpec) -> int:
        return client_rank(self.name, spec, self.homogeneous_rank)

    def _messages(self, server_round: int, kind: str, config) -> list:
        from flwr.app import ConfigRecord, Message, RecordDict

        msgs, sent = [], 0
        for spec in self.specs:
            d = self.download(spec, server_round)
            rec = _record_of(d)
            sent += record_bytes(rec)
            cfg = ConfigRecord(
                {
                    **dict(config or {}),
                    "strategy": self.name,
                    "round": server_round,
                    "rank": self.rank_of(spec),
                    "personal_rank": spec.personal_rank if self.name == "het-cpflora" else 0,
                }
            )
            msgs.append(
                Message(RecordDict({"arrays": rec, "config": cfg}), spec.node_id, kind, group_id=str(server_round))
            )
        self.last["download_bytes"] = sent
        return msgs

    def configure_train(self, server_round, arrays, config, grid) -> Iterable:
        return self._messages(server_round, "train", config)

    def aggregate_train(self, server_round, replies):
        from flwr.app import MetricRecord

        by_node = {s.node_id: s for s in self.specs}
        uploads, losses, got, failures = [], [], 0, 0
        for m in replies:
            if m.has_error():
                failures += 1
                continue
            rec = m.content.array_records.get("arrays")
            got += record_bytes(rec)
            losses.append(float(m.content["metrics"]["train_loss"]))
            uploads.append((by_node[m.metadata.src_node_id], from_record(rec)))
        failures += len(self.specs) - len(uploads) - failures  # replies that never came
        self.last["failures"] = failures
        self.last["upload_bytes"] = got
        self.last["mean_train_loss"] = sum(losses) / len(losses) if losses else float("nan")
        # Flower's FedAvg: no result, or a failure without accept_failures -> the round is not aggregated
        self.last["aggregated"] = bool(uploads) and (failures == 0 or self.accept_failures)
        if not self.last["aggregated"]:
            return None, MetricRecord({"mean_train_loss": self.last["mean_train_loss"]})
        uploads.sort(key=lambda u: u[0].node_id)
        self.aggregate(server_round, uploads)
        return None, MetricRecord({"mean_train_loss": self.last["mean_train_loss"]})

    def configure_evaluate(self, server_round, arrays, config, grid) -> Iterable:
        return self._messages(server_round, "evaluate", config)

    def aggregate_evaluate(self, server_round, replies):
        for m in replies:
            if m.has_error():
                if not self.accept_failures:
                    raise RuntimeError(f"client {m.metadata.src_node_id} failed to evaluate: {m.error.reason}")
                self.failed_eval.append(m.metadata.src_node_id)
                continue
            self.eval_metrics[m.metadata.src_node_id] = dict(m.content["metrics"])
        return None

    def summary(self) -> None:
        pass

    # -- checkpoints
    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.state)

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.state = dict(sd)

    def _weights(self, uploads, by: str | None = None) -> list[float]:
        by = by or "data-size"
        return [float(s.shared_rank if by == "shared-rank" else s.n_train) for s, _ in uploads]

    def _get(self, prefix: str) -> dict:
        out: dict = {}
        for k, t in self.state.items():
            if k.startswith(prefix + "/"):
                mn, part = k[len(prefix) + 1 :].rsplit(".", 1)
                out.setdefault(mn, {})[part] = t
        return out

    def _put(self, prefix: str, adapter: dict) -> None:
        for k in [k for k in self.state if k.startswith(prefix + "/")]:
            del self.state[k]
        for mn, parts in adapter.items():
            items = parts.items() if isinstance(parts, dict) else zip("AB", parts)
            for part, t in items:
                self.state[f"{prefix}/{mn}.{part}"] = t.contiguous()


def _record_of(d: dict):
    from flwr.app import ArrayRecord

    flat = {}
    for mn, parts in d.items():
        items = parts.items() if isinstance(parts, dict) else zip("AB", parts)
        for part, t in items:
            flat[f"{mn}.{part}"] = t.detach().float().contiguous().cpu()
    return ArrayRecord(flat) if flat else ArrayRecord()


class Local(LoraStrategy):
    name = "local"


class FedIT(LoraStrategy):
    name = "fedit"

    def init_state(self):
        self._put("global", _init(self.dims, self.homogeneous_rank, torch.Generator().manual_seed(self.seed)))

    def download(self, spec, server_round):
        return self._get("global")

    def aggregate(self, server_round, uploads):
        ads = [u for _, u in uploads]
        w = self._weights(uploads)
        self._put("global", {mn: {"A": a, "B": _avg(ads, w, "B")[mn]} for mn, a in _avg(ads, w, "A").items()})


class FFALoRA(FedIT):
    """A frozen (sent once, in round 1), B averaged."""

    name = "ffa-lora"

    def download(self, spec, server_round):
        g = self._get("global")
        return g if server_round == 1 else {mn: {"B": p["B"]} for mn, p in g.items()}

    def aggregate(self, server_round, uploads):
        g = self._get("global")
        B = _avg([u for _, u in uploads], self._weights(uploads), "B")
        self._put("global", {mn: {"A": g[mn]["A"], "B": B[mn]} for mn in g})


class FedSALoRA(FedIT):
    """A shared and averaged, B local."""

    name = "fedsa-lora"

    def download(self, spec, server_round):
        return {mn: {"A": p["A"]} for mn, p in self._get("global").items()}

    def aggregate(self, server_round, uploads):
        A = _avg([u for _, u in uploads], self._weights(uploads), "A")
        self._put("global", {mn: {"A": A[mn]} for mn in A})


class HetLoRA(LoraStrategy):
    name = "hetlora"

    def init_state(self):
        self.r_max = max(s.rank for s in self.specs)
        self._put("global", _init(self.dims, self.r_max, torch.Generator().manual_seed(self.seed)))

    def download(self, spec, server_round):
        return {mn: {"A": p["A"][: spec.rank], "B": p["B"][:, : spec.rank]} for mn, p in self._get("global").items()}

    def aggregate(self, server_round, uploads):
        padded = []
        for s, u in uploads:
            padded.append({mn: dict(zip("AB", L.zero_pad(p["A"], p["B"], self.r_max))) for mn, p in u.items()})
        w = self._weights(uploads)
        A, B = _avg(padded, w, "A"), _avg(padded, w, "B")
        self._put("global", {mn: {"A": A[mn], "B": B[mn]} for mn in A})


class FLoRA(LoraStrategy):
    name = "flora"

    def download(self, spec, server_round):
        return self._get("stack")

    def aggregate(self, server_round, uploads):
        w = L.normalized(self._weights(uploads))
        out = {}
        for mn in uploads[0][1]:
            # p_i s_i B_i: the clients' own scalings go into the stack (B @ A is then the dense update)
            fac = [(u[mn]["A"], u[mn]["B"] * (self.alpha / s.rank)) for s, u in uploads]
            A, B = L.stack(fac, w)
            out[mn] = {"A": A, "B": B}
        self._put("stack", out)


class HetCPFLoRA(LoraStrategy):
    name = "het-cpflora"

    def download(self, spec, server_round):
        return self._get(f"client{spec.node_id}")

    def aggregate(self, server_round, uploads):
        w = L.normalized(self._weights(uploads, self.aggregation_weights))
        for mn in uploads[0][1]:
            fac = [(u[mn]["A"], u[mn]["B"] * ((self.alpha / s.rank) if self.scale_aware else 1.0)) for s, u in uploads]
            U, S, Vh = L.svd_of_sum(fac, w)  # SVD of sum_i w_i s_i B_s,i A_s,i
            for spec in self.specs:
                sc = (self.alpha / spec.rank) if self.scale_aware else 1.0
                A, B = L.truncate_svd(U, S, Vh, spec.shared_rank, scale=sc)
                self.state[f"client{spec.node_id}/{mn}.A"] = A.float().contiguous()
                self.state[f"client{spec.node_id}/{mn}.B"] = B.float().contiguous()


CLASSES = {c.name: c for c in (HetCPFLoRA, FedIT, FLoRA, HetLoRA, FFALoRA, FedSALoRA, Local)}


def make_strategy(name: str, specs: list[ClientSpec], dims: dict, **kw) -> LoraStrategy:
    if name not in CLASSES:
        raise ValueError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}")
    return CLASSES[name](specs, dims, **kw)


# ----------------------------------------------------------------------------- client rules


def client_adapter(
    strategy: str, round_: int, rank: int, personal_rank: int, download: dict, own: dict | None, fresh: dict
) -> tuple[dict, bool]:
    """The adapter a client trains (or evaluates) this round, and whether A is trainable.

    download: from_record of the server's arrays; own: the client's adapter after its last local
    training (None before its first); fresh: a new init of this rank (A random, B = 0)."""
    if strategy == "local":
        return (own if own is not None else fresh), True
    if strategy in ("fedit", "hetlora"):
        return {mn: (p["A"], p["B"]) for mn, p in download.items()}, True
    if strategy == "ffa-lora":
        base = own if own is not None else {mn: (p["A"], p["B"]) for mn, p in download.items()}
        return {mn: (base[mn][0], download[mn]["B"]) for mn in base}, False
    if strategy == "fedsa-lora":
        return {mn: (download[mn]["A"], (own[mn][1] if own is not None else fresh[mn][1])) for mn in download}, True
    if strategy == "flora":
        return fresh, True
    if strategy == "het-cpflora":
        if own is None:
            return fresh, True
        if not download:
            return own, True
        rs = rank - personal_rank
        out = {}
        for mn, (A, B) in own.items():
            _, _, A_p, B_p = L.split_adapter(A, B, rs)
            out[mn] = L.merge_adapter(download[mn]["A"], download[mn]["B"], A_p, B_p)
        return out, True
    raise ValueError(f"unknown strategy {strategy!r}")


def client_upload(strategy: str, adapter: dict, rank: int, personal_rank: int) -> tuple[dict, str]:
    """(what a client sends, which parts): nothing (local), B (FFA-LoRA), A (FedSA-LoRA), the
    generalized slots (Het-CPFLoRA), the whole adapter (the rest)."""
    if strategy == "local":
        return {}, ""
    if strategy == "ffa-lora":
        return adapter, "B"
    if strategy == "fedsa-lora":
        return adapter, "A"
    if strategy == "het-cpflora":
        rs = rank - personal_rank
        return {mn: L.split_adapter(A, B, rs)[:2] for mn, (A, B) in adapter.items()}, "AB"
    return adapter, "AB"


def flora_merge(merged: dict | None, download: dict) -> dict | None:
    """A FLoRA client's accumulated base-weight update plus the stacked product just received."""
    if not download:
        return merged
    out = dict(merged or {})
    for mn, p in download.items():
        d = p["B"] @ p["A"]
        out[mn] = out[mn] + d if mn in out else d
    return out
