"""icml26 icr through the CLI on real Fashion-MNIST (tiny recipes): the record contracts of train,
analyze and report, --resume continuing an interrupted run exactly, bad model folders and bad
noise levels -> exit 2 with one line before anything is written."""

import json
import shutil
from types import SimpleNamespace
from pathlib import Path

import pytest

from conftest import ROOT, need_debian

TINY_TRAIN = str(ROOT / "recipes/icr/tiny.yaml")
TINY_ANALYZE = str(ROOT / "recipes/icr/tiny-analyze.yaml")


def _cli(args, capsys):
    from icml26.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    cap = capsys.readouterr()
    recs = [json.loads(x) for x in cap.out.splitlines() if x.strip()]
    return code, recs, cap.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    need_debian("dataset-fashion-mnist")
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("icr") / "train"
    r = subprocess.run(
        [sys.executable, "-m", "icml26", "icr", "train", "--recipe", TINY_TRAIN, "-q", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    return out, [json.loads(x) for x in r.stdout.splitlines()]


def test_train_record_contract(trained):
    out, recs = trained
    assert recs[0]["kind"] == "config" and recs[0]["command"] == "icr train" and recs[-1]["kind"] == "summary"
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [10, 20]
    for r in steps:
        assert {"step", "loss", "icr", "memorization_fraction"} <= set(r)
        assert 0.0 < r["icr"] < 1.0 and 0.0 <= r["memorization_fraction"] <= 1.0 and r["shrinkage"] > 0
    (res,) = [r for r in recs if r["kind"] == "result"]
    assert {"icr_min_step", "memorization_onset_step", "train_size"} <= set(res)
    assert res["train_size"] == 64 and res["icr_min_step"] in (10, 20)
    assert (out / "size-64" / "unet" / "config.json").is_file()
    assert (out / "size-64" / "unet" / "diffusion_pytorch_model.safetensors").is_file()
    assert (out / "size-64" / "checkpoint.safetensors").is_file()


def test_analyze_record_contract_and_report(trained, tmp_path, capsys):
    out, _ = trained
    code, recs, err = _cli(
        [
            "icr",
            "analyze",
            "--model",
            str(out / "size-64" / "unet"),
            "--recipe",
            TINY_ANALYZE,
            "-q",
            "--out",
            str(tmp_path / "sweep"),
        ],
        capsys,
    )
    assert code == 0, err
    res = [r for r in recs if r["kind"] == "result"]
    assert [r["noise_level"] for r in res] == [0.0, 0.29, 1.0, 3.0]
    for r in res:
        for k in (
            "kind",
            "noise_level",
            "noise_param",
            "alpha_bar",
            "icr",
            "probe_accuracy",
            "feature_layer",
            "shrinkage",
        ):
            assert k in r, k
        assert (
            r["noise_param"] == "sigma"
            and r["feature_layer"] == "mid_block"
            and 0 < r["icr"] < 1
            and r["shrinkage"] > 0
        )
        assert r["alpha_bar"] == pytest.approx(1 / (1 + r["noise_level"] ** 2))
    # residual variance grows with the noise: heavy noise leaves the least image identity
    assert res[-1]["icr"] > res[0]["icr"]
    assert recs[-1]["kind"] == "summary" and recs[-1]["icr_min_level"] is not None
    code, recs, err = _cli(["icr", "report", str(tmp_path / "sweep"), "-q"], capsys)
    assert code == 0, err
    assert (tmp_path / "sweep" / "icr_sweep.png").stat().st_size > 1000
    code, recs, err = _cli(["icr", "report", str(out), "-q"], capsys)
    assert code == 0, err
    assert (out / "icr_training.png").is_file() and (out / "icr_quality.png").is_file()


@pytest.mark.slow
def test_resume_continues_an_interrupted_run_exactly(trained, tmp_path, capsys):
    """Stop after the first monitor point (checkpoint at step 10), then --resume: the records equal
    the uninterrupted run's (same ICR, loss, memorization at step 20)."""
    from icml26.core.output import stream
    from icml26.core.preamble import Run
    from icml26.core.recipe import resolve
    from icml26.methods.diffusion import train as m

    _, full = trained
    cfg = resolve(m.TrainConfig, "icr", TINY_TRAIN, None)
    out = tmp_path / "run"
    inputs = m.validate(cfg, str(out), False)

    def cut(gen):
        for r in gen:
            yield r
            if r["kind"] == "step":
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stream(
            cut(m.run(cfg, inputs=inputs, seed=0, out=out)),
            Run("icr train", cfg=cfg, seed=0, out=out, resumable=True),
            quiet=True,
        )
    capsys.readouterr()
    assert (out / "interrupted.json").is_file()
    code, recs, err = _cli(["icr", "train", "--recipe", TINY_TRAIN, "-q", "--out", str(out), "--resume"], capsys)
    assert code == 0, err
    a = [r for r in full if r["kind"] in ("step", "result")]
    b = [r for r in recs if r["kind"] in ("step", "result")]
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
        for k in ("step", "loss", "icr", "memorization_fraction", "icr_min_step"):
            if k in x:
                assert y[k] == pytest.approx(x[k], rel=1e-6, abs=1e-9), k
    stored = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in stored].count("step") == 2 and stored[-1]["kind"] == "summary"
    assert not (out / "interrupted.json").exists()


def _one_line_exit_2(code, err, *needles):
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_bad_model_folder_exits_2_before_writing(tmp_path, capsys):
    out = tmp_path / "never"
    code, recs, err = _cli(["icr", "analyze", "--model", str(tmp_path / "nope"), "-q", "--out", str(out)], capsys)
    _one_line_exit_2(code, err, "does not exist")
    assert recs == [] and not out.exists()
    (tmp_path / "empty").mkdir()
    code, recs, err = _cli(["icr", "analyze", "--model", str(tmp_path / "empty"), "-q", "--out", str(out)], capsys)
    _one_line_exit_2(code, err, "config.json")
    assert recs == [] and not out.exists()
    code, _, err = _cli(["icr", "analyze", "-q"], capsys)
    _one_line_exit_2(code, err, "--model")


def test_bad_noise_level_and_layer_exit_2(trained, tmp_path, capsys):
    out, _ = trained
    model = str(out / "size-64" / "unet")
    dest = tmp_path / "never"
    code, recs, err = _cli(
        ["icr", "analyze", "--model", model, "--noise-level", "0.29,-1", "-q", "--out", str(dest)], capsys
    )
    _one_line_exit_2(code, err, "negative")
    assert recs == [] and not dest.exists()
    code, _, err = _cli(["icr", "analyze", "--model", model, "--noise-level", "abc", "-q"], capsys)
    _one_line_exit_2(code, err, "--noise-level")
    code, _, err = _cli(
        ["icr", "analyze", "--model", model, "--feature-layer", "nope", "--recipe", TINY_ANALYZE, "-q"], capsys
    )
    _one_line_exit_2(code, err, "mid_block")
    # a DDPM folder (no icml26 metadata): t must be an integer timestep
    foreign = tmp_path / "ddpm"
    shutil.copytree(model, foreign)
    (foreign / "icml26_icr.json").unlink()
    code, _, err = _cli(["icr", "analyze", "--model", str(foreign), "--noise-level", "1000", "-q"], capsys)
    _one_line_exit_2(code, err, "timestep")


def test_train_bad_input_exits_2(tmp_path, capsys):
    code, _, err = _cli(["icr", "train", "--train-size", "x", "-q"], capsys)
    assert "--train-size" in _one_line_exit_2(code, err)
    code, _, err = _cli(["icr", "train", "--train-size", "1000000", "--recipe", TINY_TRAIN, "-q"], capsys)
    assert "exceed" in _one_line_exit_2(code, err)
    code, _, err = _cli(["icr", "train", "--recipe", TINY_TRAIN, "--set", "monitor_sigma=-1", "-q"], capsys)
    assert "monitor_sigma" in _one_line_exit_2(code, err)
    code, _, err = _cli(["icr", "report", str(tmp_path), "-q"], capsys)
    assert "records.jsonl" in _one_line_exit_2(code, err)


def test_train_under_torchrun_two_gloo_ranks_matches_one_process(trained, tmp_path):
    """2 processes (gloo), each on half of the same global batch: the losses, ICR and memorization
    of the monitor points equal the single-process run's (the trained fixture) up to float
    reduction order; rank 0 alone writes."""
    import os
    import subprocess
    import sys

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.is_file():
        pytest.skip("torchrun not installed beside this python")
    _, one = trained
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "icml26",
            "icr",
            "train",
            "--recipe",
            TINY_TRAIN,
            "-q",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    ddp = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert ddp[-1]["kind"] == "summary" and ddp[-1]["processes"] == 2
    assert [x["kind"] for x in ddp].count("config") == 1  # one writer
    s_one = [x for x in one if x["kind"] == "step"]
    s_ddp = [x for x in ddp if x["kind"] == "step"]
    assert [x["step"] for x in s_ddp] == [x["step"] for x in s_one] == [10, 20]
    assert [x["loss"] for x in s_ddp] == pytest.approx([x["loss"] for x in s_one], rel=1e-4)
    assert [x["icr"] for x in s_ddp] == pytest.approx([x["icr"] for x in s_one], rel=1e-3)
    assert (out / "size-64" / "checkpoint.safetensors").is_file()


def test_train_batch_not_divisible_by_processes_exits_2(tmp_path, capsys, monkeypatch):
    need_debian("dataset-fashion-mnist")
    monkeypatch.setenv("WORLD_SIZE", "3")  # validation reads the world size before joining a group
    code, recs, err = _cli(["icr", "train", "--recipe", TINY_TRAIN, "-q", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and recs == []
    assert "batch_size 16 does not split over 3 torchrun processes" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_seed_reaches_the_run_and_changes_the_monitor(trained, tmp_path, capsys):
    """--seed is the run's seed: the config record carries it, and it draws another training subset,
    initialisation and sampler noise, so the monitor values differ from seed 0's."""
    _, seed0 = trained
    out = tmp_path / "s1"
    code, recs, err = _cli(["icr", "train", "--recipe", TINY_TRAIN, "--seed", "1", "-q", "--out", str(out)], capsys)
    assert code == 0, err
    assert recs[0]["kind"] == "config" and recs[0]["seed"] == 1
    a = [r for r in seed0 if r["kind"] == "step"]
    b = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in a] == [r["step"] for r in b] == [10, 20]
    for x, y in zip(a, b):
        assert abs(x["icr"] - y["icr"]) > 1e-4 and abs(x["loss"] - y["loss"]) > 1e-4
    code, _, err = _cli(
        ["icr", "train", "--recipe", TINY_TRAIN, "--seed", "-1", "-q", "--out", str(tmp_path / "bad")], capsys
    )
    assert code == 2 and "--seed" in err
    assert not (tmp_path / "bad").exists()


def _bench():
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("icr_bench", ROOT / "benchmarks" / "icr.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_parts_pass_the_seed_and_bad_parts_exit_2(tmp_path, monkeypatch):
    import subprocess
    import sys

    b = _bench()
    assert b.parse_part("small-32") == b.parse_part("small-32-s0")  # seed 0 keeps the folder it had
    assert b.parse_part("mnist-32-s2") == {
        "kind": "train",
        "name": "mnist-32-s2",
        "family": "mnist",
        "size": 32,
        "seed": 2,
    }
    for bad in ("small-32-s", "small-32-sx", "small-32-s-1", "small-1", "full-x", "seeds"):
        with pytest.raises(ValueError):
            b.parse_part(bad)
    calls = []
    monkeypatch.setattr(b, "_icml26", lambda args: calls.append(args))
    args = SimpleNamespace(collect=False, data="fashion-mnist", samples=64, sampler_steps=12)
    p = b.part_train(args, 32, 1500, 100, tmp_path / "small-32-s2", seed=2)
    (cmd,) = calls
    assert cmd[cmd.index("--seed") + 1] == "2" and cmd[cmd.index("--out") + 1] == str(tmp_path / "small-32-s2")
    assert cmd[cmd.index("--data") + 1] == "fashion-mnist" and "--resume" not in cmd and p["seed"] == 2
    j = tmp_path / "r.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "icr.py"),
            "--part",
            "small-32-s1",
            "--part",
            "small-32-sx",
            "--json",
            str(j),
            "--runs",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "small-32-sx" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not j.exists() and not (tmp_path / "runs").exists()


def _part(seed, onset, icr_min, steps=1500, n=32):
    recs = [
        {"kind": "config", "seed": seed},
        {
            "kind": "result",
            "train_size": n,
            "steps": steps,
            "icr_min_step": icr_min,
            "memorization_onset_step": onset,
            "onset_minus_icr_min_steps": None if onset is None else onset - icr_min,
            "icr_min_before_onset": None if onset is None else icr_min < onset,
        },
    ]
    return {"records": recs}


def test_seed_verdicts_count_and_interval():
    """Claim B over seeds: k of n seeds, and mean onset - ICR-min with its t-interval, recomputed here."""
    import numpy as np
    from scipy import stats

    b = _bench()
    parts = {
        "small-32": _part(0, 800, 1000),
        "small-32-s1": _part(1, 900, 400),
        "small-32-s2": _part(2, 700, 600),
        "small-64": _part(0, None, 1500, n=64),
        "small-64-s1": _part(1, 1300, 1200, n=64),
        "full": _part(0, None, 600, n=60000),
    }
    rows = b.seed_verdicts(parts)
    assert [(r["train_size"], r["seeds"]) for r in rows] == [(32, [0, 1, 2]), (64, [0, 1])]
    r32, r64 = rows
    assert r32["verdicts"] == [False, True, True] and r32["shown"] == 2 and r32["measured"] == 3
    d = np.array([-200, 500, 100])
    assert r32["differences"] == d.tolist() and r32["mean_onset_minus_icr_min"] == pytest.approx(d.mean())
    h = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert r32["ci95"] == pytest.approx([d.mean() - h, d.mean() + h])
    assert r64["verdicts"] == [None, True] and r64["shown"] == 1 and r64["measured"] == 1 and r64["ci95"] is None


def test_plot_seeds_writes_one_column_per_group(tmp_path):
    from icml26.core.errors import InputError
    from icml26.methods.diffusion import report as R

    def recs(seed):
        st = [
            {
                "kind": "step",
                "train_size": 32,
                "step": s,
                "icr": 0.4 - 0.01 * seed + 0.001 * s / 100,
                "memorization_fraction": max(0.0, (s - 500) / 1000),
            }
            for s in range(100, 1001, 100)
        ]
        return st + [{"kind": "result", "train_size": 32, "icr_min_step": 100, "memorization_onset_step": 600}]

    f = R.plot_seeds({"A, N = 32": {0: recs(0), 1: recs(1)}, "B, N = 32": {0: recs(2)}}, tmp_path / "s.png")
    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000
    with pytest.raises(InputError):
        R.plot_seeds({"empty": {0: [{"kind": "result"}]}}, tmp_path / "e.png")
