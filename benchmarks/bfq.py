"""icml26 bfq benchmark: speed (inference actions/s, training gradient steps/s) of BFQ against
Diffusion-QL (N = 5 and N = 50 denoising steps), FQL and the one-step baselines, and normalised
scores on the D4RL-style datasets made here. Resumable, in parts; results in
benchmarks/results/bfq/bfq.json (a rerun prints from it).

    OMP_NUM_THREADS=1 python benchmarks/bfq.py --part speed            # the speed table (minutes)
    OMP_NUM_THREADS=1 python benchmarks/bfq.py --part scores --steps 3000 [--datasets hopper-v5-medium,...]
    python benchmarks/bfq.py --print                                   # the tables from the saved JSON

Speed protocol: one policy (1 seed), Hopper-v5 sizes (11 observation, 3 action dims), each
method's official networks and action selection (Diffusion-QL: 50 candidates), batch 256 for
training on random batches (speed does not depend on the data); ``--rounds`` alternating rounds
over the methods, the median per method (the machine is shared: the load is saved beside the
figures). Targets: BFQ's inference at
batch 1 >= 3x Diffusion-QL-5's and >= 20x Diffusion-QL-50's (the paper: 851 vs 238 / 35.5 Hz),
BFQ's training >= 1.5x Diffusion-QL-5's gradient steps per second.

Scores protocol: ``icml26 bfq train`` on each dataset (made by ``icml26 bfq make-dataset -r
recipes/bfq/make-hopper.yaml``), 3 seeds for BFQ / FQL / Diffusion-QL-5, 1 for IQL / TD3+BC / BC,
``--steps`` updates, evaluation of 10 episodes at 4 points; every run resumable under
runs/bfq-bench/. Target: BFQ >= FQL and > Diffusion-QL on at least 3 of the 4 Hopper / Walker2d
medium and medium-replay datasets. ``--part fql-alpha`` runs FQL's alpha grid (1 seed a value;
``--fql-alphas`` a part of it); ``--part eval-modes`` scores BFQ and FQL both with a noise-free and
a drawn action on the scored runs' final checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

from _results import load_results, save_results, uptime

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bfq" / "bfq.json"
SPEED_ROWS = {
    "bfq": ("bfq", {}),
    "fql": ("fql", {}),
    "diffusion-ql-5": ("diffusion-ql", {"dql_steps": 5}),
    "diffusion-ql-50": ("diffusion-ql", {"dql_steps": 50}),
    "iql": ("iql", {}),
    "td3bc": ("td3bc", {}),
    "bc": ("bc", {}),
}
DATASETS = (
    "hopper-v5-medium",
    "hopper-v5-medium-replay",
    "walker2d-v5-medium",
    "walker2d-v5-medium-replay",
    "halfcheetah-v5-medium",
    "halfcheetah-v5-medium-replay",
)
SEEDS = {"bfq": 3, "fql": 3, "diffusion-ql": 3, "iql": 1, "td3bc": 1, "bc": 1}


def _save_part(res: dict, path: tuple[str, ...]) -> None:
    """Write res[path...] into the saved results, re-read first (parts may run side by side)."""
    disk = load_results(RESULTS)
    src, dst = res, disk
    for k in path[:-1]:
        src, dst = src[k], dst.setdefault(k, {})
    dst[path[-1]] = src[path[-1]]
    save_results(RESULTS, disk)


def _train_hz(algo: str, cfg, n: int) -> float:
    import torch

    from icml26.methods.rl import offline

    ag = offline.agent_class(algo)(cfg, 11, 3, 1, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    B = cfg.batch_size
    b = {
        "observations": torch.randn(1, B, 11, generator=g),
        "next_observations": torch.randn(1, B, 11, generator=g),
        "actions": torch.rand(1, B, 3, generator=g) * 2 - 1,
        "rewards": torch.randn(1, B, generator=g),
        "terminals": torch.zeros(1, B),
    }
    for _ in range(2):
        ag.update(b)
    t0 = time.perf_counter()
    for _ in range(n):
        ag.update(b)
    return n / (time.perf_counter() - t0)


def part_speed(res: dict, rounds: int, timing_s: float, train_n: int) -> None:
    """Every method with its official networks and action selection (Config's defaults):
    Diffusion-QL draws 50 candidates and picks by softmax(Q), FQL 4x512. Results under
    ``speed_official`` (``speed``: the earlier shared-3x256 harness, kept for the record)."""
    import torch

    from icml26.methods.rl import offline

    torch.set_num_threads(1)
    base = offline.Config(batch_size=256)
    rows: dict[str, dict[str, list]] = {k: {"b1": [], "b256": [], "train": []} for k in SPEED_ROWS}
    loads = [uptime()]
    for r in range(rounds):
        for name, (algo, kw) in SPEED_ROWS.items():
            cfg = dataclasses.replace(base, **kw)
            rows[name]["b1"].append(offline.actions_per_s(algo, cfg, 11, 3, 1, "cpu", timing_s))
            if name != "diffusion-ql-50":  # 256 x 50 candidates x 50 steps: seconds per call, no target reads it
                rows[name]["b256"].append(offline.actions_per_s(algo, cfg, 11, 3, 256, "cpu", timing_s))
            n = max(2, train_n // (10 if name == "diffusion-ql-50" else 1))
            rows[name]["train"].append(_train_hz(algo, cfg, n))
        print(f"speed round {r + 1}/{rounds} done", file=sys.stderr)
    loads.append(uptime())
    res["speed_official"] = {
        "rows": {k: {m: statistics.median(v) if v else None for m, v in d.items()} for k, d in rows.items()},
        "raw": rows,
        "rounds": rounds,
        "timing_s": timing_s,
        "train_updates": train_n,
        "load": loads,
        "torch_threads": 1,
        "sizes": "Hopper-v5 (11, 3), each method's official networks, batch 256, DQL 50 candidates",
    }


def _score_run(
    f: Path,
    ds: str,
    algo: str,
    steps: int,
    hidden: tuple[int, ...],
    eval_episodes: int,
    evals: int,
    eta: float,
    fql_alpha: float | None,
    seeds: int | None,
):
    """The scores part's run of ``algo`` on dataset file ``f``: (results key, Config, run folder)."""
    from icml26.methods.rl import offline

    key = f"{ds}/{algo}/{steps}" + ("" if hidden == (256, 256, 256) else "/" + "x".join(map(str, hidden)))
    key += "/official"  # each baseline at its official settings (keys without it: the earlier harness)
    if algo == "fql" and fql_alpha is not None:
        key += f"/alpha{fql_alpha:g}"
    if algo == "bfq" and eta != offline.Config().bfq_eta:
        key += f"/eta{eta:g}"
    n_seeds = SEEDS[algo] if seeds is None else seeds
    if n_seeds != SEEDS[algo]:
        key += f"/seeds{n_seeds}"
    cfg = offline.Config(
        dataset=str(f),
        algo=(algo,),
        steps=steps,
        seeds=n_seeds,
        eval_interval=max(1, steps // evals),
        checkpoint_interval=max(1, steps // 8),
        eval_episodes=eval_episodes,
        hidden=hidden,
        bfq_eta=eta,
        **({} if fql_alpha is None else {"fql_alpha": fql_alpha}),
    )
    return key, cfg, ROOT / "runs" / "bfq-bench" / ds / key.split("/", 1)[1].replace("/", "-")


def _run_logged(run, cfg, out: Path, inputs) -> tuple[list[dict], list[float]]:
    """``run(cfg, ...)``'s records, each step record appended to ``out/steps.jsonl`` as it comes, so
    that a run killed and resumed keeps its earlier evaluations: the file's step records go to ``run``
    as ``previous`` (a step's checkpoint may predate a kill: its records are replayed only up to the
    checkpoint's updates, and the evaluations after it come again). Appended, never truncated: the
    last record of an (algo, seed, step) counts. Beside each step a ``part`` line holds the seconds
    this process had run by then; returns the records and the seconds of each earlier process (up to
    its last evaluation), so that a resumed run's wall time counts every part."""
    from icml26.core.jsonl import read_records, to_json

    log = out / "steps.jsonl"
    seen, parts = {}, {}
    for r in read_records(log) if log.is_file() else ():
        if r.get("kind") == "part":
            parts[r["started"]] = max(parts.get(r["started"], 0.0), r["elapsed_s"])
        else:
            seen[(r.get("algo"), r.get("seed"), r.get("step"))] = r
    previous = sorted(seen.values(), key=lambda r: (r.get("step", 0), r.get("seed", 0)))
    recs, started, t0 = [], time.time(), time.perf_counter()
    with log.open("a") as fh:
        for r in run(cfg, seed=0, out=out, resume=True, previous=previous, inputs=inputs):
            recs.append(r)
            if r.get("kind") == "step":
                part = {"kind": "part", "started": started, "elapsed_s": time.perf_counter() - t0}
                fh.write(to_json(r) + "\n" + to_json(part) + "\n")
                fh.flush()
    return recs, [parts[k] for k in sorted(parts)]


def part_scores(
    res: dict,
    data_dir: Path,
    datasets: list[str],
    steps: int,
    algos: list[str],
    hidden: tuple[int, ...],
    eval_episodes: int,
    evals: int,
    bfq_eta: float | None = None,
    fql_alpha: float | None = None,
    seeds: int | None = None,
) -> None:
    """``bfq_eta`` None: Config's default; ``seeds`` None: SEEDS[algo] (another count is named in the
    key). BFQ rows measured before the one-step fixes (docs/bfq.md, "What was wrong") are kept under
    keys ending in ``/prefix-eta<eta>``."""
    from icml26.core.output import to_json
    from icml26.methods.rl import offline

    eta = offline.Config().bfq_eta if bfq_eta is None else bfq_eta

    scores = res.setdefault("scores", {})
    for ds in datasets:
        f = data_dir / f"{ds}.hdf5"
        if not f.is_file():
            print(f"{ds}: no {f} (make it with icml26 bfq make-dataset); skipped", file=sys.stderr)
            continue
        for algo in algos:
            key, cfg, out = _score_run(f, ds, algo, steps, hidden, eval_episodes, evals, eta, fql_alpha, seeds)
            if key in scores:
                continue
            out.mkdir(parents=True, exist_ok=True)
            inputs = offline.validate(cfg)
            t0 = time.perf_counter()
            load0 = uptime()
            recs, earlier = _run_logged(offline.run, cfg, out, inputs)
            wall = time.perf_counter() - t0
            res_rec = next(r for r in recs if r["kind"] == "result")
            curve = [{k: r[k] for k in ("step", "seed", "normalized_score")} for r in recs if r["kind"] == "step"]
            scores[key] = {
                "result": res_rec,
                "curve": curve,
                "wall_s": sum(earlier) + wall,
                "wall_s_parts": [*earlier, wall],
                "load": [load0, uptime()],
                "hidden": list(hidden),
                "eval_episodes": eval_episodes,
            }
            _save_part(res, ("scores", key))
            print(
                to_json(
                    {
                        "dataset": ds,
                        "algo": algo,
                        "final": res_rec["normalized_score_final"],
                        "best": res_rec["normalized_score_best"],
                    }
                )
            )


class _Acting:
    """``agent`` acting by ``fn(agent, normalised observations (S, B, o))``, for ``offline.evaluate``."""

    def __init__(self, agent, fn):
        self.S, self.device, self._agent, self._fn = agent.S, agent.device, agent, fn

    def policy(self, obs):
        import torch

        with torch.no_grad():
            return self._fn(self._agent, self._agent.normalize(obs))


def _stats(x) -> dict:
    """Per-seed values (S,) with their mean and Student-t 95% interval."""
    from icml26.core.verdict import seed_interval

    return {"values": x.tolist(), "mean": float(x.mean()), "ci": seed_interval(x)}


def part_eval_modes(
    res: dict,
    data_dir: Path,
    ds: str,
    steps: int,
    episodes: int,
    fql_alpha: float | None,
    eval_episodes: int = 10,
    evals: int = 4,
) -> None:
    """BFQ and FQL scored both ways on the scores part's final checkpoints (3 seeds each): BFQ acts at
    eps = 0 in ``icml26 bfq`` (RECON) and FQL draws z ~ N(0, I) as its official ``sample_actions`` does;
    here each also acts the other way (BFQ eps ~ N(0, I), FQL z = 0), so that neither method alone
    gets the help of a noise-free action. Every evaluation runs ``episodes`` episodes per seed on the
    same start states (seed k of both methods on the same ones: paired), apart from the training
    evaluations' states. ``eval_episodes``, ``evals``: the scores part's (they name its runs)."""
    import dataclasses

    import torch

    from icml26.methods.rl import offline

    eta = offline.Config().bfq_eta
    f = data_dir / f"{ds}.hdf5"
    modes = {
        "bfq": {"zero": lambda a, o: a.act(o, True), "sampled": lambda a, o: a.act(o, False)},
        "fql": {
            "zero": lambda a, o: a.mu(o, torch.zeros(*o.shape[:-1], a.act_dim)).clamp(-1.0, 1.0),
            "sampled": lambda a, o: a.act(o),
        },
    }
    rows: dict = {"episodes": episodes, "scored_as": {"bfq": "zero", "fql": "sampled"}}
    per: dict = {}
    for algo, fns in modes.items():
        _, cfg, out = _score_run(f, ds, algo, steps, (256, 256, 256), eval_episodes, evals, eta, fql_alpha, None)
        data, env_id, ref = offline.validate(cfg)
        agent, updates = offline.load_trained(cfg, algo, data, out)
        if updates < steps:
            print(f"eval-modes: {algo} on {ds} has {updates} of {steps} updates; run the scores part first")
            return
        ev = dataclasses.replace(cfg, eval_episodes=episodes)
        for mode, fn in fns.items():
            rets = offline.evaluate(_Acting(agent, fn), data, env_id, ev, 0, 10_000)
            sc = offline.normalized_score(rets, ref["ref_min_return"], ref["ref_max_return"])
            per[(algo, mode)] = sc
            rows.setdefault(algo, {})[mode] = {**_stats(sc), "return_mean": float(rets.mean())}
    pairs = {"zero": ("zero", "zero"), "sampled": ("sampled", "sampled"), "as_scored": ("zero", "sampled")}
    rows["bfq_minus_fql"] = {k: _stats(per[("bfq", b)] - per[("fql", f)]) for k, (b, f) in pairs.items()}
    res.setdefault("eval_modes", {})[f"{ds}/{steps}" + ("" if fql_alpha is None else f"/alpha{fql_alpha:g}")] = rows
    _save_part(res, ("eval_modes",))


FQL_ALPHAS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # seohongpark/fql README: the grid for new tasks (normalize_q_loss on)


def part_fql_alpha(
    res: dict, data_dir: Path, datasets: list[str], steps: int, eval_episodes: int, alphas: tuple[float, ...]
) -> None:
    """FQL has no D4RL locomotion table: alpha is chosen on validation datasets (1 seed each, the
    final score) over FQL_ALPHAS; the scores part then runs with the chosen alpha. ``alphas``: the
    grid's values to run now (a part of it; each value's run is kept and resumable)."""
    for alpha in alphas:
        part_scores(
            res, data_dir, datasets, steps, ["fql"], (256, 256, 256), eval_episodes, 4, fql_alpha=alpha, seeds=1
        )
    rows = {
        a: [
            res["scores"]
            .get(f"{ds}/fql/{steps}/official/alpha{a:g}/seeds1", {})
            .get("result", {})
            .get("normalized_score_final")
            for ds in datasets
        ]
        for a in FQL_ALPHAS
    }
    ok = {a: statistics.mean(v) for a, v in rows.items() if v and all(x is not None for x in v)}
    res["fql_alpha"] = {
        "datasets": datasets,
        "steps": steps,
        "scores": rows,
        "chosen": max(ok, key=ok.get) if len(ok) == len(FQL_ALPHAS) else None,  # only over the whole grid
    }
    _save_part(res, ("fql_alpha",))


def eight_gaussians(g, n: int):
    """n points of the 2-D mixture of 8 Gaussians (std 0.05) on a circle of radius 0.8 (a multimodal
    behaviour policy, bfq.md "CPU test" 1)."""
    import math

    import torch

    k = torch.randint(0, 8, (n,), generator=g)
    ang = k.float() * (2 * math.pi / 8)
    return torch.stack([0.8 * torch.cos(ang), 0.8 * torch.sin(ang)], -1) + 0.05 * torch.randn(n, 2, generator=g)


def mmd_rbf(x, y, bw: float = 0.1) -> float:
    """Squared MMD (biased) with an RBF kernel of bandwidth ``bw`` between samples x (n, d), y (m, d)."""
    import torch

    def k(a, b):
        return torch.exp(-(torch.cdist(a, b) ** 2) / (2 * bw * bw)).mean()

    return float(k(x, x) + k(y, y) - 2 * k(x, y))


# (bfq_eta, bfq_time_scale, bfq_onestep_frac): the settings before the fix, the fixes one by one, the defaults
ONESTEP_RUNS = {
    "prefix-eta1": (1.0, 1000.0, 0.0),
    "prefix-eta0": (0.0, 1000.0, 0.0),
    "prefix-eta0.01": (0.01, 1000.0, 0.0),
    "ts1-eta1": (1.0, 1.0, 0.0),
    "ts1-eta0": (0.0, 1.0, 0.0),
    "ts1-eta0.1": (0.1, 1.0, 0.0),
    "ts1-eta0.01": (0.01, 1.0, 0.0),
    "ts1-os0.25-eta1": (1.0, 1.0, 0.25),
    "ts1-os0.25-eta0.1": (0.1, 1.0, 0.25),
    "default": None,
}


def part_onestep(res: dict, data_dir: Path, ds: str, steps: int, runs: list[str]) -> None:
    """Diagnostics of BFQ's one-step map (1 seed, 2 x 128, ``steps`` updates on ``ds``): the share of
    deterministic one-step actions at the bounds (|a| > 0.99), the same for stochastic ones before
    the clip (eps ~ N(0, 1)) beside the dataset's share, a 10-step chain of pi over [k/10, (k+1)/10]
    (the flow away from the one-step query), L_comp at random (r, m, t) and at the query (r, t) =
    (0, 1), mean |Q(s, a_D)|, and the score of 10 deterministic episodes. Held-out states: 2000
    dataset rows. Saved under "onestep"."""
    import json

    import torch

    from icml26.methods.rl import bfq as bfqm, offline, offline_data

    torch.set_num_threads(1)
    data = offline_data.load(data_dir / f"{ds}.hdf5")
    ref = offline_data.score_reference(data, data.env)
    hold = data.sample(1, 2000, torch.Generator().manual_seed(123))
    A, O = hold["actions"], hold["observations"]
    out = res.setdefault("onestep", {})
    out.setdefault(f"{ds}/dataset", {"frac_at_bounds": float((A.abs() > 0.99).float().mean())})
    for name in runs:
        key = f"{ds}/{steps}/{name}"
        if key in out:
            continue
        kw = (
            {}
            if ONESTEP_RUNS[name] is None
            else dict(zip(("bfq_eta", "bfq_time_scale", "bfq_onestep_frac"), ONESTEP_RUNS[name]))
        )
        cfg = offline.Config(hidden=(128, 128), seeds=1, eval_episodes=10, **kw)
        ag = offline.agent_class("bfq")(
            cfg, data.obs_dim, data.act_dim, 1, generator=torch.Generator().manual_seed(0), info=data.info
        )
        g = torch.Generator().manual_seed(1)
        t0 = time.perf_counter()
        for _ in range(steps):
            ag.train_step(data.sample(1, 256, g))
        On = ag.normalize(O)  # the dataset's fields are raw; BFQ sees normalised observations
        with torch.no_grad():
            det = ag.act(On, deterministic=True)
            eps = torch.randn(A.shape, generator=torch.Generator().manual_seed(5))
            F = ag.velocity(On)
            z = torch.zeros(*A.shape[:-1], 1)
            raw = bfqm.policy_operator(F, eps, z, z + 1)
            x = eps
            for k in range(10, 0, -1):
                x = bfqm.policy_operator(F, x, z + (k - 1) / 10, z + k / 10)
            tm = bfqm.sample_times(torch.Generator().manual_seed(9), 1, A.shape[1], 1e-3, "cpu")
            a_t = (1 - tm["t"]) * A + tm["t"] * eps
            row = {
                "settings": {
                    "bfq_eta": cfg.bfq_eta,
                    "bfq_time_scale": cfg.bfq_time_scale,
                    "bfq_onestep_frac": cfg.bfq_onestep_frac,
                },
                "det_at_bounds": float((det.abs() > 0.99).float().mean()),
                "sto_raw_abs_mean": float(raw.abs().mean()),
                "sto_at_bounds": float((raw.abs() > 0.99).float().mean()),
                "chain10_at_bounds": float((x.abs() > 0.99).float().mean()),
                "lcomp_random": float(bfqm.composition_loss(F, a_t, tm["r"], tm["m"], tm["t"])),
                "lcomp_one_step_query": float(bfqm.composition_loss(F, eps, z, tm["m"], z + 1)),
                "mean_abs_q": float(ag.critic.q(On, A).abs().mean()),
            }
        rets = offline.evaluate(ag, data, data.env, cfg, 0, 0)
        row["score"] = float(offline.normalized_score(rets, ref["ref_min_return"], ref["ref_max_return"])[0])
        row["wall_s"] = time.perf_counter() - t0
        out[key] = row
        _save_part(res, ("onestep", key))
        _save_part(res, ("onestep", f"{ds}/dataset"))
        print(json.dumps({"run": key, **row}), flush=True)


def part_toy(res: dict, steps: int) -> None:
    """BFQ's L_BC alone (no critic) on the 8-Gaussian mixture for lam in {0, 0.5, 1}: MMD of its
    one-step samples to held-out data, and of the lam = 1 (flow-matching-only) model sampled with
    10 Euler steps of the same network (bfq.md's expressivity check)."""
    import torch

    from icml26.methods.rl import bfq, offline

    torch.set_num_threads(1)
    out = {}
    test = eight_gaussians(torch.Generator().manual_seed(99), 2000)
    for lam in (0.0, 0.5, 1.0):
        cfg = offline.Config(hidden=(256, 256, 256), bfq_lam=lam)
        ag = bfq.BFQ(cfg, 1, 2, 1, generator=torch.Generator().manual_seed(0))
        opt = torch.optim.Adam(ag.flow.parameters(), lr=3e-4)
        g = torch.Generator().manual_seed(1)
        B = 256
        zeros = torch.zeros(1, B, 1)
        for _ in range(steps):
            a = eight_gaussians(g, B)[None]
            eps = torch.randn(1, B, 2, generator=g)
            tm = bfq.sample_times(g, 1, B, cfg.bfq_d_max, "cpu", cfg.bfq_onestep_frac)  # as the learner samples them
            F = ag.velocity(zeros)
            if torch.rand((), generator=g) < lam:
                loss = bfq.boundary_loss(F, a, eps, tm["t_b"], tm["d"]).sum()
            else:
                loss = bfq.composition_loss(F, (1 - tm["t"]) * a + tm["t"] * eps, tm["r"], tm["m"], tm["t"]).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            n = 2000
            eps = torch.randn(1, n, 2, generator=torch.Generator().manual_seed(5))
            obs = torch.zeros(1, n, 1)
            one = bfq.policy_operator(ag.velocity(obs), eps, torch.zeros(1, n, 1), torch.ones(1, n, 1))[0]
            x = eps
            for i in range(10, 0, -1):  # 10 Euler steps of the short-range velocity, t = 1 -> 0
                t = torch.full((1, n, 1), i / 10)
                x = bfq.policy_operator(ag.velocity(obs), x, t - 0.1, t)
        # a sampler whose samples leave the finite range has no MMD: None (printed "diverged")
        out[str(lam)] = {
            "mmd_one_step": mmd_rbf(one, test) if torch.isfinite(one).all() else None,
            "mmd_10_step": mmd_rbf(x[0], test) if torch.isfinite(x).all() else None,
        }
        print(f"toy lam={lam}: {out[str(lam)]}", file=sys.stderr)
    out["data_vs_data"] = mmd_rbf(eight_gaussians(torch.Generator().manual_seed(7), 2000), test)
    res["toy"] = {"steps": steps, "rows": out, "load": uptime()}


def d3rlpy_worker(
    dataset: Path, steps: int, seeds: int, hidden: tuple[int, ...], eval_episodes: int, out: Path
) -> None:
    """Runs in the d3rlpy peer venv (gymnasium 1.0): d3rlpy's TD3+BC on our hdf5 file with our
    settings (batch 256, lr 3e-4, alpha 2.5, standardised observations, the same hidden widths,
    ``steps`` updates), evaluated by our harness's evaluation (same episodes and seeds)."""
    import json

    import d3rlpy
    import numpy as np
    import torch

    from icml26.methods.rl import d4rl, offline, offline_data

    data, attrs = d4rl.read(dataset)
    ds = d3rlpy.dataset.MDPDataset(
        data["observations"],
        data["actions"],
        data["rewards"],
        data["terminals"].astype(np.float32),
        timeouts=data["timeouts"].astype(np.float32),
    )
    cfg = offline.Config(eval_episodes=eval_episodes)

    class Wrapped:  # our evaluation loop around d3rlpy's policy
        S, device = 1, "cpu"

        def __init__(self, algo):
            self.algo = algo

        def act(self, obs, deterministic=True):
            return torch.as_tensor(self.algo.predict(obs[0].numpy().astype(np.float32)))[None]

        policy = act  # raw observations: d3rlpy scales them itself

    class Raw:
        @staticmethod
        def normalize(x):
            return x

    rets, hz = [], []
    for k in range(seeds):
        d3rlpy.seed(k)
        enc = d3rlpy.models.VectorEncoderFactory(list(hidden))
        algo = d3rlpy.algos.TD3PlusBCConfig(
            batch_size=256,
            actor_learning_rate=3e-4,
            critic_learning_rate=3e-4,
            alpha=2.5,
            actor_encoder_factory=enc,
            critic_encoder_factory=enc,
            observation_scaler=d3rlpy.preprocessing.StandardObservationScaler(),
        ).create(device="cpu")
        t0 = time.perf_counter()
        algo.fit(
            ds,
            n_steps=steps,
            n_steps_per_epoch=steps,
            show_progress=False,
            save_interval=10**9,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        )
        hz.append(steps / (time.perf_counter() - t0))
        rets.append(float(offline.evaluate(Wrapped(algo), Raw(), attrs["env"], cfg, k, 0)[0]))
    ref = offline_data.score_reference(offline_data.load(dataset), attrs["env"])
    out.write_text(json.dumps({"returns": rets, "train_hz": hz, "d3rlpy": d3rlpy.__version__, **ref}))


def part_d3rlpy(
    res: dict, data_dir: Path, ds: str, steps: int, hidden: tuple[int, ...], eval_episodes: int, seeds: int
) -> None:
    """d3rlpy's TD3+BC (peer venv) beside ours, same dataset, steps, networks, seeds and evaluation."""
    import json
    import subprocess
    import tempfile

    import numpy as np

    from icml26.core.peers import find_peer, peer_env
    from icml26.core.stats import bootstrap_mean_ci
    from icml26.methods.rl import offline

    py = find_peer("d3rlpy")
    if py is None:
        print("d3rlpy peer venv missing: python -m icml26.core.peers d3rlpy (or make peers); skipped", file=sys.stderr)
        return
    f = data_dir / f"{ds}.hdf5"
    key = f"{ds}/{steps}/" + "x".join(map(str, hidden))
    entry = res.setdefault("d3rlpy", {}).get(key, {})
    if "ours" not in entry:
        cfg = offline.Config(
            dataset=str(f),
            algo=("td3bc",),
            steps=steps,
            seeds=seeds,
            eval_interval=steps,
            eval_episodes=eval_episodes,
            td3bc_hidden=hidden,
            checkpoint_interval=0,
        )
        r = next(x for x in offline.run(cfg, seed=0) if x["kind"] == "result")
        entry["ours"] = r
        res["d3rlpy"][key] = entry
        _save_part(res, ("d3rlpy", key))
    if "peer" not in entry:
        with tempfile.TemporaryDirectory() as tmp:
            o = Path(tmp) / "peer.json"
            cmd = [
                str(py),
                str(Path(__file__).resolve()),
                "--d3rlpy-worker",
                str(f),
                "--steps",
                str(steps),
                "--hidden",
                ",".join(map(str, hidden)),
                "--eval-episodes",
                str(eval_episodes),
                "--seeds-peer",
                str(seeds),
                "--worker-out",
                str(o),
            ]
            p = subprocess.run(cmd, env={**peer_env("d3rlpy"), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
            if p.returncode:
                raise RuntimeError(f"d3rlpy worker failed: {p.stderr[-2000:]}")
            peer = json.loads(o.read_text())
        sc = offline.normalized_score(np.asarray(peer["returns"]), peer["ref_min_return"], peer["ref_max_return"])
        peer.update(
            normalized_score_final=float(sc.mean()),
            normalized_score_final_ci=list(bootstrap_mean_ci(sc)),
            scores=sc.tolist(),
        )
        entry["peer"] = peer
        entry["load"] = uptime()
        res["d3rlpy"][key] = entry
        _save_part(res, ("d3rlpy", key))


def partial(data_dir: Path, at: int) -> dict:
    """Scores at ``at`` updates of every run under runs/bfq-bench/ (finished or stopped), read from
    its checkpoint's evaluation history (seed-mean normalised score), for a same-budget comparison
    that includes runs the time did not let finish; saved under "partial"."""
    import numpy as np
    from safetensors.torch import load_file

    from icml26.methods.rl import offline, offline_data

    out: dict = {}
    for ck in sorted((ROOT / "runs" / "bfq-bench").glob("*/*/checkpoint-*.safetensors")):
        ds, run = ck.parent.parent.name, ck.parent.name
        ev = load_file(str(ck))["loop.evals"].numpy()
        rows = [r for r in ev if int(r[0]) == at]
        if not rows:
            continue
        data = offline_data.load(data_dir / f"{ds}.hdf5")
        ref = offline_data.score_reference(data, data.env)
        sc = offline.normalized_score(rows[0][1:], ref["ref_min_return"], ref["ref_max_return"])
        out[f"{ds}/{run}"] = {
            "at": at,
            "scores": sc.tolist(),
            "mean": float(np.mean(sc)),
            "updates_done": int(load_file(str(ck))["loop.counters"][0]),
        }
    return out


def _fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def _report_speed(res: dict) -> None:
    for key, title in (
        ("speed", "the earlier harness: every method 3 x 256 ReLU, DQL's chain from 0 without noise"),
        ("speed_official", "each method as its official code: FQL 4x512, DQL Mish + 50 candidates"),
    ):
        sp = res.get(key)
        if not sp:
            continue
        rows = sp["rows"]
        print(
            f"\nSpeed, {title} ({sp['sizes']}, 1 thread, median of {sp['rounds']} rounds; load "
            f"{sp['load'][0].split('load average:')[-1].strip()} -> "
            f"{sp['load'][-1].split('load average:')[-1].strip()})"
        )
        print("| method | nfe | actions/s b1 | actions/s b256 | train Hz |")
        print("|---|---|---|---|---|")
        for k, v in rows.items():
            nfe = 50 if k == "diffusion-ql-50" else 5 if k == "diffusion-ql-5" else 1
            print(f"| {k} | {nfe} | {_fmt(v['b1'])} | {_fmt(v['b256'])} | {_fmt(v['train'], 2)} |")
        b, d5, d50 = rows["bfq"], rows["diffusion-ql-5"], rows["diffusion-ql-50"]
        print("\n| target | measured | met |")
        print("|---|---|---|")
        for name, num, den, want in (
            ("BFQ inference b1 >= 3x DQL-5", b["b1"], d5["b1"], 3.0),
            ("BFQ inference b1 >= 20x DQL-50", b["b1"], d50["b1"], 20.0),
            ("BFQ inference b256 >= 3x DQL-5", b["b256"], d5["b256"], 3.0),
            ("BFQ inference b256 >= 20x DQL-50", b["b256"], d50["b256"], 20.0),
            ("BFQ training >= 1.5x DQL-5", b["train"], d5["train"], 1.5),
        ):
            if num is None or den is None:
                continue
            val = num / den
            print(f"| {name} | {val:.2f}x | {'met' if val >= want else 'NOT met'} |")


def _entry(sc: dict, ds: str, algo: str, steps: str, fql_alpha: float | None) -> dict | None:
    """The scores-part run of ``algo`` on ``ds``: for FQL the 3-seed run at the chosen alpha (or the only
    alpha run, or the run at Config's default), never a 1-seed grid run."""
    e = sc.get(f"{ds}/{algo}/{steps}")
    if algo != "fql" or not steps.endswith("official"):
        return e
    if fql_alpha is not None and f"{ds}/fql/{steps}/alpha{fql_alpha:g}" in sc:
        return sc[f"{ds}/fql/{steps}/alpha{fql_alpha:g}"]
    runs = [k for k in sc if k.startswith(f"{ds}/fql/{steps}/alpha") and "/seeds" not in k]
    return sc[runs[0]] if e is None and len(runs) == 1 else e


def _final(e: dict) -> dict:
    """A saved scores-part run's per-seed score at its last evaluation: {seed: normalised score}."""
    end = max(x["step"] for x in e["curve"])
    return {r["seed"]: r["normalized_score"] for r in e["curve"] if r["step"] == end}


def _report_scores(sc: dict, fql_alpha: float | None = None) -> None:
    print("\nNormalised scores (final [95% CI] / best; seeds: BFQ, FQL, DQL 3, others 1)")
    print("| dataset | steps | " + " | ".join(SEEDS) + " |")
    print("|---|---|" + "---|" * len(SEEDS))
    keys = sorted({(k.split("/")[0], "/".join(k.split("/")[2:4])) for k in sc})
    for ds, steps in keys:
        cells = []
        for algo in SEEDS:
            e = _entry(sc, ds, algo, steps, fql_alpha)
            if e is None:
                cells.append("-")
                continue
            r = e["result"]
            ci = r.get("normalized_score_final_ci")
            cells.append(
                f"{_fmt(r['normalized_score_final'])}"
                + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci and r["seeds"] > 1 else "")
                + f" / {_fmt(r['normalized_score_best'])}"
                + (
                    f" (D4RL scale {_fmt(r['normalized_score_d4rl_final'])})"
                    if r.get("normalized_score_d4rl_final") is not None and r.get("score_reference") == "dataset"
                    else ""
                )
            )
        print(f"| {ds} | {steps} | " + " | ".join(cells) + " |")
    for k, e in sc.items():
        if "/prefix-eta" in k:
            r = e["result"]
            print(
                f"BFQ before the one-step fixes, {k.split('/')[-1].replace('prefix-eta', 'eta = ')}, on "
                f"{k.split('/')[0]}: final "
                f"{_fmt(r['normalized_score_final'])}, best {_fmt(r['normalized_score_best'])}"
            )
        elif "/eta" in k:
            r = e["result"]
            ci = r.get("normalized_score_final_ci")
            print(
                f"BFQ with {k.split('/')[-1].replace('eta', 'eta = ')} on {k.split('/')[0]} "
                f"({'/'.join(k.split('/')[2:4])}): final "
                f"{_fmt(r['normalized_score_final'])} [{ci[0]:.1f}, {ci[1]:.1f}], best "
                f"{_fmt(r['normalized_score_best'])}"
            )
    for official, target in ((False, "4 of 6, earlier harness"), (True, "3 of 4, official baselines")):
        wins = 0
        n = 0
        for ds, steps in keys:
            if ("official" in steps) != official:
                continue
            g = {a: _entry(sc, ds, a, steps, fql_alpha) for a in ("bfq", "fql", "diffusion-ql")}
            if all(g.values()):
                n += 1
                s = {a: v["result"]["normalized_score_final"] for a, v in g.items()}
                wins += s["bfq"] >= s["fql"] and s["bfq"] > s["diffusion-ql"]
        if n:
            print(f"\nBFQ >= FQL and > Diffusion-QL (final score): {wins} of {n} datasets measured (target: {target})")
    from icml26.core.verdict import seed_interval

    separated: dict = {}
    for ds, steps in keys:  # paired by seed: seed k of every method is evaluated on the same episodes
        a = sc.get(f"{ds}/bfq/{steps}")
        for other in ("fql", "diffusion-ql"):
            b = _entry(sc, ds, other, steps, fql_alpha)
            if not (a and b):
                continue
            fa, fb = _final(a), _final(b)
            d = [fa[k] - fb[k] for k in sorted(fa) if k in fb and fa[k] is not None and fb[k] is not None]
            ci = seed_interval(d)
            separated.setdefault((ds, steps), {})[other] = ci
            print(
                f"BFQ - {other.upper() if other == 'fql' else 'Diffusion-QL'} on {ds} ({steps}), paired over "
                f"{len(d)} seeds: {statistics.mean(d):+.1f}" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")
            )
    # the target with intervals: BFQ >= FQL unless the paired interval lies below 0, BFQ > Diffusion-QL only
    # when it lies above 0
    rows = {k: v for k, v in separated.items() if "official" in k[1] and len(v) == 2 and all(v.values())}
    if rows:
        wins = sum(v["fql"][1] >= 0 and v["diffusion-ql"][0] > 0 for v in rows.values())
        print(
            f"BFQ not below FQL and above Diffusion-QL, paired 95% intervals: {wins} of {len(rows)} datasets "
            "measured (target: 3 of 4, official baselines)"
        )


NAMES = {"bfq": "BFQ", "fql": "FQL", "diffusion-ql": "Diffusion-QL, N = 5", "iql": "IQL", "td3bc": "TD3+BC", "bc": "BC"}


def _stopped(ds: str, algo: str, steps: str, steps_at: list[int]) -> str:
    """The cell of a run without a saved result: the evaluations its folder's ``steps.jsonl`` holds
    (seed-mean score at each evaluation step reached) when it was stopped before its end, else "not
    run". Reads the first folder matching ``<algo>-<steps>-official*`` (one FQL alpha per dataset here)."""
    from icml26.core.jsonl import read_records

    n = steps.split("/")[0]
    logs = sorted((ROOT / "runs" / "bfq-bench" / ds).glob(f"{algo}-{n}-official*/steps.jsonl"))
    last: dict[tuple, float] = {}  # (step, seed) -> score; the last record counts, as in _run_logged
    for log in logs[:1]:
        for r in read_records(log):
            if r.get("kind") == "step" and r.get("normalized_score") is not None:
                last[(r["step"], r["seed"])] = r["normalized_score"]
    at: dict[int, list[float]] = {}
    for (step, _), v in last.items():
        at.setdefault(step, []).append(v)
    if not at:
        return "not run"
    curve = " / ".join(f"{statistics.mean(at[k]):.1f}" if k in at else "-" for k in steps_at)
    return f"stopped before {n} updates (no result); seed-mean score at evaluations reached: {curve}"


def _report_official(sc: dict, fql_alpha: float | None) -> None:
    """Per dataset scored at official strength: the docs' table (final score on the dataset's scale and
    on D4RL's with their 95% intervals, per-seed finals, the seed-mean curve, updates/s, wall time)."""
    for ds, steps in sorted({(k.split("/")[0], "/".join(k.split("/")[2:4])) for k in sc if "/official" in k}):
        rows = {a: _entry(sc, ds, a, steps, fql_alpha) for a in SEEDS}
        if not any(rows.values()):
            continue
        print(f"\n{ds}, {steps.split('/')[0]} updates at official strength")
        head = "| method | seeds | final, dataset scale | final, D4RL scale | per-seed final | curve | updates/s |"
        print(head + " wall s (each process of a resumed run) |")
        print("|---|---|---|---|---|---|---|---|")
        steps_at = sorted({c["step"] for e in rows.values() if e for c in e["curve"]})
        for algo, e in rows.items():
            if e is None:
                print(f"| {NAMES[algo]} | {_stopped(ds, algo, steps, steps_at)} | | | | | | |")
                continue
            r = e["result"]

            def cell(k: str) -> str:
                ci = r.get(f"{k}_ci")
                v = r.get(k)
                return "-" if v is None else _fmt(v) + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci and r["seeds"] > 1 else "")

            end = _final(e)
            parts = e.get("wall_s_parts")  # absent in runs saved before parts were logged
            wall = " + ".join(f"{w:.0f}" for w in parts) if parts else f"{e['wall_s']:.0f} (last process)"
            curve = [
                [c["normalized_score"] for c in e["curve"] if c["step"] == s and c["normalized_score"] is not None]
                for s in steps_at
            ]
            curve = [statistics.mean(v) if v else None for v in curve]
            key = next(k for k, v in sc.items() if v is e)
            name = NAMES[algo] + (f" ({key.rsplit('/', 1)[1].replace('alpha', 'alpha ')})" if "/alpha" in key else "")
            print(
                f"| {name} | {r['seeds']} | {cell('normalized_score_final')} | {cell('normalized_score_d4rl_final')} | "
                + ", ".join(_fmt(end[k]) for k in sorted(end))
                + " | "
                + " / ".join("not kept" if x is None else _fmt(x) for x in curve)
                + f" | {_fmt(r.get('train_hz'))} | {wall} |"
            )
        print("curve: seed-mean score at " + " / ".join(f"{s // 1000}k" for s in steps_at) + " updates")


def report(res: dict) -> None:
    _report_speed(res)
    for at, rows in (res.get("partial") or {}).items():
        print(f"\nSeed-mean normalised score at {at} updates, from each run's checkpoint (finished or stopped runs):")
        print("| run | seeds' scores | mean | updates done |")
        print("|---|---|---|---|")
        for k, v in rows.items():
            print(f"| {k} | {', '.join(f'{x:.1f}' for x in v['scores'])} | {v['mean']:.1f} | {v['updates_done']} |")
    one = res.get("onestep")
    if one:
        print(
            "\nBFQ's one-step map (1 seed, 2 x 128; shares of action dims at |a| > 0.99; L_comp at random times / at "
            "(r, t) = (0, 1))"
        )
        print(
            "| run | eta, time scale, one-step rows | deterministic | stochastic (before clip) | 10-step chain | "
            "L_comp random / query | score |"
        )
        print("|---|---|---|---|---|---|---|")
        for k, r in one.items():
            if k.endswith("/dataset"):
                print(f"| {k} | - | - | {r['frac_at_bounds']:.4f} | - | - | - |")
                continue
            st = r["settings"]
            print(
                f"| {k} | {st['bfq_eta']:g}, {st['bfq_time_scale']:g}, {st['bfq_onestep_frac']:g} | "
                f"{r['det_at_bounds']:.3f} | {r['sto_at_bounds']:.3f} | "
                f"{r['chain10_at_bounds']:.3f} | {r['lcomp_random']:.4f} / {r['lcomp_one_step_query']:.4f} | "
                f"{r['score']:.1f} |"
            )
    toy = res.get("toy")
    if toy:
        print(
            f"\nToy: 8-Gaussian mixture, L_BC only, {toy['steps']} updates; MMD^2 (RBF 0.1) to held-out data, lower is "
            "better "
            f"(data vs data: {toy['rows']['data_vs_data']:.4f})"
        )
        print("| lam | one-step (BFQ's map) | 10 Euler steps |")
        print("|---|---|---|")

        def fmt(v):  # None: the sampler's samples were non-finite (NaN in older saves)
            return "diverged" if v is None or v != v else f"{v:.4f}"

        for lam in ("0.0", "0.5", "1.0"):
            r = toy["rows"][lam]
            print(f"| {lam} | {fmt(r['mmd_one_step'])} | {fmt(r['mmd_10_step'])} |")
    for key, e in (res.get("d3rlpy") or {}).items():
        if "ours" in e and "peer" in e:
            o, p = e["ours"], e["peer"]
            lo, hi = p["normalized_score_final_ci"]
            inside = lo <= o["normalized_score_final"] <= hi
            print(f"\nd3rlpy {p['d3rlpy']} TD3+BC beside ours ({key}, {o['seeds']} seeds each, final score [95% CI]):")
            print("| implementation | normalised score | train Hz |")
            print("|---|---|---|")
            print(
                f"| ours | {o['normalized_score_final']:.1f} [{o['normalized_score_final_ci'][0]:.1f}, "
                f"{o['normalized_score_final_ci'][1]:.1f}] | {o['train_hz']:.1f} (seeds batched) |"
            )
            print(
                f"| d3rlpy | {p['normalized_score_final']:.1f} [{lo:.1f}, {hi:.1f}] | "
                f"{statistics.mean(p['train_hz']):.1f} (per seed) |"
            )
            print(f"ours within d3rlpy's interval: {'yes' if inside else 'NO'}")
    sc = res.get("scores")
    if sc:
        _report_scores(sc, (res.get("fql_alpha") or {}).get("chosen"))
        _report_official(sc, (res.get("fql_alpha") or {}).get("chosen"))
    for k, r in (res.get("eval_modes") or {}).items():
        print(f"\nBFQ and FQL both ways on {k} (final checkpoints, {r['episodes']} episodes a seed, mean [95% CI])")
        print("| method | eps / z = 0 | eps / z ~ N(0, I) |")
        print("|---|---|---|")
        for algo in ("bfq", "fql"):
            cells = [
                f"{r[algo][m]['mean']:.1f} [{r[algo][m]['ci'][0]:.1f}, {r[algo][m]['ci'][1]:.1f}]"
                for m in ("zero", "sampled")
            ]
            print(f"| {algo} (scored: {r['scored_as'][algo]}) | " + " | ".join(cells) + " |")
        for m, v in r["bfq_minus_fql"].items():
            print(f"BFQ - FQL, {m}, paired over seeds: {v['mean']:+.1f} [{v['ci'][0]:+.1f}, {v['ci'][1]:+.1f}]")
    grid = res.get("fql_alpha")
    if grid:
        print(f"\nFQL's alpha grid (1 seed, {grid['steps']} updates, final normalised score per dataset)")
        print("| alpha | " + " | ".join(grid["datasets"]) + " |")
        print("|---|" + "---|" * len(grid["datasets"]))
        for a, v in grid["scores"].items():
            print(f"| {float(a):g} | " + " | ".join(_fmt(x) for x in v) + " |")
        print(f"chosen: {grid['chosen'] if grid['chosen'] is not None else 'none yet (grid not complete)'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--part",
        choices=("speed", "scores", "toy", "d3rlpy", "onestep", "fql-alpha", "eval-modes"),
        action="append",
        default=[],
    )
    ap.add_argument("--fql-alpha", type=float, default=None, help="FQL's alpha in the scores part (default: Config's)")
    ap.add_argument(
        "--fql-alphas",
        default=",".join(f"{a:g}" for a in FQL_ALPHAS),
        help="the fql-alpha part's grid values to run now (default: the whole grid)",
    )
    ap.add_argument(
        "--onestep-runs",
        default="prefix-eta1,default",
        help=f"the onestep part's settings, of {', '.join(ONESTEP_RUNS)}",
    )
    ap.add_argument("--d3rlpy-worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--seeds-peer", type=int, default=3, help="seeds of the d3rlpy side-by-side (each side)")
    ap.add_argument("--toy-steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timing-s", type=float, default=0.5)
    ap.add_argument("--train-updates", type=int, default=20)
    ap.add_argument("--data-dir", default="runs/bfq-data/hopper")
    ap.add_argument("--datasets", default=",".join(DATASETS[:2]))
    ap.add_argument("--algos", default=",".join(SEEDS))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument(
        "--hidden",
        default="256,256,256",
        help="hidden widths of BFQ and BC in the scores part (the baselines keep their official networks)",
    )
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--eval-modes-episodes", type=int, default=30, help="episodes a seed in the eval-modes part")
    ap.add_argument("--evals", type=int, default=4, help="evaluations per run (the last at --steps)")
    ap.add_argument(
        "--bfq-eta",
        type=float,
        default=None,
        help="BFQ's eta in the scores part (default: Config's, 0.1; bfq.md: grid {0.001 .. 1} per task)",
    )
    ap.add_argument(
        "--partial-at",
        type=int,
        default=0,
        help="also save the scores at this many updates read from every run's checkpoint",
    )
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args()
    hidden = tuple(int(h) for h in a.hidden.split(","))
    if a.d3rlpy_worker:
        d3rlpy_worker(Path(a.d3rlpy_worker), a.steps, a.seeds_peer, hidden, a.eval_episodes, Path(a.worker_out))
        return
    res = load_results(RESULTS)
    if "speed" in a.part:
        part_speed(res, a.rounds, a.timing_s, a.train_updates)
        _save_part(res, ("speed_official",))
    if "onestep" in a.part:
        part_onestep(
            res,
            ROOT / a.data_dir,
            [d for d in a.datasets.split(",") if d][0],
            a.steps,
            [x for x in a.onestep_runs.split(",") if x],
        )
    if "toy" in a.part:
        part_toy(res, a.toy_steps)
        _save_part(res, ("toy",))
    if "scores" in a.part:
        part_scores(
            res,
            ROOT / a.data_dir,
            [d for d in a.datasets.split(",") if d],
            a.steps,
            [x for x in a.algos.split(",") if x],
            hidden,
            a.eval_episodes,
            a.evals,
            a.bfq_eta,
            a.fql_alpha,
        )
    if "fql-alpha" in a.part:
        part_fql_alpha(
            res,
            ROOT / a.data_dir,
            [d for d in a.datasets.split(",") if d],
            a.steps,
            a.eval_episodes,
            tuple(float(x) for x in a.fql_alphas.split(",") if x),
        )
    if "eval-modes" in a.part:
        for ds in [d for d in a.datasets.split(",") if d]:
            part_eval_modes(
                res, ROOT / a.data_dir, ds, a.steps, a.eval_modes_episodes, a.fql_alpha, a.eval_episodes, a.evals
            )
    if a.partial_at:
        res.setdefault("partial", {})[str(a.partial_at)] = partial(ROOT / a.data_dir, a.partial_at)
        _save_part(res, ("partial", str(a.partial_at)))
    if "d3rlpy" in a.part:
        part_d3rlpy(
            res,
            ROOT / a.data_dir,
            [d for d in a.datasets.split(",") if d][0],
            a.steps,
            hidden,
            a.eval_episodes,
            a.seeds_peer,
        )
    report(load_results(RESULTS))


if __name__ == "__main__":
    main()
