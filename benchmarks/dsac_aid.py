"""Benchmarks of `icml26 dsac-aid` (issue 20), resumable in parts; results cached in
benchmarks/results/dsac_aid.json (rerun with --print-only to reprint the tables).

  speed    (1) updates/s of our SAC vs Stable-Baselines3's SAC at equal settings (Hopper-v5 sizes,
           256x256 ReLU, batch 256, one actor+critic+alpha+target update per step as SB3 does,
           1 and 2 threads), and 4 batched seeds vs 4 separate runs on the same 2 cores
           (DSAC-AID, MuJoCo defaults 3x256 GroupNorm).
  impulse  (2) the controlled impulse test: Pendulum-v1 with injected heteroscedastic reward
           noise, DSAC-T vs AID with beta = 0 vs full AID, 5 batched seeds
           (recipes/dsac-aid/impulse-pendulum.yaml), q_bias and return curves.
  mujoco   (3) Hopper-v5 / Walker2d-v5 at 100k steps, SAC / DSAC-T / DSAC-AID, 3 batched seeds
           (recipes/dsac-aid/{hopper,walker2d}-100k.yaml): each call continues the runs with
           --resume for at most --budget-s seconds, so they can be run in parts and sessions.

  OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/dsac_aid.py --part speed
  OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/dsac_aid.py --part impulse --budget-s 3000
  OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/dsac_aid.py --part mujoco --budget-s 3000

  sb3 / ours: (4) at the defaults, SB3's SAC (one seed per call) against ours (3 batched seeds per
  folder; --first-seed 3 adds seeds 3-5), InvertedPendulum-v5 15k steps, 10 episodes every 5k:
  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/dsac_aid.py --part sb3 --sb3-seed 3
  OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/dsac_aid.py --part ours --algo sac --first-seed 3
  .venv/bin/python benchmarks/dsac_aid.py --print-only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "dsac_aid.json"
RUNS = ROOT / "benchmarks" / "results" / "dsac_aid"
DOCS = ROOT / "docs"


def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}


def save(res: dict, *keys: str) -> None:
    """Write the results; with ``keys``, only those top-level entries are merged into the file as
    it is now (parts may run in separate processes at the same time)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if keys:
        cur = load()
        cur.update({k: res[k] for k in keys if k in res})
        res = cur
    tmp = RESULTS.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(res, indent=1, sort_keys=True))
    os.replace(tmp, RESULTS)


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------- (1) speed ----------------


def _random_batches(obs_dim, act_dim, seeds, n=4096):
    import torch

    from icml26.methods.rl.sac import ReplayBuffer

    g = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(seeds, n, obs_dim, act_dim)
    buf.add(
        observations=torch.randn(seeds, n, obs_dim, generator=g),
        actions=torch.rand(seeds, n, act_dim, generator=g) * 2 - 1,
        rewards=torch.randn(seeds, n, generator=g),
        next_observations=torch.randn(seeds, n, obs_dim, generator=g),
        terminals=(torch.rand(seeds, n, generator=g) < 0.01).float(),
        timeouts=torch.zeros(seeds, n),
    )
    return buf, g


def ours_updates_per_s(
    algo: str, seeds: int, n: int, threads: int, sb3_like: bool, cpu_time: bool = False, family: str = "mujoco"
) -> float:
    import torch

    from icml26.methods.rl import dsac_aid as m
    from icml26.methods.rl.sac import Learner, LearnerSpec

    torch.set_num_threads(threads)
    o, a = 11, 3  # Hopper-v5
    if sb3_like:  # SB3 SAC defaults: 256x256 ReLU, lr 3e-4, actor every step
        spec = LearnerSpec(
            algo=algo,
            obs_dim=o,
            act_dim=a,
            seeds=seeds,
            hidden=(256, 256),
            activation="relu",
            norm_groups=0,
            init="default",
            lr_q=3e-4,
            lr_pi=3e-4,
            lr_alpha=3e-4,
            delay_update=1,
        )
    else:
        cfg = m.resolve_family(m.Config(env="Hopper-v5", family=family, seeds=seeds))
        spec = m.learner_spec(cfg, algo, o, a)
    L = Learner(spec, generator=torch.Generator().manual_seed(0))
    buf, g = _random_batches(o, a, seeds)

    def step():
        b = buf.sample(256, g)
        L.update(b["observations"], b["actions"], b["rewards"], b["next_observations"], b["terminals"])

    for _ in range(10):
        step()
    clock = time.process_time if cpu_time else time.perf_counter  # CPU seconds: robust to other users' load
    t = clock()
    for _ in range(n):
        step()
    return n / (clock() - t)


def part_speed_defaults(res: dict, n: int, rounds: int = 2) -> None:
    """Our SAC at the sb3 family's defaults (one seed) vs SB3 2.9.2's ``SAC.train``, Hopper-v5
    sizes, 1 thread, CPU seconds (robust to other users' load), alternated in one process."""
    sp = res.setdefault("speed_defaults", {"ours": [], "sb3": []})
    for _ in range(rounds):
        sp["ours"].append(ours_updates_per_s("sac", 1, n, 1, False, cpu_time=True, family="sb3"))
        sp["sb3"].append(sb3_updates_per_s(n, 1, cpu_time=True)[0])
        sp.update(updates=n, load=load_avg())
        save(res, "speed_defaults")
        print(f"ours {sp['ours'][-1]:.1f} / SB3 {sp['sb3'][-1]:.1f} updates per CPU-s", flush=True)


def sb3_updates_per_s(n: int, threads: int, cpu_time: bool = False) -> tuple[float, str]:
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(threads)
    env = gym.make("Hopper-v5")
    model = SAC(
        "MlpPolicy",
        env,
        batch_size=256,
        learning_starts=2000,
        buffer_size=10_000,
        policy_kwargs=dict(net_arch=[256, 256]),
        device="cpu",
        seed=0,
        verbose=0,
    )
    model.learn(total_timesteps=2000)  # fills the buffer (no update before learning_starts)
    model.train(gradient_steps=10, batch_size=256)
    clock = time.process_time if cpu_time else time.perf_counter
    t = clock()
    model.train(gradient_steps=n, batch_size=256)
    return n / (clock() - t), stable_baselines3.__version__


def _group_norm_before(self, x, detach=False):
    """BatchedGroupNorm.forward as it was before the layer_norm form (torch's group_norm kernel,
    then the affine as a mul and an add): the 'before' implementation of the speed comparison."""
    import torch

    G, B, C = x.shape
    y = torch.nn.functional.group_norm(x.reshape(G * B, C), self.num_groups, eps=self.eps).view(G, B, C)
    w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
    return y * w + b


def cpu_rate(seeds: int, n: int, impl: str) -> float:
    """DSAC-AID seed-updates per CPU second of ``seeds`` batched seeds on 1 thread (MuJoCo family
    defaults, Hopper-v5 sizes). impl 'now': this code (layer_norm GroupNorm, fused Adam, allocator
    kept); 'before': the previous implementation (group_norm kernel, for-loop Adam, default malloc)."""
    from icml26.methods.rl import dsac_aid as m
    from icml26.methods.rl import nets

    if impl == "now":
        m.tune_allocator()
    else:
        nets.BatchedGroupNorm.forward = _group_norm_before
    import torch

    from icml26.methods.rl.sac import Learner

    torch.set_num_threads(1)
    cfg = m.resolve_family(m.Config(env="Hopper-v5", family="mujoco", seeds=seeds))
    L = Learner(
        m.learner_spec(cfg, "dsac-aid", 11, 3, fused_adam=impl == "now"), generator=torch.Generator().manual_seed(0)
    )
    buf, g = _random_batches(11, 3, seeds)

    def step():
        b = buf.sample(256, g)
        L.update(b["observations"], b["actions"], b["rewards"], b["next_observations"], b["terminals"])

    for _ in range(6):
        step()
    t = time.process_time()
    for _ in range(n):
        step()
    return seeds * n / (time.process_time() - t)


def worker(args) -> None:
    """One separate run (a subprocess of the batched-vs-separate tests): prints updates/s."""
    if args.impl:
        print(json.dumps({"ups": cpu_rate(args.seeds, args.n, args.impl)}))
        return
    ups = ours_updates_per_s("dsac-aid", 1, args.n, 1, False)
    print(json.dumps({"ups": ups}))


def part_seeds_cpu(res: dict, rounds: int = 2, cpu_s: float = 6.0) -> None:
    """Batched vs separate, per CPU second (1 thread; robust to other users' load): S = 1, 2, 4
    seeds, 'before' and 'now' implementations, each a fresh process, interleaved over rounds."""
    key = "seeds_cpu_v2"
    cur = res.setdefault("speed", {}).setdefault(key, {"rounds": [], "load": []})
    per_update_s = {1: 0.09, 2: 0.18, 4: 0.35}  # CPU seconds of one update (rough), to size n
    while len(cur["rounds"]) < rounds:
        row = {}
        for impl in ("before", "now"):
            for S in (1, 2, 4):
                n = max(8, int(cpu_s / per_update_s[S]))
                p = subprocess.run(
                    [sys.executable, __file__, "--worker", "--impl", impl, "--seeds", str(S), "--n", str(n)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                    check=True,
                )
                row[f"{impl}_S{S}"] = json.loads(p.stdout.strip().splitlines()[-1])["ups"]
                print(f"{impl} S={S}: {row[f'{impl}_S{S}']:.2f} seed-updates/CPU-s", flush=True)
        cur["rounds"].append(row)
        cur["load"].append(load_avg())
        save(res, "speed")


# op-name -> category of the per-update profile (torch.profiler self CPU time)
CATEGORIES = (
    ("matmul (bmm / baddbmm / mm)", ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm")),
    ("GroupNorm (layer_norm fwd + bwd)", ("aten::native_layer_norm", "aten::native_layer_norm_backward")),
    ("Adam + Polyak", ("aten::_fused_adam_", "aten::lerp_", "aten::_foreach_lerp_")),
    ("replay sampling (index)", ("aten::index",)),
)


def profile_update(seeds: int, n: int, hidden: tuple[int, ...] = (256, 256, 256)) -> dict:
    """CPU-ms per update of ``seeds`` batched DSAC-AID seeds (MuJoCo defaults, Hopper-v5 sizes, 1
    thread), unprofiled (process time over ``n`` updates), and its split by category from
    torch.profiler's self CPU times over ``n`` profiled updates (shares applied to the unprofiled
    time; 'elementwise and the rest' = every other aten op). The Python and dispatch cost is not
    separable this way (the profiler's per-op overhead exceeds it); ``part_profile`` measures the
    fixed per-update cost directly instead."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from icml26.methods.rl import dsac_aid as m
    from icml26.methods.rl.sac import Learner

    m.tune_allocator()
    torch.set_num_threads(1)
    # GroupNorm groups of 16 channels as the MuJoCo family's 16 groups of 256 (3x16: one group)
    cfg = m.resolve_family(
        m.Config(env="Hopper-v5", family="mujoco", seeds=seeds, hidden=hidden, norm_groups=hidden[0] // 16)
    )
    L = Learner(m.learner_spec(cfg, "dsac-aid", 11, 3), generator=torch.Generator().manual_seed(0))
    buf, g = _random_batches(11, 3, seeds)

    def step():
        b = buf.sample(256, g)
        L.update(b["observations"], b["actions"], b["rewards"], b["next_observations"], b["terminals"])

    for _ in range(4):
        step()
    t = time.process_time()
    for _ in range(n):
        step()
    ms = 1000 * (time.process_time() - t) / n
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
    self_ms = {e.key: e.self_cpu_time_total / 1000 for e in prof.key_averages()}
    aten = sum(v for k, v in self_ms.items() if k.startswith("aten::"))
    cats = {}
    for name, ops in CATEGORIES:
        cats[name] = sum(self_ms.get(o, 0.0) for o in ops)
    cats["elementwise and the rest (aten)"] = aten - sum(cats.values())
    tot = sum(cats.values())  # the profiler's own per-op cost lands in the ops' self times: shares only
    return {
        "seeds": seeds,
        "hidden": list(hidden),
        "cpu_ms_per_update": ms,
        "cpu_ms_by_category": {k: ms * v / tot for k, v in cats.items()},
        "calls_per_update": sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / n,
    }


def part_profile(res: dict, n: int = 6) -> None:
    """The profile of one update at 1 and 4 batched seeds (each in a fresh process, interleaved),
    and the fixed per-update cost measured directly: the same update with 3x16 networks, where
    the arithmetic is ~0.1% of the 3x256 update's (GroupNorm in groups of 16 channels as there),
    so its CPU time is the per-call cost (dispatch, allocation, Python) that batching shares."""
    out = {"runs": [], "load": load_avg()}
    for S, hidden in ((1, "256"), (4, "256"), (1, "16"), (4, "16")):
        p = subprocess.run(
            [sys.executable, __file__, "--worker-profile", "--seeds", str(S), "--n", str(n), "--hidden", hidden],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            check=True,
        )
        r = json.loads(p.stdout.strip().splitlines()[-1])
        out["runs"].append(r)
        print(f"S={S} hidden 3x{hidden}: {r['cpu_ms_per_update']:.1f} CPU-ms/update", flush=True)
        res.setdefault("speed", {})["profile"] = {**out, "load": out["load"] + " / " + load_avg()}
        save(res, "speed")


def report_profile(pr: dict) -> None:
    runs = {(r["seeds"], r["hidden"][0]): r for r in pr["runs"]}
    r1, r4 = runs.get((1, 256)), runs.get((4, 256))
    if not (r1 and r4):
        return
    print(f"\nProfile of one DSAC-AID update (MuJoCo defaults, 1 thread; load {pr['load']}): CPU-ms per update")
    print("| category | 1 seed | 4 seeds batched | 4 batched / 1 |")
    print("|---|---|---|---|")
    for k in r1["cpu_ms_by_category"]:
        if k == "Python and dispatch":  # older results: not separable (see profile_update)
            continue
        a, b = r1["cpu_ms_by_category"][k], r4["cpu_ms_by_category"][k]
        print(f"| {k} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    print(
        f"| total | {r1['cpu_ms_per_update']:.1f} | {r4['cpu_ms_per_update']:.1f} | "
        f"{r4['cpu_ms_per_update'] / r1['cpu_ms_per_update']:.2f}x |"
    )
    print(f"aten calls per update: {r1['calls_per_update']:.0f} (1 seed), {r4['calls_per_update']:.0f} (4 seeds)")
    t1, t4 = runs.get((1, 16)), runs.get((4, 16))
    if t1 and t4:
        a = t1["cpu_ms_per_update"]
        print(
            f"the same update with 3x16 networks (same kernel calls, ~0.1% of the arithmetic): {a:.1f} CPU-ms at 1 "
            "seed, "
            f"{t4['cpu_ms_per_update']:.1f} at 4 seeds: the per-call cost batching can share is at most {a:.1f} of "
            f"{r1['cpu_ms_per_update']:.1f} CPU-ms ({100 * a / r1['cpu_ms_per_update']:.0f}%); 1.5x needs a 4-seed "
            "update "
            f"<= {4 * r1['cpu_ms_per_update'] / 1.5:.1f} CPU-ms (measured {r4['cpu_ms_per_update']:.1f}: "
            f"{4 * r1['cpu_ms_per_update'] / r4['cpu_ms_per_update']:.2f}x)"
        )


def _cpu_ms(f, n: int = 10) -> float:
    f()
    t = time.process_time()
    for _ in range(n):
        f()
    return 1000 * (time.process_time() - t) / n


def part_kernels(res: dict, with_compile: bool = False) -> None:
    """Kernel choices for the batched layers, 1 thread, CPU-ms: (a) the (G, 256, 256) x (G, 256, 256)
    product as bmm, baddbmm, bmm into a preallocated output, a loop of G mm, bmm of a transposed
    view and numpy's matmul, in GFLOP/s, for G = 1, 4, 16 (1 seed's and 4 seeds' critic
    ensembles); (b) GroupNorm(16) of (16, 256, 256) + affine + ReLU forward and backward as
    layer_norm over 16-channel rows (this code), torch's group_norm, and batch_norm over rows;
    (c) with ``with_compile``: torch.compile (inductor) of the 3x256 GroupNorm critic ensemble of
    16 members, forward + backward, and its compile time (wall seconds, under the load given)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    out = {"load": load_avg(), "gflops": {}, "group_norm_block_ms": {}}
    for G in (1, 4, 16):
        a, b, c, o = (
            torch.randn(G, 256, 256),
            torch.randn(G, 256, 256),
            torch.randn(G, 1, 256),
            torch.empty(G, 256, 256),
        )
        fl = 2 * G * 256**3 / 1e6  # MFLOP
        ways = {
            "bmm": lambda: torch.bmm(a, b),
            "baddbmm": lambda: torch.baddbmm(c, a, b),
            "bmm out=": lambda: torch.bmm(a, b, out=o),
            "loop of mm": lambda: [torch.mm(a[i], b[i]) for i in range(G)],
            "bmm of a transposed view": lambda: torch.bmm(a.transpose(1, 2), b),
            "einsum": lambda: torch.einsum("gij,gjk->gik", a, b),
            "numpy matmul": lambda: np.matmul(a.numpy(), b.numpy()),
        }
        out["gflops"][str(G)] = {k: fl / _cpu_ms(f, 20) for k, f in ways.items()}
        print(f"G={G}: " + ", ".join(f"{k} {v:.1f}" for k, v in out["gflops"][str(G)].items()) + " GFLOP/s", flush=True)
    G, B, C, ng = 16, 256, 256, 16
    x = torch.randn(G, B, C, requires_grad=True)
    w, bb = torch.randn(G, 1, C, requires_grad=True), torch.randn(G, 1, C, requires_grad=True)
    gy = torch.randn(G, B, C)
    norms = {
        "layer_norm over 16-channel rows (this code)": lambda x: F.layer_norm(
            x.reshape(-1, C // ng), (C // ng,), eps=1e-5
        ).view(G, B, C),
        "torch group_norm": lambda x: F.group_norm(x.reshape(G * B, C), ng, eps=1e-5).view(G, B, C),
        "batch_norm over rows": lambda x: F.batch_norm(
            x.reshape(1, G * B * ng, C // ng), None, None, training=True, eps=1e-5
        ).view(G, B, C),
    }
    for k, f in norms.items():
        out["group_norm_block_ms"][k] = _cpu_ms(lambda f=f: torch.relu(torch.addcmul(bb, f(x), w)).backward(gy))
        print(f"GroupNorm block fwd+bwd, {k}: {out['group_norm_block_ms'][k]:.2f} CPU-ms", flush=True)
    if with_compile:
        from icml26.methods.rl.nets import BatchedMLP

        net = BatchedMLP(16, 14, (256, 256, 256), 2, norm_groups=16, init="orthogonal")
        xin = torch.randn(16, 256, 14)
        fb = lambda m: m(xin).sum().backward()  # noqa: E731
        eager = _cpu_ms(lambda: fb(net), 5)
        t = time.perf_counter()
        cnet = torch.compile(net, dynamic=False)
        fb(cnet)
        comp_s = time.perf_counter() - t
        out["compile"] = {
            "eager_ms": eager,
            "compiled_ms": _cpu_ms(lambda: fb(cnet), 5),
            "compile_wall_s": comp_s,
            "max_abs_diff": float((cnet(xin) - net(xin)).abs().max()),
        }
        print(
            f"critic ensemble (16 x 3x256 GroupNorm) fwd+bwd: eager {eager:.1f}, compiled "
            f"{out['compile']['compiled_ms']:.1f} CPU-ms, "
            f"compile {comp_s:.0f} s",
            flush=True,
        )
    out["load"] += " / " + load_avg()
    res.setdefault("speed", {})["kernels"] = out
    save(res, "speed")


def report_kernels(k: dict) -> None:
    print(f"\nKernels, 1 thread (load {k['load']}): GFLOP/s of (G, 256, 256) x (G, 256, 256)")
    ways = list(next(iter(k["gflops"].values())))
    print("| G | " + " | ".join(ways) + " |")
    print("|---|" + "---|" * len(ways))
    for G, r in k["gflops"].items():
        print(f"| {G} | " + " | ".join(f"{r[w]:.1f}" for w in ways) + " |")
    print(
        "GroupNorm(16) + affine + ReLU on (16, 256, 256), forward + backward: "
        + "; ".join(f"{n} {v:.1f} CPU-ms" for n, v in k["group_norm_block_ms"].items())
    )
    c = k.get("compile")
    if c:
        print(
            "torch.compile of the 16-member 3x256 GroupNorm critic ensemble, forward + backward: eager "
            f"{c['eager_ms']:.1f}, "
            f"compiled {c['compiled_ms']:.1f} CPU-ms ({c['eager_ms'] / c['compiled_ms']:.2f}x), compile "
            f"{c['compile_wall_s']:.0f} s wall, "
            f"max |diff| {c['max_abs_diff']:.1e}"
        )


def part_speed(res: dict, n: int) -> None:
    sp = res.setdefault("speed", {})
    for threads in (1, 2):
        key = f"sac_{threads}t"
        if key not in sp:
            ours = ours_updates_per_s("sac", 1, n, threads, True)
            sb3, ver = sb3_updates_per_s(n, threads)
            sp[key] = {
                "ours": ours,
                "sb3": sb3,
                "sb3_version": ver,
                "threads": threads,
                "updates": n,
                "load": load_avg(),
            }
            save(res, "speed")
            print(f"SAC {threads} thread(s): ours {ours:.1f} /s, SB3 {sb3:.1f} /s", flush=True)
    if "seeds4" not in sp:
        nb = max(20, n // 4)
        batched = ours_updates_per_s("dsac-aid", 4, nb, 2, False)  # one process, both cores
        t = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", "--n", str(nb)],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            for _ in range(4)
        ]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        wall = time.perf_counter() - t
        sep_each = [o["ups"] for o in outs]
        # separate runs: 4 * nb seed-updates in the wall time of all four (timed loops only: the
        # per-process ups give the seed-updates/s while all four run side by side)
        sp["seeds4"] = {
            "batched_seed_updates_per_s": 4 * batched,
            "separate_seed_updates_per_s": sum(sep_each),
            "separate_each": sep_each,
            "separate_wall_s": wall,
            "updates": nb,
            "load": load_avg(),
        }
        save(res, "speed")
    if "seeds4_cpu" not in sp:  # per CPU second, 1 thread each: what 2 dedicated cores would give
        nb = max(20, n // 4)
        b4 = ours_updates_per_s("dsac-aid", 4, nb, 1, False, cpu_time=True)
        s1 = ours_updates_per_s("dsac-aid", 1, 2 * nb, 1, False, cpu_time=True)
        sp["seeds4_cpu"] = {
            "batched_seed_updates_per_cpu_s": 4 * b4,
            "single_updates_per_cpu_s": s1,
            "updates": nb,
            "load": load_avg(),
        }
        save(res, "speed")


# ---------------- (2) impulse and (3) mujoco: CLI runs, resumable ----------------


def run_cli(recipe: str, out: Path, budget_s: float) -> str:
    """Continue (or start) the run in ``out`` for at most ``budget_s`` seconds; returns 'done' or
    'partial'."""
    args = [
        sys.executable,
        "-m",
        "icml26",
        "dsac-aid",
        "-r",
        str(ROOT / "recipes" / "dsac-aid" / recipe),
        "--out",
        str(out),
        "-q",
    ]
    if out.exists():
        args.append("--resume")
    try:
        p = subprocess.run(
            args,
            timeout=budget_s,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        return "partial"
    if p.returncode != 0:
        raise SystemExit(f"{recipe}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return "done"


def read_records(out: Path) -> list[dict]:
    f = out / "records.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []


def curves(recs: list[dict], key: str) -> dict[str, list[tuple[int, float]]]:
    import numpy as np

    out: dict[str, list] = {}
    for algo in dict.fromkeys(r["algo"] for r in recs if r["kind"] == "step"):
        rows = [r for r in recs if r["kind"] == "step" and r["algo"] == algo and r.get(key) is not None]
        xs = sorted({r["step"] for r in rows})
        out[algo] = [(x, float(np.mean([r[key] for r in rows if r["step"] == x]))) for x in xs]
    return out


def plot_curves(recs: list[dict], title: str, fname: str, vline: int | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, lab in (
        (axes[0], "eval_return", "evaluation return (seed mean)"),
        (axes[1], "q_bias", "Q bias, env units (seed mean)"),
    ):
        for algo, c in curves(recs, key).items():
            ax.plot([x for x, _ in c], [y for _, y in c], marker="o", ms=3, label=algo)
        if vline is not None:
            ax.axvline(vline, color="k", ls="--", lw=1, label="noise on")
        ax.set_xlabel("environment steps")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(DOCS / fname, dpi=110)
    plt.close(fig)


# name -> (recipe, run folder, results key, PNG or None, title): the first run (reward scale 1,
# 5k steps; kept for reference) and the planned rerun (reward scale 50, 20k steps)
IMPULSE = {
    "s3": (
        "impulse-pendulum.yaml",
        "impulse-s3",
        "impulse",
        "dsac_aid_impulse_s3.png",
        "Pendulum-v1, reward noise 3, reward scale 1, 5k steps",
    ),
    "rs50": (
        "impulse-pendulum-rs50.yaml",
        "impulse-rs50",
        "impulse_rs50",
        "dsac_aid_impulse_rs50.png",
        "Pendulum-v1, reward noise 3 (0.5 + mean a^2) N(0,1), reward scale 50: DSAC-T vs AID beta=0 vs AID",
    ),
    "onset": (
        "impulse-pendulum-onset.yaml",
        "impulse-onset",
        "impulse_onset",
        "dsac_aid_impulse.png",
        "Pendulum-v1, reward noise 5 (0.5 + mean a^2) N(0,1) from step 6000: DSAC-T vs AID beta=0 vs AID "
        "(the earlier losses: 640e85a's sigma loss, dsac-t as AID's loss with two critics)",
    ),
    "onset-resolved": (  # the same recipe under the resolved losses (1ea49ca sigma loss, dsact.py's DSAC-T)
        "impulse-pendulum-onset.yaml",
        "impulse-onset-resolved",
        "impulse_onset_resolved",
        "dsac_aid_impulse_resolved.png",
        "Pendulum-v1, reward noise 5 (0.5 + mean a^2) N(0,1) from step 6000: DSAC-T vs AID beta=0 vs AID "
        "(resolved losses: 1ea49ca's sigma loss, DSAC-T as dsact.py)",
    ),
}


PER_ALGO = {
    "rs50",
    "onset",
    "onset-resolved",
}  # variants run as one CLI run per algo in parallel (folder/<algo>): equal progress when stopped


def run_cli_parallel(recipe: str, out: Path, algos: list[str], budget_s: float) -> str:
    """One resumable CLI run per algo (``--set algo=[a]`` into ``out/a``), all at the same time,
    for at most ``budget_s`` seconds; 'done' when every one finished, else 'partial'."""
    procs, t0 = {}, time.perf_counter()
    for a in algos:
        d = out / a
        args = [
            sys.executable,
            "-m",
            "icml26",
            "dsac-aid",
            "-r",
            str(ROOT / "recipes" / "dsac-aid" / recipe),
            "--set",
            f"algo=[{a}]",
            "--out",
            str(d),
            "-q",
        ] + (["--resume"] if d.exists() else [])
        procs[a] = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    state = "done"
    for a, p in procs.items():
        try:
            err = p.communicate(timeout=max(1.0, budget_s - (time.perf_counter() - t0)))[1]
            if p.returncode != 0:
                raise SystemExit(f"{recipe} ({a}): exit {p.returncode}: {err.strip()[-500:]}")
        except subprocess.TimeoutExpired:
            p.terminate()
            p.communicate()
            state = "partial"
    return state


def recipe_config(recipe: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "recipes" / "dsac-aid" / recipe).read_text())["config"]


def recipe_algos(recipe: str) -> list[str]:
    return list(recipe_config(recipe)["algo"])


def summarise_onset(recs: list[dict], onset: int, pre_window: int = 0) -> dict:
    """The onset protocol's figures per algo, over the evaluations up to the last step every algo
    reached (equal progress): per seed, the level before the onset (mean q_bias of the
    evaluations at onset - pre_window <= step <= onset; default: the evaluation at the onset
    step alone, the latest before the noise: the critics are still converging, so an earlier
    window would count their fall as a negative surge), the peak q_bias after it (step > onset),
    the surge = peak - level, and the mean return over the evaluations after the onset and at the
    common last step; each as the mean over seeds with its 95% percentile-bootstrap interval
    (icml26.core.stats.bootstrap_mean_ci). Also the peak of the seed-mean q_bias curve after the
    onset (the issue's 'peak q_bias')."""
    import numpy as np

    from icml26.core.stats import bootstrap_mean_ci

    steps = [r for r in recs if r["kind"] == "step"]
    algos = list(dict.fromkeys(r["algo"] for r in steps))
    common = min((max(r["step"] for r in steps if r["algo"] == a) for a in algos), default=0)
    out = {"onset": onset, "common_step": common, "algos": {}}
    for a in algos:
        rows = [r for r in steps if r["algo"] == a and r["step"] <= common]
        seeds = sorted({r["seed"] for r in rows})
        per = {k: [] for k in ("level", "peak", "surge", "return_after", "return_final")}
        for sd in seeds:
            rs = sorted((r for r in rows if r["seed"] == sd), key=lambda r: r["step"])
            pre = [r["q_bias"] for r in rs if onset - pre_window <= r["step"] <= onset]
            post = [r for r in rs if r["step"] > onset]
            if not pre or not post:
                continue
            per["level"].append(float(np.mean(pre)))
            per["peak"].append(max(r["q_bias"] for r in post))
            per["surge"].append(per["peak"][-1] - per["level"][-1])
            per["return_after"].append(float(np.mean([r["eval_return"] for r in post])))
            per["return_final"].append(rs[-1]["eval_return"])
        if not per["peak"]:
            out["algos"][a] = {"seeds": len(seeds), "post_onset_evals": 0}
            continue
        mean_curve = {}
        for r in rows:
            if r["step"] > onset:
                mean_curve.setdefault(r["step"], []).append(r["q_bias"])
        o = {
            "seeds": len(per["peak"]),
            "post_onset_evals": len(mean_curve),
            "peak_of_mean_curve": max(float(np.mean(v)) for v in mean_curve.values()),
        }
        for k, v in per.items():
            o[k] = float(np.mean(v))
            o[k + "_ci"] = list(bootstrap_mean_ci(np.asarray(v)))
            o[k + "_seeds"] = v
        out["algos"][a] = o
    return out


def part_impulse(res: dict, budget_s: float, variant: str = "rs50") -> None:
    """Continue the controlled impulse test for at most ``budget_s`` seconds (0: run nothing,
    summarise what the run folders hold), then summarise and plot it."""
    recipe, folder, key, png, title = IMPULSE[variant]
    out = RUNS / folder
    per_algo = variant in PER_ALGO
    algos = recipe_algos(recipe)
    state = res.get(key, {}).get("state", "partial")
    if state != "done" and budget_s > 0:
        state = run_cli_parallel(recipe, out, algos, budget_s) if per_algo else run_cli(recipe, out, budget_s)
    recs = [r for a in algos for r in read_records(out / a)] if per_algo else read_records(out)
    if per_algo and all(any(r["kind"] == "result" for r in read_records(out / a)) for a in algos):
        state = "done"  # every method's run finished (in this call or an earlier one)
    res[key] = summarise_impulse(recs, state)
    onset = recipe_config(recipe).get("reward_noise_from")
    if onset is not None:
        res[key]["onset"] = summarise_onset(recs, int(onset))
    res[key]["recipe"] = f"recipes/dsac-aid/{recipe}"
    save(res, key)
    if recs and png:
        plot_curves(recs, title, png, vline=onset)


def summarise_impulse(recs: list[dict], state: str, skip_steps: int = 2000) -> dict:
    """Per algo, over the evaluations at skip_steps <= step <= the last step every algo reached
    (runs stopped part-way compare at equal progress; before skip_steps = 1000 updates the
    untrained critic's offset is not an impulse): the peak and the mean |.| of the seed-mean
    q_bias, the q_bias and the return at that common last step (seed means, and per seed)."""
    import numpy as np

    qb, ret = curves(recs, "q_bias"), curves(recs, "eval_return")
    common = min((c[-1][0] for c in ret.values()), default=0)
    out = {"state": state, "common_step": common, "algos": {}}
    for algo in qb:
        late = [y for x, y in qb[algo] if skip_steps <= x <= common]
        rows = [r for r in recs if r["kind"] == "step" and r["algo"] == algo]
        at = [r for r in rows if r["step"] == common]
        out["algos"][algo] = {
            "peak_q_bias": max(late) if late else None,
            "steps": max(r["step"] for r in rows),
            "final_return": float(np.mean([r["eval_return"] for r in at])) if at else None,
            "final_return_seeds": [r["eval_return"] for r in at],
            "final_q_bias": float(np.mean([r["q_bias"] for r in at])) if at else None,
            "mean_abs_q_bias": float(np.mean([abs(y) for y in late])) if late else None,
        }
    return out


def part_mujoco(res: dict, budget_s: float) -> None:
    mj = res.setdefault("mujoco", {})
    t0 = time.perf_counter()
    for env, recipe in (("Hopper-v5", "hopper-100k.yaml"), ("Walker2d-v5", "walker2d-100k.yaml")):
        left = budget_s - (time.perf_counter() - t0)
        out = RUNS / env
        state = mj.get(env, {}).get("state")
        if left > 60 and state != "done":
            state = run_cli(recipe, out, left)
        recs = read_records(out)
        ret = curves(recs, "eval_return")
        mj[env] = {
            "state": state or "not started",
            "algos": {a: {"steps": c[-1][0], "return": c[-1][1], "curve": c} for a, c in ret.items()},
            "results": [r for r in recs if r["kind"] == "result"],
        }
        save(res, "mujoco")
        if recs:
            plot_curves(
                recs,
                f"{env}: SAC / DSAC-T / DSAC-AID, 3 seeds (official MuJoCo defaults)",
                f"dsac_aid_{env.split('-')[0].lower()}.png",
            )


# ---------------- (4) defaults: side by side with SB3 ----------------

DEFAULTS = ROOT / "benchmarks" / "results" / "dsac_aid_defaults"
DEFAULT_TASKS = {"InvertedPendulum-v5": 15_000, "Hopper-v5": 50_000}
EVAL_EVERY, EVAL_EPISODES, SEEDS = 5_000, 10, 3


def sb3_run(env_id: str, steps: int, seed: int) -> dict:
    """Stable-Baselines3 ``SAC("MlpPolicy", env)`` at its defaults (learning_starts 100, one
    update per step, batch 256, lr 3e-4, 2x256 ReLU, auto entropy), evaluated every
    ``EVAL_EVERY`` steps on ``EVAL_EPISODES`` deterministic episodes of a separate env; updates/s
    = gradient steps / seconds spent in ``model.train``."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    model = SAC("MlpPolicy", gym.make(env_id), seed=seed, device="cpu", verbose=0)
    timing = {"s": 0.0, "n": 0}
    inner = model.train

    def timed_train(gradient_steps: int, batch_size: int = 64) -> None:
        t = time.perf_counter()
        inner(gradient_steps=gradient_steps, batch_size=batch_size)
        timing["s"] += time.perf_counter() - t
        timing["n"] += gradient_steps

    model.train = timed_train
    ev_env = gym.make(env_id)
    evals: list[dict] = []

    def evaluate(step: int) -> None:
        rets = []
        for e in range(EVAL_EPISODES):
            obs, _ = ev_env.reset(seed=10_000 * (seed + 1) + e)
            done, ret = False, 0.0
            while not done:
                a, _ = model.predict(obs, deterministic=True)
                obs, r, term, trunc, _ = ev_env.step(a)
                ret += float(r)
                done = term or trunc
            rets.append(ret)
        evals.append(
            {
                "step": step,
                "eval_return": float(np.mean(rets)),
                "updates": timing["n"],
                "updates_per_s": timing["n"] / timing["s"] if timing["s"] else None,
            }
        )

    class Cb(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                evaluate(self.num_timesteps)
            return True

    t0 = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Cb())
    return {
        "impl": f"sb3 {stable_baselines3.__version__}",
        "env": env_id,
        "seed": seed,
        "steps": steps,
        "evals": evals,
        "updates": timing["n"],
        "update_s": timing["s"],
        "updates_per_s": timing["n"] / timing["s"],
        "wall_s": time.perf_counter() - t0,
        "load": load_avg(),
    }


def part_sb3(env_id: str, seeds: list[int] | None = None) -> None:
    """SB3's seeds on ``env_id`` (each a JSON file; a finished seed is skipped; ``seeds``: only
    those, e.g. one per process)."""
    steps = DEFAULT_TASKS[env_id]
    for seed in seeds if seeds is not None else range(SEEDS):
        f = DEFAULTS / env_id / f"sb3-seed{seed}.json"
        if f.is_file():
            continue
        r = sb3_run(env_id, steps, seed)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(r, indent=1))
        print(f"sb3 {env_id} seed {seed}: {r['evals'][-1]['eval_return']:.1f} ({r['updates_per_s']:.1f} updates/s)")


def ours_cmd(env_id: str, algo: str, out: Path, first_seed: int = 0) -> list[str]:
    """The command of our run of ``algo`` at the defaults (3 batched seeds from ``first_seed``,
    evaluations every 5k)."""
    args = [sys.executable, "-m", "icml26", "dsac-aid", "--env", env_id, "--algo", algo, "--seed", str(first_seed)]
    args += ["--steps", str(DEFAULT_TASKS[env_id]), "--seeds", str(SEEDS), "--out", str(out)]
    args += ["--set", f"eval_interval={EVAL_EVERY}", "--set", f"eval_episodes={EVAL_EPISODES}"]
    return args + ["--set", "checkpoint_interval=1000", "-q"]  # small parts: resumable on a loaded machine


def ours_dir(env_id: str, algo: str, first_seed: int = 0) -> Path:
    """The run folder of ``algo``'s 3 batched seeds from ``first_seed`` (seeds 0-2: ``<algo>``)."""
    return DEFAULTS / env_id / (algo if first_seed == 0 else f"{algo}-seed{first_seed}")


def part_ours(
    env_id: str, budget_s: float, algos: tuple[str, ...] = ("sac", "dsac-t", "dsac-aid"), first_seed: int = 0
) -> None:
    """Our algorithms on ``env_id`` at the defaults (seeds first_seed .. first_seed + 2), one
    process each at the same time, continued with --resume for at most ``budget_s`` seconds."""
    procs = []
    for algo in algos:
        out = ours_dir(env_id, algo, first_seed)
        if any(r["kind"] == "result" for r in read_records(out)):
            continue
        args = ours_cmd(env_id, algo, out, first_seed) + (["--resume"] if out.exists() else [])
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs.append(
            (algo, subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
        )
    t0 = time.perf_counter()
    for algo, p in procs:
        try:
            _, err = p.communicate(timeout=max(1.0, budget_s - (time.perf_counter() - t0)))
            print(f"{env_id} {algo}: exit {p.returncode} {err.strip()[-300:] if p.returncode else ''}")
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait()
            print(f"{env_id} {algo}: partial (resume with another call)")


# run folder -> algo: the current learner's folders, then runs of earlier versions kept for reference
OURS_FOLDERS = {
    "sac": "sac",
    "dsac-t": "dsac-t",
    "dsac-aid": "dsac-aid",
    "sac-logstd0.5": "sac",
    "sac-logstd2-exact-jacobian": "sac",
    "dsac-t-exact-jacobian": "dsac-t",
    "dsac-aid-exact-jacobian": "dsac-aid",
}


def version_label(head: dict, algo: str) -> str:
    """What a run's config record says about the learner version, where it differs from today's
    defaults: the log-density's Jacobian (recorded as tanh_epsilon since it existed; before, the
    exact form), SAC's log std bound and update order (recorded since they existed; before,
    0.5 and GOPS's simultaneous order)."""
    notes = []
    eff = (head.get("effective") or {}).get(algo, {})
    if algo == "sac" and "log_std_max" not in eff:
        notes.append("log std <= 0.5, simultaneous update")
    elif algo == "sac" and eff.get("update_order") != "sequential":
        notes.append(f"update {eff.get('update_order')}")
    if "tanh_epsilon" not in head:
        notes.append("exact tanh Jacobian")
    return f" ({', '.join(notes)}: earlier version)" if notes else ""


def defaults_rows(env_id: str) -> list[dict]:
    """Per implementation: final return (mean, Student-t 95% interval over the seeds), the curve
    (step -> seed mean), updates/s, seeds and steps reached; from the run folders and SB3 files."""
    import numpy as np

    from icml26.core.verdict import seed_interval

    rows = []
    sb3 = [json.loads(f.read_text()) for f in sorted((DEFAULTS / env_id).glob("sb3-seed*.json"))]
    if sb3:
        steps = sorted({e["step"] for r in sb3 for e in r["evals"]})
        curve = [
            (x, float(np.mean([e["eval_return"] for r in sb3 for e in r["evals"] if e["step"] == x]))) for x in steps
        ]
        final = [r["evals"][-1]["eval_return"] for r in sb3]
        rows.append(
            {
                "impl": f"SB3 {sb3[0]['impl'].split()[-1]} SAC",
                "seeds": len(sb3),
                "steps": min(r["evals"][-1]["step"] for r in sb3),
                "final": float(np.mean(final)),
                "ci": seed_interval(final),
                "per_seed": final,
                "curve": curve,
                "updates_per_s": float(np.mean([r["updates_per_s"] for r in sb3])),
                "seed_updates_per_s": float(np.mean([r["updates_per_s"] for r in sb3])),
            }
        )
    for name in OURS_FOLDERS:
        # seeds 0-2 in <name>/, later batches of 3 in <name>-seed<k>/; a batch that has not reached
        # the task's steps yet adds to the curve, not to the final returns. The folders other than
        # <algo>/ hold runs of earlier versions of the learner, kept for reference
        algo = OURS_FOLDERS[name]
        found = [DEFAULTS / env_id / name, *sorted((DEFAULTS / env_id).glob(f"{name}-seed*"))]
        by_label: dict[str, list[Path]] = {}  # folders of different learner versions are never pooled
        for f in found:
            head = (read_records(f) or [{}])[0]
            by_label.setdefault(version_label(head, algo), []).append(f)
        for label, folders in by_label.items():
            rows += _ours_row(algo, label, folders)
    return rows


def _ours_row(algo: str, label: str, folders: list[Path]) -> list[dict]:
    """One table row from the run folders of one learner version (empty when none has an evaluation)."""
    import numpy as np

    from icml26.core.verdict import seed_interval

    recs = [r for f in folders for r in read_records(f)]
    steps = [r for r in recs if r["kind"] == "step"]
    if not steps:
        return []
    last = max(r["step"] for r in steps)
    final = [r["eval_return"] for r in steps if r["step"] == last]
    res = [r for r in recs if r["kind"] == "result"]
    ups = [r["updates_per_s"] for r in steps if r.get("updates_per_s") == r.get("updates_per_s")]
    done = [r["updates_per_s"] for r in res if r.get("updates_per_s")]
    u = float(np.mean(done)) if done else (float(np.mean(ups)) if ups else None)
    per_batch = len(final) / max(len(res), 1) if res else len(final)
    return [
        {
            "impl": f"ours {algo}" + label,
            "seeds": len(final),
            "steps": last,
            "final": float(np.mean(final)),
            "ci": seed_interval(final),
            "per_seed": final,
            "curve": curves(recs, "eval_return").get(algo, []),
            "updates_per_s": u,  # batched: one update trains every seed of a batch
            "seed_updates_per_s": u * per_batch if u else None,
            "done": len(res) == len([f for f in folders if f.is_dir()]),
        }
    ]


def report_defaults(env_id: str) -> None:
    rows = defaults_rows(env_id)
    if not rows:
        return
    print(f"\n(4) {env_id} at the defaults, {EVAL_EPISODES} deterministic episodes every {EVAL_EVERY} steps")
    print(
        "| implementation | seeds | steps | final return [95% CI] | per seed | curve (seed mean) "
        "| updates/s | seed-updates/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ci = f"[{r['ci'][0]:.1f}, {r['ci'][1]:.1f}]" if r["ci"] else "-"
        cur = ", ".join(f"{x // 1000}k: {y:.0f}" for x, y in r["curve"])
        u = f"{r['updates_per_s']:.1f}" if r["updates_per_s"] else "-"
        su = f"{r['seed_updates_per_s']:.1f}" if r["seed_updates_per_s"] else "-"
        print(
            f"| {r['impl']} | {r['seeds']} | {r['steps']} | {r['final']:.1f} {ci} | "
            f"{', '.join(f'{v:.0f}' for v in r['per_seed'])} | {cur} | {u} | {su} |"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in rows:
        ax.plot([x for x, _ in r["curve"]], [y for _, y in r["curve"]], marker="o", label=r["impl"])
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"evaluation return (mean of {rows[0]['seeds']} seeds)")
    ax.set_title(f"{env_id}: defaults, SB3 SAC vs ours")
    ax.legend()
    fig.tight_layout()
    fig.savefig(DOCS / f"dsac_aid_defaults_{env_id.split('-')[0].lower()}.png", dpi=110)
    plt.close(fig)


# ---------------- tables ----------------


def report(res: dict) -> None:
    print(f"# icml26 dsac-aid benchmarks (load now: {load_avg()})")
    sp = res.get("speed", {})
    if sp:
        print("\n(1) updates per second (learner only; Hopper-v5 sizes, batch 256)")
        print("| setting | ours | peer | ratio | target | met | load |")
        print("|---|---|---|---|---|---|---|")
        for t in (1, 2):
            r = sp.get(f"sac_{t}t")
            if r:
                ratio = r["ours"] / r["sb3"]
                print(
                    f"| SAC 256x256, {t} thread(s) | {r['ours']:.1f} | SB3 {r['sb3_version']}: {r['sb3']:.1f} | "
                    f"{ratio:.2f}x | >= 1.0x | "
                    f"{'met' if ratio >= 1.0 else 'NOT met'} | {r['load']} |"
                )
        r = sp.get("seeds4")
        if r:
            ratio = r["batched_seed_updates_per_s"] / r["separate_seed_updates_per_s"]
            print(
                "| DSAC-AID 4 seeds: batched (1 process, 2 threads) vs 4 processes x 1 thread | "
                f"{r['batched_seed_updates_per_s']:.1f} "
                f"seed-updates/s | {r['separate_seed_updates_per_s']:.1f} seed-updates/s | {ratio:.2f}x | >= 1.5x | "
                f"{'met' if ratio >= 1.5 else 'NOT met'} | {r['load']} |"
            )
        r = sp.get("seeds4_cpu")
        if r:
            ratio = r["batched_seed_updates_per_cpu_s"] / r["single_updates_per_cpu_s"]
            print(
                "| DSAC-AID 4 seeds per CPU second (1 thread): batched vs one seed alone | "
                f"{r['batched_seed_updates_per_cpu_s']:.2f} "
                f"seed-updates/CPU-s | {r['single_updates_per_cpu_s']:.2f} updates/CPU-s | {ratio:.2f}x | >= 1.5x | "
                f"{'met' if ratio >= 1.5 else 'NOT met'} | {r['load']} |"
            )
    if sp and sp.get("profile"):
        report_profile(sp["profile"])
    if sp and sp.get("kernels"):
        report_kernels(sp["kernels"])
    v2 = sp.get("seeds_cpu_v2") if sp else None
    if v2 and v2["rounds"]:
        report_seeds_cpu(v2)
    for name, (_, _, key, _, title) in IMPULSE.items():
        im = res.get(key)
        if im:
            report_impulse(im, f"{title}; 5 seeds; {im.get('recipe', 'recipes/dsac-aid/' + IMPULSE[name][0])}")
    mj = res.get("mujoco")
    if mj:
        print("\n(3) MuJoCo, 3 batched seeds, official MuJoCo defaults (20 env steps per update)")
        print(
            "final = mean of the last evaluation (10 deterministic episodes a seed), max avg = best evaluation of the "
            "seed mean; "
            "[95% t-interval over seeds]; q_bias at the last evaluation, env units (seed mean)"
        )
        print("| env | algo | steps reached | final return | max avg return | q_bias | wall s | state |")
        print("|---|---|---|---|---|---|---|---|")
        for env, r in mj.items():
            res_by = {x["algo"]: x for x in r.get("results", [])}
            bias = {a: c[-1][1] for a, c in curves(read_records(RUNS / env), "q_bias").items()}
            for a, x in r["algos"].items():
                q = f"{bias[a]:.1f}" if a in bias else "-"
                if a in res_by:
                    y = res_by[a]
                    ci = lambda k: f"{y[k]:.1f} [{y[k + '_ci'][0]:.1f}, {y[k + '_ci'][1]:.1f}]"
                    print(
                        f"| {env} | {a} | {x['steps']} | {ci('final_return')} | {ci('max_avg_return')} | {q} | "
                        f"{y['wall_s']:.0f} | done |"
                    )
                else:
                    print(
                        f"| {env} | {a} | {x['steps']} | {x['return']:.1f} (last evaluation) | - | {q} | - | "
                        f"{r['state']} |"
                    )
        wins = []
        for env, r in mj.items():
            A = r["algos"]
            if "dsac-aid" in A and "dsac-t" in A and A["dsac-aid"]["steps"] == A["dsac-t"]["steps"] == 100_000:
                wins.append(A["dsac-aid"]["return"] >= A["dsac-t"]["return"])
        print(
            "target: DSAC-AID >= DSAC-T at 100k on one of the two tasks: "
            + ("met" if any(wins) else "NOT met" if len(wins) == 2 else "not reached (runs unfinished)")
        )


def seeds_cpu_summary(v2: dict) -> dict:
    """Medians over rounds of seed-updates per CPU second; the batched-vs-separate ratio per
    implementation; the least-squares fit of CPU-ms per update t(S) = a + b S (a: the per-update
    cost that batching shares, b: the per-seed cost it cannot)."""
    import numpy as np

    out = {}
    for impl in ("before", "now"):
        r = {S: float(np.median([row[f"{impl}_S{S}"] for row in v2["rounds"]])) for S in (1, 2, 4)}
        Ss = np.array([1.0, 2.0, 4.0])
        t = np.array([1000 * S / r[int(S)] for S in Ss])  # CPU-ms per update of S seeds
        b, a = np.polyfit(Ss, t, 1)
        out[impl] = {
            "rate": r,
            "ratio4": r[4] / r[1],
            "a_ms": float(a),
            "b_ms": float(b),
            "bound4": float((a + b) / (a / 4 + b)),
        }
    out["speedup_S4"] = out["now"]["rate"][4] / out["before"]["rate"][4]
    out["speedup_S1"] = out["now"]["rate"][1] / out["before"]["rate"][1]
    return out


def report_seeds_cpu(v2: dict) -> None:
    sm = seeds_cpu_summary(v2)
    print(
        "\nDSAC-AID batched seeds per CPU second (1 thread, each figure a fresh process, median of "
        f"{len(v2['rounds'])} rounds; load {', '.join(v2['load'])})"
    )
    print(
        "| implementation | 1 seed | 2 seeds batched | 4 seeds batched | 4 batched vs 4 separate | fit a + b S "
        "(CPU-ms/update) | target >= 1.5x |"
    )
    print("|---|---|---|---|---|---|---|")
    for impl in ("before", "now"):
        x = sm[impl]
        print(
            f"| {impl} | {x['rate'][1]:.2f} | {x['rate'][2]:.2f} | {x['rate'][4]:.2f} | {x['ratio4']:.2f}x | "
            f"{x['a_ms']:.1f} + {x['b_ms']:.1f} S | "
            f"{'met' if x['ratio4'] >= 1.5 else 'NOT met'} |"
        )
    print(f"now vs before: {sm['speedup_S4']:.2f}x at 4 seeds, {sm['speedup_S1']:.2f}x at 1 seed")


def report_onset(on: dict) -> None:
    print(
        f"\nonset protocol: noise from step {on['onset']}; compared up to step {on['common_step']} (5-seed means, [95% "
        "bootstrap interval])"
    )
    print(
        "| algo | q_bias before onset | peak q_bias after | surge (peak - before) | peak of the seed-mean curve | "
        "return after onset (mean of evals) | return at common step |"
    )
    print("|---|---|---|---|---|---|---|")
    f = lambda o, k: f"{o[k]:.1f} [{o[k + '_ci'][0]:.1f}, {o[k + '_ci'][1]:.1f}]"  # noqa: E731
    A = on["algos"]
    for a, o in A.items():
        if "peak" not in o:
            print(f"| {a} | - | - | - | - | - | (no evaluation after the onset yet) |")
            continue
        print(
            f"| {a} | {f(o, 'level')} | {f(o, 'peak')} | {f(o, 'surge')} | {o['peak_of_mean_curve']:.1f} | "
            f"{f(o, 'return_after')} | {f(o, 'return_final')} |"
        )
    if all(k in A and "peak" in A[k] for k in ("dsac-aid", "dsac-t", "dsac-aid-epi")):
        damp = A["dsac-aid"]["peak_of_mean_curve"] < min(
            A["dsac-t"]["peak_of_mean_curve"], A["dsac-aid-epi"]["peak_of_mean_curve"]
        )
        keep = A["dsac-aid"]["return_final"] >= A["dsac-t"]["return_final"]
        print(
            f"target: AID's peak q_bias after the onset below DSAC-T's and beta=0's: {'met' if damp else 'NOT met'}; "
            f"AID's return >= DSAC-T's (at the common step): {'met' if keep else 'NOT met'}; DSAC-T surge above its "
            "level: "
            f"{'yes' if A['dsac-t']['surge_ci'][0] > 0 else 'not shown (interval includes 0 or below)'}"
        )


def report_impulse(im: dict, title: str) -> None:
    c = im.get("common_step")
    print(f"\n(2) controlled impulse test: {title} ({im['state']}; compared up to step {c})")
    print(
        "| algo | steps reached | peak q_bias (2000 <= step <= common) | mean abs q_bias | q_bias at common step | "
        "return at common step |"
    )
    print("|---|---|---|---|---|---|")
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for a, r in im["algos"].items():
        print(
            f"| {a} | {r['steps']} | {f(r['peak_q_bias'])} | {f(r['mean_abs_q_bias'])} | {f(r.get('final_q_bias'))} | "
            f"{f(r['final_return'])} |"
        )
    A = im["algos"]
    if not im.get("onset") and all(
        k in A and A[k]["peak_q_bias"] is not None for k in ("dsac-aid", "dsac-t", "dsac-aid-epi")
    ):
        damp = A["dsac-aid"]["peak_q_bias"] < min(A["dsac-t"]["peak_q_bias"], A["dsac-aid-epi"]["peak_q_bias"])
        keep = A["dsac-aid"]["final_return"] >= A["dsac-t"]["final_return"]
        print(
            f"target: AID peak q_bias below DSAC-T's and beta=0's: {'met' if damp else 'NOT met'}; "
            f"AID return >= DSAC-T's: {'met' if keep else 'NOT met'}"
        )
    if im.get("onset"):
        report_onset(im["onset"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--part",
        choices=["speed", "speed-defaults", "seeds-cpu", "profile", "kernels", "impulse", "mujoco", "sb3", "ours"],
        action="append",
    )
    ap.add_argument("--sb3-seed", type=int, action="append", help="sb3 part: only this seed (repeatable)")
    ap.add_argument("--first-seed", type=int, default=0, help="ours part: seeds first .. first + 2 (own folder)")
    ap.add_argument("--algo", action="append", help="ours part: only this algorithm (repeatable)")
    ap.add_argument("--env", default="InvertedPendulum-v5", choices=sorted(DEFAULT_TASKS), help="defaults parts' task")
    ap.add_argument("--n", type=int, default=300, help="timed updates per speed measurement")
    ap.add_argument("--budget-s", type=float, default=1800, help="seconds for the impulse / mujoco runs in this call")
    ap.add_argument(
        "--impulse", choices=sorted(IMPULSE), default="onset", help="which controlled impulse test (default: onset)"
    )
    ap.add_argument("--print-only", action="store_true")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="kernels part: also torch.compile the critic ensemble (minutes of compile)",
    )
    ap.add_argument("--impl", choices=["before", "now"], help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-profile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, default=256, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.worker_profile:
        print(json.dumps(profile_update(args.seeds, args.n, (args.hidden,) * 3)))
        return
    res = load()
    if not args.print_only:
        for part in args.part or ["speed", "seeds-cpu", "impulse", "mujoco"]:
            {
                "speed": lambda: part_speed(res, args.n),
                "seeds-cpu": lambda: part_seeds_cpu(res),
                "profile": lambda: part_profile(res),
                "kernels": lambda: part_kernels(res, args.compile),
                "impulse": lambda: part_impulse(res, args.budget_s, args.impulse),
                "mujoco": lambda: part_mujoco(res, args.budget_s),
                "sb3": lambda: part_sb3(args.env, args.sb3_seed),
                "speed-defaults": lambda: part_speed_defaults(res, args.n),
                "ours": lambda: part_ours(
                    args.env, args.budget_s, tuple(args.algo or ("sac", "dsac-t", "dsac-aid")), args.first_seed
                ),
            }[part]()
    report(res)
    sd = res.get("speed_defaults")
    if sd:
        o, b = sum(sd["ours"]) / len(sd["ours"]), sum(sd["sb3"]) / len(sd["sb3"])
        print(
            f"\n(4) updates per CPU second, SAC at the defaults (Hopper-v5 sizes, {sd['updates']} updates, 1 thread, "
            f"alternated in one process, load {sd['load']}): ours {', '.join(f'{x:.1f}' for x in sd['ours'])}; "
            f"SB3 {', '.join(f'{x:.1f}' for x in sd['sb3'])}; ratio of means {o / b:.2f}x (target >= 1.0x)"
        )
    for env_id in DEFAULT_TASKS:
        report_defaults(env_id)


if __name__ == "__main__":
    main()
