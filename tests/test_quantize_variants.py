"""``icml26 quantize`` on a tiny model: a setting's figure does not depend on which other settings
share the run; architectures the transforms refuse are skipped with a warning, a ``skipped``
record and the summary's list; a model with q/k/v biases (Qwen2) gets FPTQuant; the exported
fptquant-merged model loads with ``transformers.AutoModelForCausalLM`` alone (no icml26 import,
in a separate process) and evaluates to the recorded perplexity."""

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from tests.methods.test_quant_arch import tiny
from tests.test_quantize_cli import FPT_SETS, TINY_SETS, _records, tiny_folder  # noqa: F401  (module fixture)

runner = CliRunner()


def _args(folder, text_folder, *extra):
    args = ["quantize", "--model", str(folder)]
    args += ["--calib-text", str(text_folder / "calib.txt"), "--eval-text", str(text_folder / "eval.txt")]
    for s in TINY_SETS + FPT_SETS:
        args += ["--set", s]
    return args + list(extra)


def _folder_like(tiny_folder, tmp_path, family):
    """A tiny random ``family`` model saved with the tiny folder's tokenizer (vocab 64 -> 96 rows)."""
    d = tmp_path / family
    d.mkdir()
    tiny(family).save_pretrained(str(d))
    for f in tiny_folder.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, d / f.name)
    return d


def _ppl(recs, method, setting):
    return next(
        x["perplexity"] for x in recs if x["kind"] == "result" and (x["method"], x["setting"]) == (method, setting)
    )


def test_same_seed_same_figure_whatever_settings_share_the_run(tiny_folder):
    meth = ["--method", "rtn,fptquant,fptquant-merged", "-q"]
    a = _records(runner.invoke(app, _args(tiny_folder, tiny_folder, *meth, "--setting", "W4A8")).stdout)
    b = _records(runner.invoke(app, _args(tiny_folder, tiny_folder, *meth, "--setting", "W4A4,W4A16,W4A8")).stdout)
    for method in ("rtn", "fptquant", "fptquant-merged"):
        assert _ppl(a, method, "W4A8") == _ppl(b, method, "W4A8"), method


def test_refused_architecture_is_skipped_with_a_warning(tiny_folder, tmp_path):
    d = _folder_like(tiny_folder, tmp_path, "qwen3")
    r = runner.invoke(app, _args(d, tiny_folder, "--setting", "W4A16", "-q"))
    assert r.exit_code == 0, r.output
    assert "warning: fptquant-merged skipped: model_type qwen3: q/k RMSNorms" in r.stderr
    recs = _records(r.stdout)
    sk = [x for x in recs if x["kind"] == "skipped"]
    assert [x["method"] for x in sk] == ["fptquant-merged"] and "q/k RMSNorms" in sk[0]["reason"]
    assert recs[-1]["skipped"] == [{"method": "fptquant-merged", "reason": sk[0]["reason"]}]
    assert {x["method"] for x in recs if x["kind"] == "result"} == {"fp", "rtn"}


def test_qwen2_biases_get_fptquant(tiny_folder, tmp_path):
    d = _folder_like(tiny_folder, tmp_path, "qwen2")
    r = runner.invoke(app, _args(d, tiny_folder, "--setting", "W8A16", "--method", "fp,fptquant,fptquant-merged", "-q"))
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    assert not [x for x in recs if x["kind"] == "skipped"]
    fp = _ppl(recs, "fp", "FP32")
    for method in ("fptquant", "fptquant-merged"):
        rec = next(x for x in recs if x.get("method") == method)
        assert rec["fp_drift"] < 1e-4  # biases transformed with their rows: the FP function is kept
        assert abs(rec["perplexity"] - fp) / fp < 0.05  # 8-bit weights: close to FP


ROUND_TRIP = r"""
import json, math, sys, torch
from transformers import AutoModelForCausalLM
assert not any(k.startswith("icml26") for k in sys.modules)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True).eval()
chunks = json.load(open(sys.argv[2]))
nll = n = 0.0
with torch.no_grad():
    for c in chunks:
        ids = torch.tensor([c])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        nll -= logp.gather(-1, ids[0, 1:, None]).sum().item()
        n += len(c) - 1
qc = model.config.quantization_config
qm = qc["quant_method"] if isinstance(qc, dict) else qc.quant_method
print(json.dumps({"perplexity": math.exp(nll / n), "quant_method": str(qm)}))
"""


def test_export_loads_in_transformers_alone_with_the_recorded_perplexity(tiny_folder, tmp_path):
    pytest.importorskip("compressed_tensors")
    from icml26.methods.quantization.config import Config
    from icml26.methods.quantization.textdata import load_text

    out = tmp_path / "o"
    r = runner.invoke(app, _args(tiny_folder, tiny_folder, "--setting", "W4A16", "--out", str(out), "-q"))
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    saved = next(x for x in recs if x.get("stage") == "saved")
    assert saved["method"] == "fptquant-merged" and saved["format"] == "compressed-tensors"
    qc = json.loads((out / "model" / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
    # the evaluation chunks icml26 scored, written for a process that imports only transformers
    from transformers import AutoTokenizer

    texts = {"calib_text": str(tiny_folder / "calib.txt"), "eval_text": str(tiny_folder / "eval.txt")}
    cfg = Config(seq_len=32, calib_tokens=64, eval_tokens=64, **texts)
    _, evalc, _, _ = load_text(cfg, AutoTokenizer.from_pretrained(str(tiny_folder)))
    (tmp_path / "chunks.json").write_text(json.dumps([c[0].tolist() for c in evalc]))
    (tmp_path / "rt.py").write_text(ROUND_TRIP)
    p = subprocess.run(
        [sys.executable, str(tmp_path / "rt.py"), str(out / "model"), str(tmp_path / "chunks.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert "compressed" in got["quant_method"].lower()  # str of the enum: QuantizationMethod.COMPRESSED_TENSORS
    assert abs(got["perplexity"] - saved["perplexity"]) / saved["perplexity"] < 0.01
