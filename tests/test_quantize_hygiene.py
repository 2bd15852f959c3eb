"""``icml26 quantize``: the records say which text each stage trained on, and the summary says when
an FPTQuant variant's ratio to the baselines includes end-to-end training on calibration text that no
baseline in the run had (the default run: fp, rtn, fptquant-merged). Config level, no model."""

from icml26.methods.quantization import fptquant as m
from icml26.methods.quantization.prepare import calibration_use, stages


def test_stages_name_their_data():
    st = stages("fptquant-merged", m.Config())
    assert st[0].startswith("local(steps=200") and st[0].endswith("data=none)")  # AIMET's local loss: weights only
    assert st[1].startswith("e2e(steps=8") and st[1].endswith("data=calibration text)")
    assert stages("rtn", m.Config()) == []


def test_calibration_use_lists_what_read_the_calibration_text():
    cfg = m.Config()
    assert calibration_use("rtn", cfg, abits=8, wbits=4) == []  # dynamic per-token activations: no text
    assert calibration_use("gptq", cfg, abits=16, wbits=4) == ["gptq hessians"]
    assert calibration_use("fptquant-merged", cfg, abits=16, wbits=4) == ["e2e KL training (8 steps x 256 tokens)"]
    assert calibration_use("fptquant-merged", m.Config(e2e_steps=0), abits=16, wbits=4) == []
    per_tensor = m.Config(act_granularity="per-tensor")
    assert calibration_use("rtn", per_tensor, abits=8, wbits=4) == ["static activation ranges"]


def _rec(method, ppl, cfg):
    return {
        "kind": "result",
        "method": method,
        "setting": "W4A16",
        "perplexity": ppl,
        "calibration_use": calibration_use(method, cfg, abits=16, wbits=4),
    }


def test_summary_flags_a_comparison_where_only_fptquant_trained_on_calibration_text():
    cfg = m.Config(settings=("W4A16",))
    kw = {"fp_ppl": 6.8, "evalc": [], "saved": None, "t0": 0.0, "est": 1.0, "c0": 0.0, "est_cpu": 1.0}
    rs = [_rec("rtn", 13.2, cfg), _rec("fptquant-merged", 11.9, cfg)]
    s = m.summary(cfg, rs, [], ["W4A16"], **kw)
    assert s["fptquant-merged_vs_best_baseline_W4A16"] == round(11.9 / 13.2, 4)
    assert len(s["unequal_calibration"]) == 1 and "fptquant-merged W4A16" in s["unequal_calibration"][0]
    s = m.summary(cfg, rs + [_rec("gptq", 12.5, cfg)], [], ["W4A16"], **kw)  # a calibration-using baseline
    assert "unequal_calibration" not in s and s["fptquant-merged_vs_best_baseline_W4A16"] == round(11.9 / 12.5, 4)
    s = m.summary(
        m.Config(e2e_steps=0),
        [_rec("rtn", 13.2, cfg), _rec("fptquant-merged", 14.0, m.Config(e2e_steps=0))],
        [],
        ["W4A16"],
        **kw,
    )
    assert "unequal_calibration" not in s  # local stage only: data-free, like RTN
