"""Flower apps of ``icml26 fed-lora``: the ``ClientApp`` (query / train / evaluate), the server
side of a round (client_specs, federated_rounds, final_evaluation) and an in-process ``Grid``.

The same ``client_app`` runs here, in one process (:class:`InProcessGrid` implements Flower's
``Grid`` API; every node has its own ``Context``; a ClientApp that raises becomes an error reply,
as Flower's runtime sends it), in ``flwr run``'s local simulation and on real SuperNodes (the
ServerApp is deploy.server_app; docs/fed-lora.md, "Run as a Flower App"). Client state (its last
local adapter, FLoRA's merged update) lives in ``Context.state``; Het-CPFLoRA's personal slots
never leave it.
"""

from __future__ import annotations

import json
import math
import time
from functools import lru_cache
from typing import Iterator
from uuid import uuid4

import torch

from icml26.core.data.instructions import client_tasks
from icml26.core.recipe import config_dict, resolve
from icml26.methods.federated import model as M
from icml26.methods.federated import strategies as S
from icml26.methods.federated.config import Config
from icml26.methods.federated.lora_math import ood_similarity, part_weights

try:
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
except ImportError:  # pragma: no cover  (the command says how to install it before a run)
    ClientApp = ServerApp = None  # type: ignore[assignment,misc]
    Grid = object  # type: ignore[assignment,misc]


def _mix(*xs: int) -> int:
    h = 1469598103934665603
    for x in xs:
        h = ((h ^ (int(x) & 0xFFFFFFFFFFFF)) * 1099511628211) % (2**63)
    return h


@lru_cache(maxsize=4)
def _config(text: str):
    return Config(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in json.loads(text).items()})


@lru_cache(maxsize=4)
def _recipe_config_text(recipe: str, sets: str) -> str:
    cfg = resolve(Config, "fed-lora", recipe or None, sets.split() or None)
    return json.dumps(config_dict(cfg), sort_keys=True)


def run_config_text(run_config) -> str:
    """The run's Config as canonical JSON, from a Flower run config: ``config`` (JSON) when set,
    else ``recipe`` (a fed-lora recipe path) with ``set`` (space-separated ``key=value``, as
    ``--set``). Raises InputError (bad recipe or setting) or ValueError (a bad Config)."""
    text = str(run_config.get("config", "") or "")
    if text:
        return text
    return _recipe_config_text(str(run_config.get("recipe", "") or ""), str(run_config.get("set", "") or ""))


def _ctx_config(ctx):
    cfg = _config(run_config_text(ctx.run_config))
    if cfg.threads and torch.get_num_threads() != cfg.threads:
        torch.set_num_threads(cfg.threads)  # a deployed ClientApp process: the recipe's thread count
    return cfg, int(ctx.run_config.get("seed", 0))


@lru_cache(maxsize=2)
def _split(text: str, seed: int):
    c = _config(text)
    return client_tasks(
        c.tasks,
        c.clients,
        c.train_examples,
        c.test_examples,
        c.global_test_examples,
        c.dirichlet_alpha,
        seed,
        domains=c.domains,
    )


def client_split(cfg, seed: int):
    """The clients' examples of a run (cached per process)."""
    return _split(json.dumps(config_dict(cfg), sort_keys=True), seed)


def _worker(cfg, device: str = "cpu"):
    return M.get_worker(cfg.model, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, targets=cfg.targets, device=device)


def _load(ctx, key: str) -> dict | None:
    """A stored adapter (keys are namespaced by strategy: one deployment runs several)."""
    if key not in ctx.state.array_records:
        return None
    return {mn: (p["A"], p["B"]) for mn, p in S.from_record(ctx.state.array_records[key]).items()}


def _load_merged(ctx, strategy: str) -> dict | None:
    key = f"merged:{strategy}"
    if key not in ctx.state.array_records:
        return None
    return ctx.state.array_records[key].to_torch_state_dict()


def _prepare(msg, ctx):
    cfg, seed = _ctx_config(ctx)
    pid = int(ctx.node_config["partition-id"])
    c = msg.content["config"]
    strategy, rnd, rank, rp = str(c["strategy"]), int(c["round"]), int(c["rank"]), int(c["personal_rank"])
    worker = _worker(cfg, str(ctx.run_config.get("device", "cpu")))  # in-process runs: the run's device
    down = S.from_record(msg.content.array_records.get("arrays"))
    own = _load(ctx, f"adapter:{strategy}")
    fresh = M.init_adapter(worker, rank, torch.Generator().manual_seed(_mix(seed, pid, rnd, 1)))
    merged = _load_merged(ctx, strategy)
    if strategy == "flora":
        merged = S.flora_merge(merged, down)
        if merged is not None:
            ctx.state[f"merged:{strategy}"] = ArrayRecord({k: v.contiguous() for k, v in merged.items()})
    adapter, train_A = S.client_adapter(strategy, rnd, rank, rp, down, own, fresh)
    return cfg, seed, pid, strategy, rnd, rank, rp, worker, own, merged, adapter, train_A


if ClientApp is not None:
    client_app = ClientApp()

    @client_app.query()
    def _query(msg, ctx):
        cfg, seed = _ctx_config(ctx)
        pid = int(ctx.node_config["partition-id"])
        n = len(client_split(cfg, seed).train[pid])
        return Message(RecordDict({"metrics": MetricRecord({"partition_id": pid, "num_examples": n})}), reply_to=msg)

    @client_app.train()
    def _train(msg, ctx):
        cfg, seed, pid, strategy, rnd, rank, rp, worker, own, merged, adapter, train_A = _prepare(msg, ctx)
        data = client_split(cfg, seed).train[pid]
        torch.manual_seed(_mix(seed, pid, rnd, 2))  # dropout
        new, loss = M.train(
            worker,
            adapter,
            rank,
            data,
            epochs=cfg.local_epochs,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            max_seq_tokens=cfg.max_seq_tokens,
            generator=torch.Generator().manual_seed(_mix(seed, pid, rnd, 3)),
            merged=merged if strategy == "flora" else None,
            train_A=train_A,
        )
        ctx.state[f"adapter:{strategy}"] = S.to_record(new)
        up, parts = S.client_upload(strategy, new, rank, rp)
        content = RecordDict(
            {
                "arrays": S.to_record(up, parts) if parts else ArrayRecord(),
                "metrics": MetricRecord({"train_loss": loss, "num_examples": len(data)}),
            }
        )
        return Message(content, reply_to=msg)

    @client_app.evaluate()
    def _evaluate(msg, ctx):
        cfg, seed, pid, strategy, rnd, rank, rp, worker, own, merged, adapter, _ = _prepare(msg, ctx)
        split = client_split(cfg, seed)
        m = evaluate_client(
            cfg,
            worker,
            strategy,
            rank,
            rp,
            adapter,
            own,
            merged if strategy == "flora" else None,
            split.train[pid],
            split.test[pid],
            split.global_test,
        )
        return Message(RecordDict({"metrics": MetricRecord(m)}), reply_to=msg)
else:  # pragma: no cover
    client_app = None


def evaluate_client(
    cfg,
    worker,
    strategy: str,
    rank: int,
    rp: int,
    adapter: dict,
    own: dict | None,
    merged: dict | None,
    train,
    test,
    global_test,
) -> dict:
    """A client's final model on its own test set (perplexity, ROUGE-1 of greedy answers) and on
    the cross-domain test set. Het-CPFLoRA: per prompt, the OOD weight sigma (prompt scores under
    the client's last local adapter against its training prompts) scales the two slot groups."""
    fn, sig = None, {}
    rs = rank - rp
    if strategy == "het-cpflora" and cfg.ood_weighting not in ("fixed",) and rp > 0:
        local = own if own is not None else adapter
        ref = M.prompt_scores(worker, local, rank, [e.instruction for e in train], max_seq_tokens=cfg.max_seq_tokens)
        prompts = sorted({e.instruction for e in list(test) + list(global_test)})
        sc = dict(zip(prompts, M.prompt_scores(worker, local, rank, prompts, max_seq_tokens=cfg.max_seq_tokens)))
        sig = {p: ood_similarity(s, ref) for p, s in sc.items()}

        def fn(e):
            return (rs, *part_weights(sig[e.instruction], rs, rp, cfg.ood_weighting))
    elif strategy == "het-cpflora" and cfg.ood_weighting == "half" and rp > 0:

        def fn(e):
            return (rs, 0.5, 0.5)

    kw = dict(max_seq_tokens=cfg.max_seq_tokens, merged=merged, part_scales_fn=fn)
    loc = M.response_nll(worker, adapter, rank, test, **kw)
    glo = M.response_nll(worker, adapter, rank, global_test, **kw)
    rouge = []
    for e in list(test)[: cfg.generation_examples]:
        pred = M.generate(
            worker,
            adapter,
            rank,
            e.instruction,
            max_new_tokens=cfg.max_new_tokens,
            max_seq_tokens=cfg.max_seq_tokens,
            merged=merged,
            part_scales=fn(e) if fn else None,
        )
        rouge.append(M.rouge1_f(pred, e.output))
    out = {
        "local_nll": sum(a for a, _ in loc),
        "local_tokens": sum(b for _, b in loc),
        "global_nll": sum(a for a, _ in glo),
        "global_tokens": sum(b for _, b in glo),
        "local_rouge1": sum(rouge) / len(rouge) if rouge else float("nan"),
    }
    if sig:
        out["sigma_local"] = sum(sig[e.instruction] for e in test) / max(1, len(test))
        out["sigma_global"] = sum(sig[e.instruction] for e in global_test) / max(1, len(global_test))
    return out


# ----------------------------------------------------------------------------- in-process grid


class InProcessGrid(Grid):
    """Flower's ``Grid`` API in one process: each pushed message is handled at once by the
    ClientApp with the destination node's own ``Context`` (state kept across rounds)."""

    def __init__(self, app, contexts: dict[int, "Context"]):
        from flwr.supercore.run import Run
        from flwr.supercore.task_identity import TaskIdentity

        self.app = app
        self.contexts = contexts
        self._run = Run.create_empty(1)
        self._replies: dict[str, Message] = {}
        TaskIdentity.run_id = 1  # what Flower's runtime sets for the ServerApp process
        TaskIdentity.node_id = 1
        TaskIdentity.task_id = 1

    @classmethod
    def for_run(cls, cfg, seed: int, app=None, device: str = "cpu") -> "InProcessGrid":
        run_config = {"config": json.dumps(config_dict(cfg), sort_keys=True), "seed": int(seed), "device": device}
        ctxs = {
            1001 + i: Context(
                run_id=1,
                node_id=1001 + i,
                node_config={"partition-id": i, "num-partitions": cfg.clients},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for i in range(cfg.clients)
        }
        return cls(app or client_app, ctxs)

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = str(uuid4())
            try:
                reply = self.app(m, self.contexts[m.metadata.dst_node_id])
            except Exception as ex:  # noqa: BLE001 -- as Flower's runtime: a raising ClientApp is an error reply
                from flwr.app import Error

                reason = str(type(ex)) + ":<'" + str(ex) + "'>"
                reply = Message(Error(code=2, reason=reason), reply_to=m)  # 2: CLIENT_APP_RAISED_EXCEPTION
            self._replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))

    # checkpoints of the clients' states (in-process only: real clients keep their own)
    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for nid, ctx in self.contexts.items():
            for rk, rec in ctx.state.array_records.items():
                for k, t in rec.to_torch_state_dict().items():
                    out[f"node{nid}/{rk}/{k}"] = t.contiguous()
        return out

    def load_state_tensors(self, sd: dict[str, torch.Tensor]) -> None:
        by: dict = {}
        for k, t in sd.items():
            node, rk, key = k.split("/", 2)
            by.setdefault((int(node[4:]), rk), {})[key] = t
        for (nid, rk), d in by.items():
            self.contexts[nid].state[rk] = ArrayRecord(d)


# ----------------------------------------------------------------------------- server loop


def client_specs(cfg, grid) -> list[S.ClientSpec]:
    """Ask every node for its partition id and data size (a query round), map ranks by partition."""
    msgs = [
        Message(RecordDict({"config": ConfigRecord({"ask": "partition"})}), nid, "query") for nid in grid.get_node_ids()
    ]
    specs = []
    for r in grid.send_and_receive(msgs):
        if r.has_error():
            if cfg.accept_failures:
                continue  # a node that cannot answer takes no part (Flower: accept_failures)
            raise RuntimeError(f"node {r.metadata.src_node_id} failed the query: {r.error.reason}")
        pid = int(r.content["metrics"]["partition_id"])
        if not 0 <= pid < cfg.clients:
            raise RuntimeError(f"node {r.metadata.src_node_id} has partition-id {pid}, outside 0..{cfg.clients - 1}")
        specs.append(
            S.ClientSpec(
                r.metadata.src_node_id,
                cfg.ranks[pid],
                cfg.personal_ranks[pid],
                int(r.content["metrics"]["num_examples"]),
                pid,
            )
        )
    if len(specs) < cfg.min_clients:
        raise RuntimeError(
            f"{len(specs)} nodes answered, the run needs {cfg.min_clients} (min_available_clients; 0 = all clients)"
        )
    pids = sorted(s.partition_id for s in specs)
    if len(set(pids)) != len(pids):
        raise RuntimeError(f"the nodes' partition-ids are {pids}; each of 0..{cfg.clients - 1} may appear once")
    return sorted(specs, key=lambda s: s.node_id)


def strategy_for(cfg, name: str, specs, seed: int) -> S.LoraStrategy:
    dims = {}
    shapes = M.module_dims(cfg.model, cfg.targets)
    cm = M.model_config(cfg.model)
    for i in range(cm.num_hidden_layers):
        for t, (d_in, d_out) in shapes.items():
            part = "self_attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            dims[f"model.layers.{i}.{part}.{t}"] = (d_in, d_out)
    return S.make_strategy(
        name,
        specs,
        dims,
        alpha=cfg.lora_alpha,
        homogeneous_rank=cfg.homogeneous_rank,
        seed=seed,
        aggregation_weights=cfg.aggregation_weights,
        scale_aware=cfg.scale_aware,
        accept_failures=cfg.accept_failures,
    )


def federated_rounds(
    strategy: S.LoraStrategy, grid, rounds: int, *, start_round: int = 1, on_round=None
) -> Iterator[dict]:
    """Rounds ``start_round..rounds`` of ``strategy`` over ``grid``: yields one ``round`` record each;
    ``on_round(record)`` runs after the round (checkpoints)."""
    from flwr.app import ArrayRecord, ConfigRecord

    for rnd in range(start_round, rounds + 1):
        t0 = time.perf_counter()
        replies = grid.send_and_receive(strategy.configure_train(rnd, ArrayRecord(), ConfigRecord(), grid))
        strategy.aggregate_train(rnd, replies)
        rec = {
            "kind": "round",
            "round": rnd,
            "strategy": strategy.name,
            "mean_train_loss": strategy.last["mean_train_loss"],
            "upload_bytes": strategy.last["upload_bytes"],
            "download_bytes": strategy.last["download_bytes"],
            "failures": strategy.last["failures"],  # clients whose training raised (or never replied)
            "aggregated": strategy.last["aggregated"],
            "round_s": time.perf_counter() - t0,
        }
        if on_round is not None:
            on_round(rec)
        yield rec


def final_evaluation(strategy: S.LoraStrategy, grid, rounds: int) -> dict:
    """Every client's final model, evaluated on its node: {node id: metrics}, plus the download bytes."""
    from flwr.app import ArrayRecord, ConfigRecord

    replies = grid.send_and_receive(strategy.configure_evaluate(rounds + 1, ArrayRecord(), ConfigRecord(), grid))
    strategy.aggregate_evaluate(rounds + 1, replies)
    return dict(strategy.eval_metrics)


def result_record(
    cfg, strategy: S.LoraStrategy, rounds_recs: list[dict], metrics: dict, eval_download: int, wall_s: float
) -> dict:
    per = []
    for spec in strategy.specs:
        if spec.node_id not in metrics:  # its evaluation raised (accept_failures): not in the means
            continue
        m = metrics[spec.node_id]
        row = {
            "client": len(per),
            "node_id": spec.node_id,
            "partition_id": spec.partition_id,
            "rank": strategy.rank_of(spec),
            "personal_rank": spec.personal_rank if strategy.name == "het-cpflora" else 0,
            "n_train": spec.n_train,
            "local_perplexity": math.exp(m["local_nll"] / max(1, m["local_tokens"])),
            "global_perplexity": math.exp(m["global_nll"] / max(1, m["global_tokens"])),
            "local_rouge1": m["local_rouge1"],
        }
        for k in ("sigma_local", "sigma_global"):
            if k in m:
                row[k] = m[k]
        per.append(row)
    up = sum(r["upload_bytes"] for r in rounds_recs)
    down = sum(r["download_bytes"] for r in rounds_recs) + eval_download
    mean = lambda k: sum(p[k] for p in per) / len(per) if per else float("nan")  # noqa: E731
    return {
        "kind": "result",
        "strategy": strategy.name,
        "local_perplexity": mean("local_perplexity"),
        "local_rouge1": mean("local_rouge1"),
        "global_perplexity": mean("global_perplexity"),
        "per_client": per,
        "comm_bytes_total": up + down,
        "upload_bytes_total": up,
        "download_bytes_total": down,
        "rounds": len(rounds_recs),
        "failed_evaluations": len(strategy.failed_eval),
        "failed_rounds": sum(1 for r in rounds_recs if r.get("failures")),
        "final_train_loss": rounds_recs[-1]["mean_train_loss"] if rounds_recs else float("nan"),
        "wall_s": wall_s,
    }
