"""icml26 mamoe: the tiny recipe end to end (record contract), eval of its checkpoints, bad input -> exit 2."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT, need, need_debian

TINY = str(ROOT / "recipes/mamoe/tiny.yaml")
FIELDS = {
    "kind",
    "variant",
    "task",
    "wer",
    "wer_librivox",
    "text_perplexity",
    "routing_text_to_speech_experts",
    "routing_speech_to_text_experts",
    "active_params",
    "total_params",
}


def _cli(args, capsys):
    from icml26.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, [json.loads(x) for x in cap.out.splitlines() if x.strip()], cap.err


def _error_line(code, err) -> str:
    """The one stderr line of an exit-2 refusal."""
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _need_speech():
    from icml26.core.data.speech import ESPEAK_INSTALL, espeak_binary
    from icml26.methods.speech.wer import PSPHINX_INSTALL, pocketsphinx_available

    need(lambda: espeak_binary() is not None, f"needs espeak-ng: {ESPEAK_INSTALL}")
    need(pocketsphinx_available, f"needs pocketsphinx: {PSPHINX_INSTALL}")
    need_debian("wordnet-base")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    _need_speech()
    out = tmp_path_factory.mktemp("mamoe") / "train"
    r = subprocess.run(
        [sys.executable, "-m", "icml26", "mamoe", "train", "--recipe", TINY, "-q", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3000,
    )
    assert r.returncode == 0, r.stderr
    return out, [json.loads(x) for x in r.stdout.splitlines()]


def test_tiny_train_record_contract(tiny_run):
    out, recs = tiny_run
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [r for r in recs if r["kind"] == "result"]
    assert {(r["variant"], r["task"]) for r in res} == {
        (v, t) for v in ("mamoe", "moe", "mamoe-noshared", "dense") for t in ("asr", "tts")
    }
    for r in res:
        assert FIELDS <= set(r), FIELDS - set(r)
        assert 0 <= r["wer"] and r["text_perplexity"] > 1 and r["active_params"] <= r["total_params"]
    by = {(r["variant"], r["task"]): r for r in res}
    # the modality mask: MAMoE variants never send a token to the other modality's experts; the plain MoE does
    for v in ("mamoe", "mamoe-noshared"):
        assert (
            by[(v, "asr")]["routing_text_to_speech_experts"] == 0.0
            and by[(v, "asr")]["routing_speech_to_text_experts"] == 0.0
        )
    assert (
        by[("moe", "asr")]["routing_text_to_speech_experts"] + by[("moe", "asr")]["routing_speech_to_text_experts"] > 0
    )
    assert by[("dense", "asr")]["routing_text_to_speech_experts"] is None
    # equal active parameters across the MoE variants; upcycle_init equal: step 0 is the dense model
    assert (
        by[("mamoe", "asr")]["active_params"]
        == by[("moe", "asr")]["active_params"]
        == by[("mamoe-noshared", "asr")]["active_params"]
    )
    for v in ("mamoe", "moe", "mamoe-noshared", "dense"):
        assert by[(v, "asr")]["text_perplexity_init"] == pytest.approx(
            by[(v, "asr")]["text_perplexity_dense"], rel=1e-4
        )
    steps = [r for r in recs if r["kind"] == "step" and r.get("variant") == "mamoe"]
    assert [s["step"] for s in steps] == [3, 6]
    assert all(
        (out / "checkpoints" / f"{v}.safetensors").is_file() for v in ("mamoe", "moe", "mamoe-noshared", "dense")
    )


def test_eval_of_the_checkpoints_reproduces_train(tiny_run, tmp_path, capsys):
    out, recs = tiny_run
    code, ev, err = _cli(["mamoe", "eval", "--run", str(out), "--variant", "mamoe", "--stage", "asr", "-q"], capsys)
    assert code == 0, err
    got = [r for r in ev if r["kind"] == "result"]
    want = [r for r in recs if r["kind"] == "result" and r["variant"] == "mamoe" and r["task"] == "asr"][0]
    assert len(got) == 1
    assert got[0]["wer"] == want["wer"] and got[0]["text_perplexity"] == pytest.approx(
        want["text_perplexity"], rel=1e-5
    )


def test_bad_stage_exits_2(capsys, tmp_path):
    code, _, err = _cli(["mamoe", "train", "--stage", "asr,vc", "--recipe", TINY, "--out", str(tmp_path / "r")], capsys)
    line = _error_line(code, err)
    assert "vc" in line and "asr, tts" in line, line
    assert not (tmp_path / "r").exists()
    code, _, err = _cli(["mamoe", "train", "--recipe", TINY, "--set", "variants=[mamoe,switch]"], capsys)
    assert "switch" in _error_line(code, err)


def test_missing_espeak_exits_2_with_the_install_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_CACHE_MAMOE_UNUSED", "1")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    from icml26.core.data import speech as S

    S.espeak_voices.cache_clear()
    # a setting no cached corpus has, so the run must synthesize
    code, _, err = _cli(
        ["mamoe", "train", "--recipe", TINY, "--set", "num_units=31", "--out", str(tmp_path / "r")], capsys
    )
    assert "apt-get install -y espeak-ng" in _error_line(code, err)
    assert not (tmp_path / "r").exists()
    code, _, err = _cli(["mamoe", "prepare", "--recipe", TINY], capsys)
    assert "apt-get install -y espeak-ng" in _error_line(code, err)


def test_missing_pocketsphinx_exits_2_with_the_install_command(capsys, monkeypatch, tmp_path):
    from icml26.methods.speech import wer as W

    monkeypatch.setattr(W, "pocketsphinx_available", lambda: False)
    code, _, err = _cli(["mamoe", "train", "--recipe", TINY, "--out", str(tmp_path / "r")], capsys)
    assert "pip install 'pocketsphinx==5.1.1'" in _error_line(code, err)


def test_eval_bad_run_folder_exits_2(capsys, tmp_path):
    code, _, err = _cli(["mamoe", "eval", "--run", str(tmp_path)], capsys)
    assert "config.yaml" in _error_line(code, err)
