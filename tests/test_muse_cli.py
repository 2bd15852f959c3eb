"""icml26 muse: bench / eval / train through the CLI on real data (tiny recipes), the record
contract, quality thresholds, resume, and bad settings -> exit 2 with one line."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

ROOT = Path(__file__).resolve().parents[1]
R = ROOT / "recipes" / "muse"
runner = CliRunner()


def _run(args):
    from conftest import skip_if_data_missing

    r = runner.invoke(app, ["muse", *args])
    skip_if_data_missing(r)
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    return recs


def test_bench_tiny_contract_and_muse_beats_block_at_equal_sparsity(tmp_path):
    recs = _run(["bench", "--recipe", str(R / "tiny.yaml"), "-q", "--out", str(tmp_path / "b")])
    res = {r["method"]: r for r in recs if r["kind"] == "result"}
    assert set(res) == {"sdpa", "muse", "muse-v1", "muse-noretrieval", "block"}
    for r in res.values():
        for f in ("kind", "method", "context_tokens", "seconds", "speedup_vs_sdpa", "rel_squared_error", "sparsity"):
            assert f in r
        assert r["context_tokens"] == 1024 and r["seconds"] > 0
    assert res["sdpa"]["rel_squared_error"] == 0 and res["sdpa"]["sparsity"] == 0
    assert res["muse"]["sparsity"] == pytest.approx(res["block"]["sparsity"]) and res["muse"]["sparsity"] > 0.5
    # real SmolLM2 q/k/v: MuSe's error is small and below the block baseline's at the same sparsity
    assert res["muse"]["rel_squared_error"] < 0.02
    assert res["muse"]["rel_squared_error"] < res["block"]["rel_squared_error"]
    assert res["muse"]["rel_squared_error"] < res["muse-noretrieval"]["rel_squared_error"]
    assert (tmp_path / "b" / "records.jsonl").is_file()


@pytest.mark.slow
def test_eval_tiny_perplexity_close_to_sdpa():
    recs = _run(["eval", "--recipe", str(R / "eval-tiny.yaml"), "-q"])
    res = {r["method"]: r for r in recs if r["kind"] == "result"}
    assert res["sdpa"]["perplexity_ratio"] == 1.0 and 3 < res["sdpa"]["perplexity"] < 40
    assert res["muse"]["perplexity_ratio"] < 1.15
    assert res["muse"]["perplexity_ratio"] < res["block"]["perplexity_ratio"]
    for r in res.values():
        assert r["seconds"] > 0 and r["context_tokens"] == 512


def test_train_tiny_contract_determinism_and_resume(tmp_path):
    a = _run(["train", "--recipe", str(R / "train-tiny.yaml"), "-q", "--out", str(tmp_path / "a")])
    steps = [r for r in a if r["kind"] == "step"]
    assert steps and all({"step", "loss", "tokens_per_s", "wall_s"} <= set(r) for r in steps)
    res = {r["method"]: r for r in a if r["kind"] == "result"}
    assert set(res) == {"sdpa", "muse"} and all({"final_loss", "val_loss", "wall_s"} <= set(r) for r in res.values())
    assert res["sdpa"]["val_loss"] < 5.545  # below the uniform byte loss ln(256) after 6 steps
    import torch

    from icml26.ops import muse as kernel
    from icml26.methods.attention.muse import MuseSettings

    # the path that trained is recorded (the kernel's first-use build happens before the clock starts)
    assert res["sdpa"]["attention_path"] == "sdpa"
    assert res["muse"]["attention_path"] == kernel.backend_for(torch.zeros(1, 1, 2, 1), MuseSettings())
    # an interrupted run (muse's last checkpoint written, its result not yet): --resume loads the
    # checkpoint and gives the uninterrupted run's result
    d = tmp_path / "b"
    shutil.copytree(tmp_path / "a", d)
    lines = (d / "records.jsonl").read_text().splitlines()
    keep = [
        ln for ln in lines if json.loads(ln)["kind"] in ("config", "step") or json.loads(ln).get("method") == "sdpa"
    ]
    keep = [ln for ln in keep if json.loads(ln)["kind"] != "summary"]
    (d / "records.jsonl").write_text("\n".join(keep) + "\n")
    b = _run(["train", "--recipe", str(R / "train-tiny.yaml"), "-q", "--out", str(d), "--resume"])
    rb = {r["method"]: r for r in b if r["kind"] == "result"}
    assert rb["muse"]["val_loss"] == res["muse"]["val_loss"] and rb["muse"]["final_loss"] == res["muse"]["final_loss"]
    assert [r["loss"] for r in b if r["kind"] == "step"] == [r["loss"] for r in steps]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["bench", "--set", "query_clusters=3"], "query_clusters"),
        (["bench", "--method", "moba"], "moba"),
        (["bench", "-n", "1"], "context-tokens"),
        (["bench", "--set", "layer=99", "-n", "64"], "layer"),
        (["eval", "--set", "block_tokens=1"], "block_tokens"),
        (["train", "--set", "d_model=30"], "d_model"),
        (["bench", "--set", "no_such_key=1"], "valid keys"),
        (["bench", "-n", "100000000000"], "context_tokens"),
        (["bench", "--set", "block_tokens=99999999999"], "block_tokens=1.0e+11 is over its limit 16384"),
        (["eval", "--text", "/nonexistent/file.txt"], "does not exist"),
        (["eval", "--set", "eval_split=train"], "eval_split"),
    ],
)
def test_bad_settings_exit_2_one_line(args, needle, tmp_path):
    r = runner.invoke(app, ["muse", *args, "-q", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "o").exists()


_PROBE = r"""
import json, sys
from icml26.cli import main
rows = []
for args in json.loads(sys.argv[1]):
    try:
        main(args)
        rc = 0
    except SystemExit as e:
        rc = e.code
    rows.append([rc, "torch" in sys.modules])
print(json.dumps(rows))
"""


def test_bad_input_is_refused_before_torch_loads(tmp_path):
    """Settings, the work they imply, the device and the inputs a Config names (model layer, text
    file) are refused with exit 2 and one line before torch is imported, and nothing is written."""
    import os
    import subprocess
    import sys

    cases = [
        (["bench", "--set", "no_such_key=1"], "valid keys"),
        (["bench", "--set", "block_tokens=1e12"], "block_tokens"),
        (["eval", "--set", "retrieved_clusters=1e12"], "retrieved_clusters"),
        (["train", "--set", "d_model=4096", "--set", "train_steps=100000"], "flops of training"),
        (["bench", "--device", "cuda"], "CPU only"),
        (["bench", "--set", "layer=99", "-n", "64"], "layer 99 is out of range"),
        (["eval", "--text", str(tmp_path / "missing.txt")], "does not exist"),
    ]
    argv = [["muse", *a, "-q", "--out", str(tmp_path / f"o{i}")] for i, (a, _) in enumerate(cases)]
    r = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        cwd=ROOT,
        timeout=120,
    )
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    err = r.stderr.strip().splitlines()
    assert len(err) == len(cases), r.stderr
    for (args, needle), (rc, torch_loaded), line in zip(cases, rows, err):
        assert rc == 2 and needle in line and line.startswith("icml26: error:"), (args, rc, line)
        assert not torch_loaded, f"{args}: refused only after torch loaded"
    assert list(tmp_path.iterdir()) == []


def test_help():
    for sub in ("bench", "eval", "train"):
        r = runner.invoke(app, ["muse", sub, "--help"])
        assert r.exit_code == 0 and "Usage" in r.output


@pytest.mark.slow
def test_train_under_torchrun_gloo_two_ranks(tmp_path):
    import os
    import subprocess
    import sys

    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip("torchrun not installed beside this python")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(
        [
            str(torchrun),
            "--nproc_per_node",
            "2",
            "-m",
            "icml26",
            "muse",
            "train",
            "--recipe",
            str(R / "train-tiny.yaml"),
            "-q",
            "--out",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    res = [x for x in recs if x["kind"] == "result"]
    assert len(res) == 2 and all(x["world_size"] == 2 and x["val_loss"] < 5.545 for x in res)
    assert recs[-1]["kind"] == "summary"


def test_every_muse_recipe_builds_a_config():
    from icml26.core.recipe import build_config, load_recipe
    from icml26.methods.attention.harness import Config

    recipes = sorted(R.glob("*.yaml"))
    assert len(recipes) >= 6
    for p in recipes:
        cfg, seed = load_recipe(p, "muse")
        assert build_config(Config, cfg).context_tokens and seed == 0


GPL = Path("/usr/share/common-licenses/GPL-3")


def test_eval_on_your_own_text_evaluates_the_whole_file():
    """--text is evaluation text: the GPL-3 licence (about 8k tokens) is evaluated from its first
    token (eval_split auto = all), and the data record says which tokens were evaluated."""
    recs = _run(
        [
            "eval",
            "--text",
            str(GPL),
            "-n",
            "512",
            "--windows",
            "2",
            "--method",
            "muse",
            "-q",
            "--set",
            "block_tokens=64",
            "--set",
            "retrieved_clusters=2",
        ]
    )
    data = [r for r in recs if r["kind"] == "data"]
    assert len(data) == 1 and data[0]["split"] == "all" and data[0]["source"] == str(GPL)
    assert data[0]["token_ranges"] == [[0, 512], [512, 1024]] and data[0]["tokens_available"] > 7000
    res = {r["method"]: r for r in recs if r["kind"] == "result"}
    assert set(res) == {"sdpa", "muse"} and res["muse"]["split"] == "all" and res["muse"]["windows"] == 2
    assert res["muse"]["muse_calls"] == 2 * 30 and res["muse"]["exact_calls"] == 0  # every SmolLM2 layer ran MuSe
    assert 1.0 < res["sdpa"]["perplexity"] < 30 and res["muse"]["perplexity_ratio"] < 1.3  # coarse: r = 2 at B = 64


def test_eval_windows_take_what_fits_in_your_file_and_keep_the_split_rule_otherwise():
    from icml26.methods.attention import harness as H

    size = len(GPL.read_bytes())
    wins, data = H.eval_windows(None, H.Config(text=str(GPL), windows=1000), 4096)  # bytes as tokens
    assert len(wins) == size // 4096 and data["tokens_available"] == size
    assert data["token_ranges"][-1] == [4096 * (size // 4096 - 1), 4096 * (size // 4096)]
    assert H.Config(text=str(GPL)).split == "all" and H.Config().split == "test"
    assert H.Config(text=str(GPL), eval_split="test").split == "test"
    with pytest.raises(ValueError, match="needs --text"):
        H.Config(eval_split="all")
