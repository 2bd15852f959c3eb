"""icml26 fed-lora through the CLI: the record contract, bad ranks -> exit 2 before anything is
written, and --resume from a per-round checkpoint giving the uninterrupted run's results."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")
pytest.importorskip("peft")

from icml26.cli import app  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "fed-lora" / "tiny.yaml"
runner = CliRunner()


def _root_conftest():
    """tests/conftest.py (a ``conftest`` of a subfolder, e.g. tests/methods/, can shadow it as ``conftest``)."""
    import sys

    m = sys.modules.get("conftest")
    if m is not None and Path(m.__file__).resolve() == ROOT / "tests" / "conftest.py":
        return m
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tests_root_conftest", ROOT / "tests" / "conftest.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


FAST = ["--strategy", "het-cpflora,fedit", "--set", "generation_examples=1"]


def _recs(text):
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ranks", "4,8,32"], ["rank 32", "v_proj", "16"]),  # rank > the projection's dimension
        (["--clients", "2"], ["ranks", "3 values for 2 clients"]),  # mismatched client count
        (["--ranks", "4,8"], ["ranks", "2 values for 3 clients"]),
        (["--personal-ranks", "1,8,4"], ["personal_ranks", "client 1"]),  # personal >= rank
        (["--ranks", "4,x,8"], ["--ranks", "expected integers (comma-separated)"]),
        (["--strategy", "fedavg"], ["unknown 'fedavg'"]),
        (
            ["--set", "train_examples=100000"],
            ["runs out of examples: a draw of 100000"],
        ),  # the task source cannot fill the split
    ],
)
def test_bad_ranks_exit_2_before_anything_is_written(tmp_path, args, words):
    out = tmp_path / "run"
    r = runner.invoke(app, ["fed-lora", "--recipe", str(TINY), "-q", "--out", str(out), *args])
    skip_if_data_missing = _root_conftest().skip_if_data_missing

    skip_if_data_missing(r)  # the split check needs the Debian texts
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert r.stdout == "" and not out.exists()


def test_tiny_recipe_record_contract(tmp_path):
    skip_if_data_missing = _root_conftest().skip_if_data_missing

    r = runner.invoke(app, ["fed-lora", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "run"), *FAST])
    skip_if_data_missing(r)
    assert r.exit_code == 0, (r.output, r.exception)
    recs = _recs(r.stdout)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    rounds = [x for x in recs if x["kind"] == "round"]
    results = [x for x in recs if x["kind"] == "result"]
    assert [(x["strategy"], x["round"]) for x in rounds] == [
        ("het-cpflora", 1),
        ("het-cpflora", 2),
        ("fedit", 1),
        ("fedit", 2),
    ]
    for x in rounds:
        assert {"round", "strategy", "mean_train_loss", "upload_bytes", "download_bytes"} <= set(x)
    assert [x["strategy"] for x in results] == ["het-cpflora", "fedit"]
    for x in results:
        assert {
            "local_perplexity",
            "local_rouge1",
            "global_perplexity",
            "per_client",
            "comm_bytes_total",
            "wall_s",
        } <= set(x)
        assert isinstance(x["per_client"], list) and len(x["per_client"]) == 3
    ck = tmp_path / "run" / "checkpoints" / "het-cpflora"
    assert (ck / "state.safetensors").is_file() and json.loads((ck / "state.json").read_text())["round"] == 2


def test_resume_continues_from_the_round_checkpoint(tmp_path, monkeypatch):
    skip_if_data_missing = _root_conftest().skip_if_data_missing
    from icml26.methods.federated import harness

    full = runner.invoke(app, ["fed-lora", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "a"), *FAST])
    skip_if_data_missing(full)
    assert full.exit_code == 0, full.output
    real = harness._save_ckpt
    calls = []

    def stop_after_fedit_round_1(ckpt_dir, name, strat, grid, recs, wall_s):
        real(ckpt_dir, name, strat, grid, recs, wall_s)
        calls.append((name, len(recs)))
        if (name, len(recs)) == ("fedit", 1):
            raise KeyboardInterrupt

    monkeypatch.setattr(harness, "_save_ckpt", stop_after_fedit_round_1)
    cut = runner.invoke(app, ["fed-lora", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "b"), *FAST])
    assert cut.exit_code != 0 and (tmp_path / "b" / "interrupted.json").is_file()
    resumed = []

    def record(ckpt_dir, name, strat, grid, recs, wall_s):
        real(ckpt_dir, name, strat, grid, recs, wall_s)
        resumed.append((name, len(recs)))

    monkeypatch.setattr(harness, "_save_ckpt", record)
    again = runner.invoke(
        app, ["fed-lora", "--recipe", str(TINY), "-q", "--out", str(tmp_path / "b"), "--resume", *FAST]
    )
    assert again.exit_code == 0, again.output
    assert resumed == [
        ("fedit", 2)
    ]  # only the missing round was trained (het-cpflora replayed, fedit round 1 from its checkpoint)
    a = [x for x in _recs(full.stdout) if x["kind"] == "result"]
    b = [x for x in _recs(again.stdout) if x["kind"] == "result"]
    assert [x["strategy"] for x in b] == ["het-cpflora", "fedit"]
    for x, y in zip(a, b):
        assert y["local_perplexity"] == pytest.approx(x["local_perplexity"], rel=1e-9)
        assert y["global_perplexity"] == pytest.approx(x["global_perplexity"], rel=1e-9)
        assert y["comm_bytes_total"] == x["comm_bytes_total"]
    file_recs = _recs((tmp_path / "b" / "records.jsonl").read_text())
    assert [x["kind"] for x in file_recs].count("round") == 4 and file_recs[-1]["kind"] == "summary"
    assert not (tmp_path / "b" / "interrupted.json").exists()
