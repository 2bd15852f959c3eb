"""``sample-lfm``: the records say what the sampler ran. The adaptive sampler picks its own
steps, so a given ``steps`` is refused with it (exit 2) and the config / summary records show
``steps: null`` with the solver's tolerances and NFE; coarse-to-fine NFE counts are integers."""

import json

import pytest
import torch

from icml26.methods.lfm import flow
from icml26.methods.lfm.sample import SampleConfig, _sample_latents


def test_adaptive_with_steps_is_refused_and_without_records_none():
    with pytest.raises(ValueError, match="adaptive"):
        SampleConfig(sampler="adaptive", steps=30)
    assert SampleConfig(sampler="adaptive").steps is None
    assert SampleConfig().steps == 60 and SampleConfig(sampler="heun", steps=7).steps == 7


@pytest.mark.parametrize(
    "args", [["--sampler", "adaptive", "--steps", "30"], ["--sampler", "adaptive", "--set", "steps=30"]]
)
def test_cli_adaptive_with_steps_exit_2_naming_the_sampler(tmp_path, args):
    from typer.testing import CliRunner

    from icml26.cli import app

    r = CliRunner().invoke(app, ["sample-lfm", "--fine", str(tmp_path / "none.safetensors"), *args, "-q"])
    assert r.exit_code == 2
    assert "adaptive" in r.output and "steps" in r.output
    assert not r.stdout.strip().startswith("{")  # nothing on stdout before the refusal


def _linear_field(rate):
    return lambda x, t: -rate * x


@pytest.mark.parametrize("sampler,steps", [("euler", 10), ("heun", 10), ("adaptive", None)])
def test_coarse_to_fine_nfe_are_integer_evaluation_counts(sampler, steps):
    cfg = SampleConfig(sampler=sampler, steps=steps, t_split=0.7, num_samples=6, batch_size=4)

    def two(yb):
        return flow.CoarseToFine(_linear_field(1.0), _linear_field(2.0), cfg.t_split)

    x0 = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    _, nfe, extra = _sample_latents(two, x0, None, cfg, c2f=True)
    assert type(nfe) is int and type(extra["nfe_coarse"]) is int and type(extra["nfe_fine"]) is int
    assert extra["nfe_coarse"] + extra["nfe_fine"] == nfe  # shared time grid: one model per evaluation
    if sampler == "euler":
        assert (extra["nfe_coarse"], extra["nfe_fine"]) == (7, 3)
    if sampler == "heun":  # k1 at t_i, k2 at t_{i+1}: t < 0.7 for 7 + 6 evaluations
        assert (extra["nfe_coarse"], extra["nfe_fine"]) == (13, 7)
    if sampler == "adaptive":
        assert extra["nfe_coarse"] > 0 and extra["nfe_fine"] > 0
    # the JSON of the record carries integers, not 7.0
    assert json.dumps(extra).count(".") == 0


@pytest.mark.slow  # trains the tiny models (~40 s on 2 loaded cores)
def test_adaptive_run_records_what_ran(tmp_path_factory):
    from tests.conftest import need_debian
    from tests.test_lfm_cli import TINY_SAMPLE, TINY_TRAIN, _invoke

    need_debian("dataset-fashion-mnist")
    d = tmp_path_factory.mktemp("lfm-adaptive")
    code, _ = _invoke(["train-lfm", "-r", TINY_TRAIN, "-o", str(d / "m"), "-q"])
    assert code == 0
    # the recipe's 10 Euler steps do not apply to the adaptive sampler: refused unless dropped
    code, _ = _invoke(
        ["sample-lfm", "-r", TINY_SAMPLE, "--fine", str(d / "m"), "--sampler", "adaptive", "-n", "8", "-q"]
    )
    assert code == 2
    code, recs = _invoke(
        [
            "sample-lfm",
            "-r",
            TINY_SAMPLE,
            "--fine",
            str(d / "m"),
            "--coarse",
            str(d / "m"),
            "--sampler",
            "adaptive",
            "--set",
            "steps=null",
            "-n",
            "8",
            "--set",
            "bootstrap=0",
            "-q",
        ]
    )
    assert code == 0, recs
    assert recs[0]["kind"] == "config" and recs[0]["sampler"] == "adaptive" and recs[0]["steps"] is None
    summ = recs[-1]
    assert summ["steps"] is None and summ["rtol"] == recs[0]["rtol"] and summ["atol"] == recs[0]["atol"]
    res = [r for r in recs if r["kind"] == "result"]
    assert summ["nfe"] == {r["mode"]: r["nfe"] for r in res}
    for r in res:
        assert type(r["nfe"]) is int and r["nfe"] > 6  # RK45: at least one 6-stage step + the first evaluation
    c2f = next(r for r in res if r["mode"] == "coarse-to-fine")
    assert (
        type(c2f["nfe_coarse"]) is int
        and type(c2f["nfe_fine"]) is int
        and c2f["nfe_coarse"] + c2f["nfe_fine"] == c2f["nfe"]
    )
