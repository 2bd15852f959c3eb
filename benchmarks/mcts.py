"""Benchmark of `icml26 mcts`: simulations per second, and accuracy vs budget.

1. Speed, one thread, batch 1, on one synthetic tree shape (4 actions, depth 5, deterministic
   transitions, Gaussian rewards): the C++ kernel vs its pure-Python `_ref` twin vs a plain
   Python UCT (dicts, no statistics beyond UCB1) vs DeepMind's mctx (`muzero_policy`,
   `gumbel_muzero_policy`, jit-compiled, CPU) in the mctx peer venv of `make peers` (jax + mctx;
   another python with both: --mctx-python, none: --no-mctx); mctx reads the same tree
   through its recurrent_fn (embedding = node id, reward = mean reward). Both sides are timed
   one search per call (batch 1, 2000 simulations, max depth = tree depth) and report the
   median over calls of both the wall time and the process CPU time (all threads, so jax's
   own threads count), and the fastest call. Only an idle machine gives clean ratios: under
   load a short call (ours, ~0.5 ms) often runs uncontended while a long one (mctx, ~50 ms)
   does not, which flatters the wall figures; CPU and best-call figures are less affected.
   Our simulations always descend to a leaf (5 steps) and sample a Gaussian reward at each
   step; mctx's stop at the first unexpanded node and read the mean reward. jax keeps its
   own thread settings.
2. Accuracy: P(optimal root action) and simple regret of every algorithm vs budget on the
   noisy and heavy-tailed trees (C++), slippery FrozenLake 8x8 and rainy Taxi (Python search
   over gymnasium's table), under ``--value-norm`` (default minmax, the command's default;
   oracle gives the paper-style tables). Each env's records go to
   benchmarks/results/mcts_accuracy_<value-norm>.json as it finishes (``--print-only`` reprints
   them; an env already there is not rerun).

3. Episodes (``--episodes``): the mean undiscounted return (Student-t 95%) of full episodes
   on slippery FrozenLake 8x8 and rainy Taxi, per planner and budget, without and with
   ``reuse_tree``; sized by --episode-count, --episode-budgets, --episode-steps (defaults: 3
   episodes, budgets 20 and 60, at most 40 moves on either env; --episode-envs, --episode-algos
   pick a subset). Stored per
   (env, reuse, algo) in benchmarks/results/mcts_episodes_<value-norm>.json (resumable).

4. Gymnasium tables (``--gym-speed``): the C++ table kernel vs the Python search on slippery
   FrozenLake 8x8 (horizon 40), Taxi and rainy Taxi (horizon 20), every planner, batch 1, one
   thread, value_norm minmax; target >= 100x, printed per row with met / not met, and whether
   the two gave the same root statistics bit for bit. ``--gym-envs garnet50,riverswim``: the
   same on MDP files (``mdp:`` specs, bpi's format, with Gaussian reward noise). Resumable per
   (env, algo) in benchmarks/results/mcts_gym_speed.json.

    python benchmarks/mcts.py [--quick] [--skip-speed] [--skip-accuracy] [--value-norm NORM]
                              [--envs noisy,heavy,frozenlake8x8,taxi] [--mctx-python PY | --no-mctx]
                              [--episodes [--episode-count 3] [--episode-budgets 20,60]]
                              [--gym-speed [--gym-envs frozenlake8x8,taxi,rainy-taxi] [--gym-sims 2000]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def plain_uct(tree, budget: int, seed: int, c: float) -> int:
    """A textbook UCT in plain Python (dicts), for scale: UCB1, mean returns, no extras."""
    import random

    rng = random.Random(seed)
    N, W = {}, {}
    off, oo, ch, mean, scale = tree.node_off, tree.out_off, tree.child, tree.mean, tree.scale
    for _ in range(budget):
        s, path = 0, []
        while s >= 0:
            lo, hi = int(off[s]), int(off[s + 1])
            ns = sum(N.get(sa, 0) for sa in range(lo, hi))
            best, pick = -1e300, lo
            for sa in range(lo, hi):
                n = N.get(sa, 0)
                u = 1e300 if n == 0 else W[sa] / n + c * math.sqrt(math.log(ns) / n)
                if u > best:
                    best, pick = u, sa
            r = mean[pick] + scale[pick] * rng.gauss(0.0, 1.0)
            path.append((pick, r))
            o0, o1 = int(oo[pick]), int(oo[pick + 1])
            x, acc, k = rng.random(), 0.0, o1 - 1
            for i in range(o0, o1):
                acc += tree.prob[i]
                if x < acc:
                    k = i
                    break
            s = int(ch[k])
        G = 0.0
        for sa, r in reversed(path):
            G = r + G
            N[sa] = N.get(sa, 0) + 1
            W[sa] = W.get(sa, 0.0) + G
    lo, hi = int(off[0]), int(off[1])
    return max(range(lo, hi), key=lambda sa: W.get(sa, -1e300) / max(N.get(sa, 1), 1)) - lo


# The tree as an mctx environment (argv: tree.npz, simulations), shared by the two mctx scripts.
MCTX_SETUP = r"""
import json, sys, time
import numpy as np, jax, jax.numpy as jnp, mctx
d = np.load(sys.argv[1]); n_sims = int(sys.argv[2])
A = int(d["A"])
child = jnp.asarray(d["child"].reshape(-1, A))
reward = jnp.asarray(d["mean"].reshape(-1, A), jnp.float32)
def recurrent_fn(params, rng_key, action, embedding):
    nxt = child[embedding, action]
    term = nxt < 0
    return mctx.RecurrentFnOutput(reward=reward[embedding, action], discount=jnp.where(term, 0.0, 1.0),
        prior_logits=jnp.zeros((embedding.shape[0], A)), value=jnp.zeros(embedding.shape[0])), jnp.maximum(nxt, 0)
root = mctx.RootFnOutput(prior_logits=jnp.zeros((1, A)), value=jnp.zeros(1), embedding=jnp.zeros(1, jnp.int32))
"""

MCTX_SCRIPT = (
    MCTX_SETUP
    + r"""
reps = int(sys.argv[3])
out = {"jax": jax.__version__, "mctx": getattr(mctx, "__version__", "?")}
for name in ("muzero_policy", "gumbel_muzero_policy"):
    pol = getattr(mctx, name)
    f = jax.jit(lambda k: pol(params=(), rng_key=k, root=root, recurrent_fn=recurrent_fn, num_simulations=n_sims,
                              max_depth=int(d["depth"])).action)
    f(jax.random.PRNGKey(0)).block_until_ready()
    ts, cs = [], []
    for i in range(reps):
        t, c = time.perf_counter(), time.process_time()
        f(jax.random.PRNGKey(i + 1)).block_until_ready()
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
    out[name] = {"wall": n_sims / float(np.median(ts)), "cpu": n_sims / float(np.median(cs)),
                 "best": n_sims / float(np.min(ts))}
print(json.dumps(out))
"""
)


MCTX_SERVER = (
    MCTX_SETUP
    + r"""
fs = {}
for name in ("muzero_policy", "gumbel_muzero_policy"):
    pol = getattr(mctx, name)
    fs[name] = jax.jit(lambda k, pol=pol: pol(params=(), rng_key=k, root=root, recurrent_fn=recurrent_fn,
                                            num_simulations=n_sims, max_depth=int(d["depth"])).action)
    fs[name](jax.random.PRNGKey(0)).block_until_ready()
print("ready", flush=True)
for line in sys.stdin:
    name, k, s0 = line.split()
    ts = []
    for i in range(int(k)):
        t = time.perf_counter()
        fs[name](jax.random.PRNGKey(int(s0) + i)).block_until_ready()
        ts.append(time.perf_counter() - t)
    print(json.dumps(ts), flush=True)
"""
)


def paired_rounds(args, tree, prm, n: int) -> dict:
    """C++ vs mctx timed in alternating rounds (``--paired-rounds`` rounds of ``--paired-calls`` calls
    per side, one long-lived mctx process), so that a drift of the machine's speed hits both sides
    alike; returns, per pair, the per-round ratios of median call times (= ratio of sims/s)."""
    from icml26.ops import mcts as ops

    pairs = {"gumbel": "gumbel_muzero_policy", "uct": "muzero_policy"}
    ratios: dict = {a: [] for a in pairs}
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "tree.npz")
        np.savez(f, child=tree.child, mean=tree.mean, A=4, depth=tree.depth)
        pr = subprocess.Popen(
            [args.mctx_python, "-c", MCTX_SERVER, f, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            if pr.stdout.readline().strip() != "ready":
                return {}
            seeds = ops.run_seeds(1, args.paired_calls)
            for r in range(args.paired_rounds):
                for algo, name in pairs.items():
                    ts = []
                    for sd in seeds:
                        t0 = time.perf_counter()
                        ops.tree_search(tree, algo, [n], [sd], prm, use="ext")
                        ts.append(time.perf_counter() - t0)
                    pr.stdin.write(f"{name} {args.paired_calls} {1000 * r + 1}\n")
                    pr.stdin.flush()
                    tm = json.loads(pr.stdout.readline())
                    ratios[algo].append(float(np.median(tm)) / float(np.median(ts)))
        finally:
            pr.stdin.close()
            pr.wait(timeout=60)
    return ratios


def speed(args) -> dict:
    import torch

    from icml26.methods.exploration import mcts as M
    from icml26.methods.exploration import trees as T
    from icml26.ops import mcts as ops

    torch.set_num_threads(1)
    tree = T.generate(args.depth, 4, 1, noise_scale=1.0, noise_spread=0.5, seed=0, name="speed")
    prm = M.make_params(
        M.Config(value_norm=args.speed_value_norm), *tree.value_range, tree.reward_span, 10**9, shift=0.0
    )
    n = args.sims
    be = ops.backend()
    res = {"tree": f"depth {tree.depth}, 4 actions, {tree.n_nodes} nodes", "simulations": n, "kernel": be}
    res["value_norm"] = args.speed_value_norm
    print(
        f"\n== speed: {res['tree']}, {n} simulations per search, batch 1, 1 thread, value_norm {args.speed_value_norm} "
        "=="
    )
    print(f"  load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")

    def rate(fn, calls):  # simulations/s from the median wall and the median process-CPU time per call
        ts, cs = [], []
        for c in calls:
            t0, c0 = time.perf_counter(), time.process_time()
            fn(c)
            ts.append(time.perf_counter() - t0)
            cs.append(time.process_time() - c0)
        return {"wall": n / float(np.median(ts)), "cpu": n / float(np.median(cs)), "best": n / float(np.min(ts))}

    seeds = ops.run_seeds(0, args.reps)
    for algo in ("uct", "varde", "gumbel"):
        if be != "ref":  # batch 1: one search per call (as for mctx)
            ops.tree_search(tree, algo, [n], seeds[:1], prm, use="ext")
            res[f"C++ {algo}"] = rate(lambda sd: ops.tree_search(tree, algo, [n], [sd], prm, use="ext"), seeds)
        if algo != "gumbel":
            res[f"_ref {algo}"] = rate(lambda sd: ops.tree_search(tree, algo, [n], [sd], prm, use="ref"), seeds[:3])
    res["plain Python UCT"] = rate(lambda sd: plain_uct(tree, n, sd, prm.c * prm.span), range(3))
    if args.mctx_python:
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "tree.npz")
            np.savez(f, child=tree.child, mean=tree.mean, A=4, depth=tree.depth)
            pr = subprocess.run(
                [args.mctx_python, "-c", MCTX_SCRIPT, f, str(n), str(args.mctx_reps)],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if pr.returncode == 0:
                out = json.loads(pr.stdout.strip().splitlines()[-1])
                res["mctx_version"] = f"jax {out['jax']}, mctx {out['mctx']}"
                for k in ("muzero_policy", "gumbel_muzero_policy"):
                    res[f"mctx {k}"] = out[k]
            else:
                res["mctx_error"] = pr.stderr.strip().splitlines()[-1] if pr.stderr.strip() else "failed"
    paired = paired_rounds(args, tree, prm, n) if args.mctx_python and be != "ref" and args.paired_rounds > 0 else {}
    print(f"  load average at end: {os.getloadavg()[0]:.2f}")
    print(f"  {'implementation':28s} {'sims/s (wall)':>14s} {'sims/s (CPU)':>14s} {'best call':>14s}")
    for k, v in res.items():
        if isinstance(v, dict):
            print(f"  {k:28s} {v['wall']:14,.0f} {v['cpu']:14,.0f} {v['best']:14,.0f}")
    if "mctx_version" in res:
        print(f"  mctx: {res['mctx_version']} (CPU, jit-compiled)")
    elif "mctx_error" in res:
        print(f"  mctx: {res['mctx_error']}")

    def ratio(a, b):
        return (
            f"x{res[a]['wall'] / res[b]['wall']:.0f} wall, x{res[a]['cpu'] / res[b]['cpu']:.0f} CPU, "
            f"x{res[a]['best'] / res[b]['best']:.0f} best call"
        )

    if "C++ uct" in res:
        print(f"  C++ / _ref: uct {ratio('C++ uct', '_ref uct')}; varde {ratio('C++ varde', '_ref varde')}")
        print(f"  C++ uct / plain Python UCT: {ratio('C++ uct', 'plain Python UCT')}")
        if "mctx_version" in res:
            print(f"  C++ uct / mctx muzero_policy: {ratio('C++ uct', 'mctx muzero_policy')}")
            print(f"  C++ gumbel / mctx gumbel_muzero_policy: {ratio('C++ gumbel', 'mctx gumbel_muzero_policy')}")
            print(f"  C++ varde / mctx gumbel_muzero_policy: {ratio('C++ varde', 'mctx gumbel_muzero_policy')}")
    for algo, name in (("gumbel", "gumbel_muzero_policy"), ("uct", "muzero_policy")):
        if paired.get(algo):
            q = np.asarray(paired[algo])
            res[f"paired {algo}"] = {
                "median": float(np.median(q)),
                "min": float(q.min()),
                "max": float(q.max()),
                "rounds": q.tolist(),
            }
            print(
                f"  paired, interleaved ({len(q)} rounds x {args.paired_calls} calls per side): C++ {algo} / mctx "
                f"{name}: "
                f"median x{np.median(q):.0f} (rounds x{q.min():.0f} to x{q.max():.0f}; "
                f"{int((q >= 100).sum())}/{len(q)} rounds >= x100)"
            )
    return res


GYM_SPEED_ENVS = {
    "frozenlake8x8": ("FrozenLake-v1?map_name=8x8&is_slippery=true", 40),
    "taxi": ("Taxi-v4", 20),
    "rainy-taxi": ("Taxi-v4?is_rainy=true", 20),
    # MDP files (bpi's format) on the same table path: a Garnet instance with reward noise
    # (50 states, 4 actions, 5 successors) and RiverSwim (6 states), horizon 30
    "garnet50": ("mdp:garnet?states=50&actions=4&branching=5&seed=0", 30),
    "riverswim": ("mdp:riverswim", 30),
}


def gym_speed(args) -> None:
    """C++ table kernel vs the Python search on gymnasium transition tables, one thread, batch 1
    (one search of --gym-sims simulations per call from the env's root state, value_norm
    minmax, the command's default). Per (env, algo): the Python search once (seed 1), the C++
    kernel --gym-reps times right before and right after it (seeds 1.., median call), so a
    drift of the machine's speed hits both sides; the C++ root statistics for seed 1 are
    compared with the Python ones (bit for bit). Stored per (env, algo) in
    benchmarks/results/mcts_gym_speed.json (resumable; --print-only reprints)."""
    from icml26.core.output import atomic_write_text
    from icml26.methods.exploration import mcts as M
    from icml26.ops import mcts_table as T
    from icml26.ops._ref import mcts as R

    path = ROOT / "benchmarks" / "results" / "mcts_gym_speed.json"
    store = json.loads(path.read_text()) if path.is_file() else {}
    n = args.gym_sims
    for name in args.gym_envs.split(","):
        env_id, hz = GYM_SPEED_ENVS[name]
        cfg = M.Config(env=env_id, horizon=hz)
        kind, env = M.load_env(cfg)
        prm = M.search_params(cfg, kind, env)
        for algo in R.ALGOS:
            key = f"{name}/{algo}/{n}"
            if key in store or args.print_only:
                continue
            if not T.available():
                print("  the mcts_table kernel is unavailable: skipped")
                return
            tab = env.table()
            T.table_search(tab, env.s0, algo, [n], [0], prm)  # warm (the storage is then reused)
            cpp = []

            def c_calls(k0):
                for i in range(args.gym_reps):
                    t0 = time.perf_counter()
                    T.table_search(tab, env.s0, algo, [n], [k0 + i], prm)
                    cpp.append(time.perf_counter() - t0)

            load0 = os.getloadavg()[0]
            c_calls(1)
            t0 = time.perf_counter()
            a, st = R.search(env.model(1), R.ALGOS.index(algo), prm, 1, n)
            py = time.perf_counter() - t0
            c_calls(1)
            rec, vis, q = T.table_search(tab, env.s0, algo, [n], [1], prm)
            same = bool(rec[0, 0] == a and vis[0, 0].tolist() == st["visits"] and q[0, 0].tolist() == st["q"])
            store[key] = {
                "env": env_id,
                "horizon": hz,
                "algo": algo,
                "simulations": n,
                "cpp_sims_s": n / float(np.median(cpp)),
                "cpp_best_sims_s": n / float(np.min(cpp)),
                "python_sims_s": n / py,
                "identical": same,
                "load_avg": [load0, os.getloadavg()[0]],
            }
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(store, indent=1) + "\n")
            r = store[key]
            print(
                f"  {key}: C++ {r['cpp_sims_s']:,.0f}/s, Python {r['python_sims_s']:,.0f}/s, "
                f"x{r['cpp_sims_s'] / r['python_sims_s']:.0f}, "
                f"identical {same}",
                flush=True,
            )
    print(
        f"\n== gymnasium tables: C++ table kernel vs Python search, {n} simulations per search, batch 1, 1 thread, "
        f"value_norm minmax; target >= x100 =="
    )
    print(
        f"  {'env':34s} {'algo':20s} {'C++ sims/s':>12s} {'Python sims/s':>14s} {'ratio':>8s} {'bit for bit':>12s} "
        f"{'load':>10s}  target"
    )
    for name in args.gym_envs.split(","):
        for algo in R.ALGOS:
            r = store.get(f"{name}/{algo}/{n}")
            if r is None:
                continue
            x = r["cpp_sims_s"] / r["python_sims_s"]
            label = f"{r['env']} (h {r['horizon']})"
            print(
                f"  {label:34s} {algo:20s} {r['cpp_sims_s']:12,.0f} {r['python_sims_s']:14,.0f} {x:7.0f}x "
                f"{'yes' if r['identical'] else 'NO':>12s} {r['load_avg'][0]:4.1f}-{r['load_avg'][1]:4.1f}  "
                f"{'met' if x >= 100 else 'not met'}"
            )


ACCURACY_ENVS = {
    "noisy": ("recipes/mcts/envs/noisy.yaml", "tree", (100, 300, 1000, 3000), {}),
    "heavy": ("recipes/mcts/envs/heavy.yaml", "tree", (100, 300, 1000, 3000), {}),
    "frozenlake8x8": ("FrozenLake-v1?map_name=8x8&is_slippery=true", "gym", (100, 300), {"horizon": 40, "gamma": 0.95}),
    "taxi": ("Taxi-v4?is_rainy=true", "taxi", (100, 300, 1000), {"horizon": 20, "gamma": 0.95}),
}


def accuracy(args) -> list[dict]:
    from icml26.core.output import atomic_write_text
    from icml26.methods.exploration import mcts as M

    path = ROOT / "benchmarks" / "results" / f"mcts_accuracy_{args.value_norm}.json"
    store = json.loads(path.read_text()) if path.is_file() else {}
    rows = []
    for name in args.envs:
        env, kind, budgets, kw = ACCURACY_ENVS[name]
        seeds = {"tree": args.tree_seeds, "gym": args.gym_seeds, "taxi": args.taxi_seeds}[kind]
        key = f"{name}/{seeds}"
        if key not in store and not args.print_only:
            try:
                t0 = time.time()
                cfg = M.Config(env=env, simulations=budgets, seeds=seeds, value_norm=args.value_norm, **kw)
                recs = [r for r in M.run(cfg, seed=0) if r["kind"] == "result"]
            except Exception as e:  # noqa: BLE001  (gymnasium missing)
                print(f"\n{env}: skipped ({e})")
                continue
            store[key] = {"records": recs, "wall_s": time.time() - t0, "load_avg": os.getloadavg()[0]}
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(store, indent=1) + "\n")
        if key not in store:
            continue
        recs = store[key]["records"]
        print(
            f"\n== accuracy: {env}, {seeds} seeds, value_norm {args.value_norm}: P(optimal root action) [Wilson 95%] / "
            "simple regret =="
        )
        print(f"  {'algo':20s}" + "".join(f"{b:>26d}" for b in budgets))
        for algo in dict.fromkeys(r["algo"] for r in recs):
            cells = []
            for b in budgets:
                r = next(x for x in recs if x["algo"] == algo and x["simulations"] == b)
                cells.append(
                    f"{r['p_correct']:.3f} [{r['p_correct_ci'][0]:.2f},{r['p_correct_ci'][1]:.2f}] "
                    f"{r['simple_regret']:.3f}"
                )
            print(f"  {algo:20s}" + "".join(f"{c:>26s}" for c in cells))
        rows += recs
    return rows


EPISODE_ENVS = {
    "frozenlake8x8": ("FrozenLake-v1?map_name=8x8&is_slippery=true", {"horizon": 40, "gamma": 0.95}, 40),
    "taxi": ("Taxi-v4?is_rainy=true", {"horizon": 20, "gamma": 0.95}, 40),
}


def episodes(args) -> None:
    from icml26.core.output import atomic_write_text
    from icml26.methods.exploration import mcts as M
    from icml26.ops._ref.mcts import ALGOS

    path = ROOT / "benchmarks" / "results" / f"mcts_episodes_{args.value_norm}.json"
    store = json.loads(path.read_text()) if path.is_file() else {}
    budgets = tuple(int(b) for b in args.episode_budgets.split(","))
    algos = ALGOS if args.episode_algos == "all" else [a.strip() for a in args.episode_algos.split(",")]
    for name in args.episode_envs.split(","):
        env, kw, cap = EPISODE_ENVS[name]
        steps = args.episode_steps or cap
        for algo in algos:
            for reuse in (False, True):
                key = f"{name}/{algo}/reuse={reuse}/{args.episode_count}x{steps}/{','.join(map(str, budgets))}"
                if key in store or args.print_only:
                    continue
                t0 = time.time()
                cfg = M.Config(
                    env=env,
                    algo=algo,
                    simulations=budgets,
                    seeds=args.episode_root_seeds,
                    episodes=args.episode_count,
                    reuse_tree=reuse,
                    episode_steps=steps,
                    value_norm=args.value_norm,
                    **kw,
                )
                recs = [r for r in M.run(cfg, seed=0) if r["kind"] == "result"]
                store[key] = {"records": recs, "wall_s": time.time() - t0, "load_avg": os.getloadavg()[0]}
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, json.dumps(store, indent=1) + "\n")
                print(
                    f"  {key}: "
                    + ", ".join(f"n={r['simulations']} {r['episode_return']:.2f}" for r in recs)
                    + f" ({time.time() - t0:.0f} s)",
                    flush=True,
                )
        print(
            f"\n== episodes: {env}, {args.episode_count} episodes of at most {steps} moves, value_norm "
            f"{args.value_norm}: "
            f"mean return [t 95%], steps; root P(correct) over {args.episode_root_seeds} seeds =="
        )
        hdr = "".join(f"{f'n={b} ' + lab:>34s}" for b in budgets for lab in ("fresh", "reuse"))
        print(f"  {'algo':20s}{hdr}")
        for algo in algos:
            cells = []
            for b in budgets:
                for reuse in (False, True):
                    key = f"{name}/{algo}/reuse={reuse}/{args.episode_count}x{steps}/{','.join(map(str, budgets))}"
                    r = next((x for x in store.get(key, {}).get("records", []) if x["simulations"] == b), None)
                    cells.append(
                        "-"
                        if r is None
                        else f"{r['episode_return']:.2f} "
                        f"[{r['episode_return_ci'][0]:.1f},{r['episode_return_ci'][1]:.1f}] "
                        f"{r['episode_steps_mean']:.0f}"
                    )
            print(f"  {algo:20s}" + "".join(f"{c:>34s}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer seeds and repetitions")
    ap.add_argument(
        "--mctx-python",
        default=None,
        help="a Python interpreter with jax + mctx installed (default: the mctx peer venv of `make peers`)",
    )
    ap.add_argument("--no-mctx", action="store_true", help="time ours only")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--paired-rounds", type=int, default=10, help="rounds of C++ vs mctx timed alternately (0: skip)")
    ap.add_argument("--paired-calls", type=int, default=30, help="calls per side in each paired round")
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--print-only", action="store_true", help="reprint the stored accuracy tables, run nothing")
    ap.add_argument(
        "--value-norm",
        default="minmax",
        help="value normalisation of the accuracy runs (minmax | minmax-tree | oracle)",
    )
    ap.add_argument(
        "--envs", default="noisy,heavy,frozenlake8x8,taxi", help="comma list of " + ", ".join(ACCURACY_ENVS)
    )
    ap.add_argument("--taxi-seeds", type=int, default=20)
    ap.add_argument(
        "--episodes", action="store_true", help="run the episode benchmark (section 3) instead of speed and accuracy"
    )
    ap.add_argument("--episode-count", type=int, default=3)
    ap.add_argument("--episode-budgets", default="20,60")
    ap.add_argument("--episode-steps", type=int, default=None, help="moves per episode at most (default: 40)")
    ap.add_argument("--episode-root-seeds", type=int, default=3)
    ap.add_argument("--episode-envs", default="taxi,frozenlake8x8", help="comma list of " + ", ".join(EPISODE_ENVS))
    ap.add_argument("--episode-algos", default="all", help="all or a comma list of planners")
    ap.add_argument(
        "--gym-speed",
        action="store_true",
        help="run the gymnasium-table speed benchmark (C++ table kernel vs Python search) instead of speed and "
        "accuracy",
    )
    ap.add_argument(
        "--gym-envs", default="frozenlake8x8,taxi,rainy-taxi", help="comma list of " + ", ".join(GYM_SPEED_ENVS)
    )
    ap.add_argument("--gym-sims", type=int, default=2000)
    ap.add_argument("--gym-reps", type=int, default=5, help="C++ calls before and after the Python one")
    ap.add_argument(
        "--speed-value-norm",
        default="oracle",
        help="value normalisation of the speed runs (the docs' speed tables: oracle)",
    )
    args = ap.parse_args()
    args.envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    bad = [e for e in args.envs if e not in ACCURACY_ENVS]
    if bad:
        ap.error(f"unknown env {bad[0]!r}; valid: {', '.join(ACCURACY_ENVS)}")
    if args.no_mctx:
        args.mctx_python = None
    elif args.mctx_python is None:
        from icml26.core.peers import find_peer

        py = find_peer("mctx")
        args.mctx_python = str(py) if py else None
        if py is None:
            print("no mctx peer venv (`make peers`) and no --mctx-python: timing ours only", file=sys.stderr)
    args.reps = 5 if args.quick else 50
    args.mctx_reps = 5 if args.quick else 30
    args.tree_seeds = 200 if args.quick else 1000
    args.gym_seeds = 10 if args.quick else 50
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.episodes:
        episodes(args)
        return
    if args.gym_speed:
        gym_speed(args)
        return
    if args.print_only:
        args.skip_speed = True
    if not args.skip_speed:
        from icml26.core.output import atomic_write_text

        res = speed(args)
        res["load_avg_end"] = os.getloadavg()[0]
        res["utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        out = ROOT / "benchmarks" / "results" / f"mcts_speed_{args.speed_value_norm}.json"
        atomic_write_text(out, json.dumps(res, indent=1) + "\n")  # the last run's figures, reprinted in docs/mcts.md
    if not args.skip_accuracy:
        accuracy(args)


if __name__ == "__main__":
    main()
