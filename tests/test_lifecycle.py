"""The command lifecycle over every registered command (``cli.CONFIGS``), one rule per test:

- every Config field explains itself (help text) and its module loads no torch;
- every command declares its limits (a ``sized`` setting or a ``work()`` cost model), and a huge
  value of each sized setting exits 2 in well under a CPU-second, naming it, before torch loads
  and before anything is written;
- a one-seed run has null intervals, progress lines appear on a pipe, a forced non-finite loss
  gives ``diverged: true`` and no winner (fast runs of sng and modality-pairing);
- ``--resume`` after Ctrl-C gives the records of an uninterrupted run; the interrupted marker
  survives repeated signals; ``--out`` at a non-empty folder without a run is refused.

``PENDING`` lists the (rule, command) pairs of commands not moved onto a rule yet: they are
expected to fail (strict xfail), so the list shrinks as each command is moved.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from icml26.cli import CONFIGS
from icml26.core import settings

ROOT = Path(__file__).resolve().parents[1]

PENDING: dict[tuple[str, str], str] = {
    # (rule, command): what is missing
    **{("help", c): "Config fields without help" for c in ()},
    **{("torch-free", c): "Config module imports torch" for c in ()},
    **{("limits", c): "no sized setting and no work() model declared" for c in ()},
}


def _mark(rule: str, command: str):
    why = PENDING.get((rule, command))
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    if why and rule == "torch-free":  # a known torch import costs seconds: checked by make test-slow
        marks.append(pytest.mark.slow)
    return pytest.param(command, marks=marks, id=command)


def _cls(command: str) -> type:
    mod, _, name = CONFIGS[command].partition(":")
    return getattr(importlib.import_module(mod), name)


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="200")
    env.pop("ICML26_FORCE_DIVERGE_AT", None)
    env.update(extra)
    return env


# ------------------------------------------------------------------ settings that explain themselves


@pytest.mark.parametrize("command", [_mark("help", c) for c in CONFIGS])
def test_every_setting_has_help(command):
    cls = _cls(command)
    missing = [f.name for f in dataclasses.fields(cls) if f.init and not settings.field_help(cls, f)]
    assert not missing, f"{command}: fields without help: {missing}"


def test_set_help_prints_meaning_unit_choices_and_the_effective_default(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "icml26", "sng", "--set", "help", "--set", "seeds=3", "--time-budget", "7"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "problem                 poisson2d|poisson5d|heat1d|allencahn2d = 'poisson2d'" in out  # choices
    assert "time_budget_s           float = 7.0" in out  # the typed option's value, not the class default
    assert "seeds                   int = 3" in out  # the other --set
    assert "optimizer time per run (s); unit: seconds" in out  # help (the field's comment) and unit
    assert "range: <= 65536 (sized)" in out


@pytest.mark.parametrize("command", [_mark("torch-free", c) for c in CONFIGS])
def test_config_module_loads_no_torch(command):
    mod, _, name = CONFIGS[command].partition(":")
    code = f"import sys, {mod} as m; m.{name}(); print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-400:]
    assert r.stdout.strip() == "False", f"{CONFIGS[command]} imports torch"


# ------------------------------------------------------------------ limits up front


@pytest.mark.parametrize("command", [_mark("limits", c) for c in CONFIGS])
def test_every_command_declares_its_limits(command):
    cls = _cls(command)
    assert settings.sized_fields(cls) or callable(getattr(cls, "work", None)), command


_SIZED = [c for c in CONFIGS if settings.sized_fields(_cls(c))]

_PROBE = r"""
import json, os, sys, time
from icml26.cli import main
command, fields, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
rows = []
for f in fields:
    t = time.process_time()
    d = os.path.join(out, f)
    try:
        main([*command.split(), "--set", f + "=1e12", "--out", d])
        rc = 0
    except SystemExit as e:
        rc = e.code
    rows.append({"field": f, "rc": rc, "cpu_s": time.process_time() - t, "torch": "torch" in sys.modules,
                 "wrote": os.path.exists(d)})
print(json.dumps(rows))
"""


@pytest.mark.parametrize("command", [_mark("sized", c) for c in _SIZED])
def test_huge_sized_setting_exits_2_at_once_and_writes_nothing(command, tmp_path):
    fields = settings.sized_fields(_cls(command))
    r = subprocess.run(
        [sys.executable, "-c", _PROBE, command, ",".join(fields), str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    err = r.stderr.splitlines()
    assert len(err) == len(fields), r.stderr  # one line per refusal
    for row, line in zip(rows, err):
        f = row["field"]
        assert row["rc"] == 2, (f, line)
        assert f in line and line.startswith("icml26: error:"), (f, line)
        assert not row["wrote"], f"{f}: --out was created"
        assert not row["torch"], f"{f}: refused only after torch loaded"
        assert row["cpu_s"] < 1.0, (f, row["cpu_s"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["modality-pairing", "--set", "epochs=1e12"], "epochs"),
        (["mamoe", "train", "--set", "steps=1e12"], "steps"),
        (["icr", "train", "--set", "batch_size=1e12"], "batch_size"),
        (["hdr-gs", "train", "--set", "iters=1e12"], "iters"),
        (["hdr-gs", "train", "--set", "lr_means=-1"], "lr_means must be > 0"),
        (["muse", "bench", "--set", "block_tokens=1e12"], "block_tokens"),
        (["dsac-aid", "--set", "lr_q=-1"], "lr_q must be > 0"),
        (["icr", "train", "--device", "cuda"], "computes on the CPU only"),
        (["mamoe", "train", "--device", "cuda:0"], "computes on the CPU only"),
    ],
)
def test_the_issue_cases_exit_2_before_any_output(args, needle, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "icml26", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and needle in r.stderr and r.stdout == "", (r.returncode, r.stderr)
    assert not out.exists()


# ------------------------------------------------------------------ run folders


def test_out_at_a_folder_holding_other_files_is_refused_before_work(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    r = subprocess.run(
        [sys.executable, "-m", "icml26", "icr", "train", "--out", str(d)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "holds other files (notes.txt) and no run" in r.stderr, r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


_SLOW_STREAM = r"""
import sys, time
from icml26.core.output import stream
from icml26.core.preamble import Run
def gen():
    for i in range(10_000):
        yield {"kind": "result", "i": i}
        time.sleep(0.01)
stream(gen(), Run("toy", out=sys.argv[1]), quiet=True)
"""


def test_interrupted_marker_survives_repeated_signals(tmp_path):
    d = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-c", _SLOW_STREAM, str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    for _ in range(3):  # the config record and two results: the run has started writing
        p.stdout.readline()
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        p.send_signal(sig)
    p.wait(timeout=60)
    marker = json.loads((d / "interrupted.json").read_text())
    assert marker["kind"] == "interrupted" and marker["reason"] in ("SIGTERM", "KeyboardInterrupt")
    assert [x.name for x in d.iterdir() if x.name.endswith(".tmp")] == []


# ------------------------------------------------------------------ runs: intervals, progress, divergence, resume


@pytest.fixture(scope="module")
def mm_folder(tmp_path_factory):
    """Two vector modalities of 6 classes: class means plus noise (a second view of the label)."""
    d = tmp_path_factory.mktemp("mm")
    rng = np.random.default_rng(0)
    means = rng.standard_normal((6, 8)).astype(np.float32)
    arrays: dict = {}
    for split, n in (("train", 120), ("test", 60)):
        y = rng.integers(0, 6, n)
        for m in ("a", "b"):
            x = means[y] + 1.5 * rng.standard_normal((n, 8)).astype(np.float32)
            arrays.setdefault(m, {}).update({f"x_{split}": x.astype(np.float32), f"y_{split}": y})
    for m, a in arrays.items():
        np.savez(d / f"{m}.npz", **a)
    return d


MM_SMALL = [
    "--set",
    "width=4",
    "--set",
    "embed_dim=8",
    "--set",
    "hessian_samples=16",
    "--set",
    "hessian_iters=2",
    "--set",
    "hutchinson_samples=1",
    "--set",
    "noise_draws=1",
    "--set",
    "loss_curve_radii=[0.0, 1.0]",
    "--set",
    "loss_curve_directions=1",
    "--set",
    "robust_samples=16",
    "--set",
    "pgd_steps=1",
    "--set",
    "batch_size=32",
]


def _runs(folder: Path) -> dict[str, list[str]]:
    return {
        "sng": [
            "sng",
            "--optim",
            "adam,sgd",
            "--batch",
            "16",
            "--time-budget",
            "0.6",
            "--seeds",
            "1",
            "--set",
            "pool_interior=64",
            "--set",
            "pool_boundary=16",
            "--set",
            "eval_points=64",
            "--set",
            "width=8",
            "--set",
            "eval_interval_s=0.1",
        ],
        "modality-pairing": [
            "modality-pairing",
            "--data",
            str(folder),
            "--pairing",
            "unimodal,fixed,stochastic",
            "--reg",
            "none",
            "--epochs",
            "2",
            "--seeds",
            "1",
            *MM_SMALL,
        ],
    }


def _run(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    r = subprocess.run(
        [sys.executable, "-m", "icml26", *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=ROOT,
        timeout=300,
    )
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


def _nulls(rec: dict) -> list:
    return [rec[k] for k in rec if k.endswith("_ci")]


@pytest.mark.parametrize("command", ["sng", "modality-pairing"])
def test_one_seed_run_has_null_intervals_no_winner_and_progress(command, mm_folder):
    r, recs = _run(_runs(mm_folder)[command], ICML26_PROGRESS_S="0")
    assert r.returncode == 0, r.stderr[-2000:]
    res = [x for x in recs if x["kind"] == "result"]
    assert res and all(_nulls(x) and all(v is None for v in _nulls(x)) for x in res), res
    summ = recs[-1]
    best = [k for k in summ if k.startswith("best_") and k.replace("best_", "tied_with_best_") in summ]
    assert best and all(summ[k] is None for k in best), summ  # one seed: nothing is separated
    lines = [x for x in r.stderr.splitlines() if x.startswith("[")]
    assert any(" elapsed " in x and "loss=" in x for x in lines), r.stderr[-2000:]  # progress on a pipe


@pytest.mark.parametrize("command", ["sng", "modality-pairing"])
def test_forced_non_finite_loss_is_reported_as_diverged(command, mm_folder):
    r, recs = _run([*_runs(mm_folder)[command], "-q"], ICML26_FORCE_DIVERGE_AT="1")
    assert r.returncode == 0, r.stderr[-2000:]
    res = [x for x in recs if x["kind"] == "result"]
    assert res and all(x["diverged"] is True and x["diverged_step"] >= 1 for x in res), res
    assert "training diverged at step" in r.stderr
    summ = recs[-1]
    assert summ["diverged"] and all(summ[k] is None for k in summ if k.startswith("best_") and "rel_l2" not in k)


_TIMING = ("train_wall_s", "seconds", "wall_s")


def _strip(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in recs]


@pytest.mark.slow
def test_resume_after_ctrl_c_equals_an_uninterrupted_run(mm_folder, tmp_path):
    args = _runs(mm_folder)["modality-pairing"] + ["-q"]
    full = tmp_path / "full"
    r, _ = _run([*args, "--out", str(full)])
    assert r.returncode == 0, r.stderr[-2000:]
    part = tmp_path / "part"
    p = subprocess.Popen(
        [sys.executable, "-m", "icml26", *args, "--out", str(part)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    results = 0
    t0 = time.monotonic()
    while results < 2 and time.monotonic() - t0 < 240:
        line = p.stdout.readline()
        results += '"kind": "result"' in line
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    assert (part / "interrupted.json").is_file()
    r, _ = _run([*args, "--out", str(part), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    read = lambda d: [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines()]  # noqa: E731
    assert _strip(read(part)) == _strip(read(full))
    assert not (part / "interrupted.json").exists()


def _interrupt_after(args: list[str], kind: str, n: int) -> None:
    """Run ``icml26 args``; SIGINT once ``n`` records of ``kind`` are out (Ctrl-C)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "icml26", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    seen, t0 = 0, time.monotonic()
    while seen < n and time.monotonic() - t0 < 600:
        line = p.stdout.readline()
        if not line:
            break
        seen += f'"kind": "{kind}"' in line
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)


@pytest.mark.slow
def test_hdr_gs_resume_keeps_the_steps_written_before_the_interrupt(tmp_path):
    from conftest import need

    from icml26.core.data.renders import povray_missing_message, povray_path

    need(lambda: povray_path() is not None, povray_missing_message())
    args = ["hdr-gs", "train", "--recipe", str(ROOT / "recipes" / "hdr-gs" / "tiny.yaml"), "-q"]
    full, part = tmp_path / "full", tmp_path / "part"
    r, _ = _run([*args, "--out", str(full)])
    assert r.returncode == 0, r.stderr[-2000:]
    _interrupt_after([*args, "--out", str(part)], "step", 4)  # inside the second method's training
    assert (part / "interrupted.json").is_file()
    r, _ = _run([*args, "--out", str(part), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    read = lambda d: [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines()]  # noqa: E731
    strip = lambda rs: [  # noqa: E731
        {k: v for k, v in x.items() if k not in ("train_s", "ckpt", "seconds")} for x in rs if x["kind"] == "step"
    ]
    assert strip(read(part)) == strip(read(full))  # every step record, none lost to the interrupt


# ------------------------------------------------------------------ every training command (slow: tiny recipes)

TRAINING: dict[str, list[str]] = {
    "equivariance": ["equivariance", "-r", "recipes/equivariance/tiny.yaml"],
    "jacobian-spectrum": [
        "jacobian-spectrum",
        "-r",
        "recipes/jacobian-spectrum/tiny.yaml",
        "--train",
        "mnist",
        "--set",
        "train_steps=20",
        "--set",
        "train_examples=256",
        "--set",
        "log_every=10",
    ],
    "icr train": ["icr", "train", "-r", "recipes/icr/tiny.yaml"],
    "mamoe train": ["mamoe", "train", "-r", "recipes/mamoe/tiny.yaml"],
    "dsac-aid": ["dsac-aid", "-r", "recipes/dsac-aid/tiny.yaml"],
    "fed-lora": ["fed-lora", "-r", "recipes/fed-lora/tiny.yaml"],
    # the trained model only: persistence and ridge have no training loop (their results say diverged: false)
    "traffic run": ["traffic", "run", "-r", "recipes/traffic/tiny.yaml", "--model", "minitraffic"],
    "train-lfm": ["train-lfm", "-r", "recipes/train-lfm/tiny.yaml"],
    "hdr-gs train": ["hdr-gs", "train", "-r", "recipes/hdr-gs/tiny.yaml"],
}
PENDING_TRAINING: dict[str, str] = {
    # command: what its tiny run lacks
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(
            c, marks=[pytest.mark.xfail(strict=True, reason=PENDING_TRAINING[c])] if c in PENDING_TRAINING else []
        )
        for c in TRAINING
    ],
)
def test_training_command_reports_progress_and_stops_on_divergence(command, tmp_path):
    """The tiny recipe with progress lines forced on a pipe and a non-finite loss injected from
    step 3: progress lines appear, every result of a trained model says ``diverged: true`` (a
    measurement at initialisation has no ``diverged`` field), stderr warns."""
    args = [*TRAINING[command], "--out", str(tmp_path / "run")]
    r, recs = _run(args, ICML26_PROGRESS_S="0", ICML26_FORCE_DIVERGE_AT="3")
    from conftest import _missing_data_reason, need

    if r.returncode == 2 and _missing_data_reason(r.stderr) is not None:
        need(lambda: False, _missing_data_reason(r.stderr))
    assert r.returncode == 0, r.stderr[-2000:]
    progress_lines = [x for x in r.stderr.splitlines() if x.startswith("[") and " elapsed " in x]
    res = [x for x in recs if x["kind"] == "result" and x.get("phase") != "init"]
    problems = []
    if not progress_lines:
        problems.append("no progress line")
    summ = recs[-1] if recs and recs[-1]["kind"] == "summary" else {}
    if res and not all(x.get("diverged") is True for x in res):
        problems.append("results not marked diverged")
    if not res and summ.get("diverged") is not True:  # a training run without result records (train-lfm)
        problems.append("summary not marked diverged")
    if "training diverged at step" not in r.stderr:
        problems.append("no divergence warning")
    assert not problems, f"{command}: {problems}"
