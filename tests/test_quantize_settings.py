"""``icml26 quantize``: every setting given is honoured or refused, and the records say what ran.

- a ``--set`` field that none of the selected methods reads (e.g. ``fpt_down_hadamard`` with
  ``--method quarot``) exits 2 naming the method, before any record; a recipe's such field is
  listed in the config record (``unused_settings``);
- each result lists the transforms applied and whether the embeddings stay tied;
  ``weight_quant`` / ``clip_search`` say whether the MSE clip search ran;
- ``--eval-text`` alone calibrates on the built-in corpus' calibration documents (data record);
- the default run is FP, RTN and fptquant-merged at the settings ``--bits`` implies, and exports
  fptquant-merged with ``--out`` in a format transformers loads; ``--method all`` is the full
  comparison; an estimate comes first; a setting's figure does not depend on the other settings.
"""

import json

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.quantization import fptquant as m
from tests.test_quantize_cli import FPT_SETS, TINY_SETS, _records, tiny_folder  # noqa: F401  (module fixture)

runner = CliRunner()


def _args(folder, *extra, eval_only=False, fpt=True):
    args = ["quantize", "--model", str(folder), "--eval-text", str(folder / "eval.txt")]
    if not eval_only:
        args += ["--calib-text", str(folder / "calib.txt")]
    for s in TINY_SETS + (FPT_SETS if fpt else []):
        args += ["--set", s]
    return args + list(extra)


# ----------------------------------------------------------------------------- config level (no model)
def test_defaults_are_fp_rtn_fptquant_merged_at_the_settings_bits_implies():
    c = m.Config()
    assert c.methods == ("fp", "rtn", "fptquant-merged") and c.settings == ("W4A16", "W4A8")
    assert m.Config(bits=4).settings == ("W4A16", "W4A8") and m.Config(bits=8).settings == ("W8A8",)
    with pytest.raises(ValueError, match="only 4 and 8"):
        m.Config(bits=3)  # no implied settings: --bits 3 alone is bad input, as before
    assert m.Config(bits=3, settings=("W3A16",)).settings == ("W3A16",)
    full = m.Config(methods=("all",))
    assert full.methods == m.METHODS and full.settings == m.STANDARD_SETTINGS
    assert m.Config(methods=("all",), bits=4).active_settings() == ["W4A16", "W4A8", "W4A4", "W4A4KV4"]
    assert m.Config(methods=("fp", "rtn"), settings=("all",)).settings == m.STANDARD_SETTINGS
    assert m.Config(settings=("W4A4",), bits=4).settings == ("W4A4",)  # given settings are kept
    assert m.Config().save_target() == ("fptquant-merged", "W4A16")
    assert m.Config(methods=("fp", "rtn", "fptquant")).save_target() == ("fptquant", "W4A16")
    # the local stage as AIMET's LocalTransformOptimizer runs it: AdamW (weight decay 0.01), 200 steps
    assert (c.local_steps, c.local_lr, c.local_wd) == (200, 1e-2, 0.01)
    assert m.Config(methods=("fp", "quarot")).save_target() == ("quarot", "W4A16")
    with pytest.raises(ValueError, match="stands alone"):
        m.Config(methods=("all", "rtn"))


@pytest.mark.parametrize(
    "methods,field,value,named",
    [
        (("quarot",), "fpt_down_hadamard", False, "fptquant"),
        (("fp", "rtn", "quarot"), "local_steps", 3, "fptquant"),
        (("rtn",), "smoothquant_alpha", 0.7, "smoothquant"),
        (("fptquant",), "gptq_act_order", True, "gptq"),
        (("fp",), "group_size", 64, "quantized methods"),
    ],
)
def test_a_set_field_no_selected_method_reads_is_refused(methods, field, value, named):
    from icml26.core.errors import InputError

    cfg = m.Config(methods=methods, **{field: value})
    with pytest.raises(InputError, match=named) as e:
        m.check_settings(cfg, {field: "--set"})
    assert field in str(e.value) and "\n" not in str(e.value)
    # from a recipe (sized for every method): not an error, listed with the reason
    assert field in m.check_settings(cfg, {field: "recipe r.yaml"})
    # honoured as soon as a method that reads it is selected
    assert (
        m.check_settings(
            m.Config(
                methods=methods + (named.split()[0],) if named != "quantized methods" else ("fp", "rtn"),
                **{field: value},
            ),
            {field: "--set"},
        )
        == {}
    )


def test_a_quantizer_field_no_selected_setting_uses_is_refused():
    from icml26.core.errors import InputError

    with pytest.raises(InputError, match="activations"):
        m.check_settings(m.Config(settings=("W4A16",), a_clip_ratio=0.8), {"a_clip_ratio": "--set"})
    with pytest.raises(InputError, match="kv"):
        m.check_settings(m.Config(settings=("W4A8",), kv_clip_ratio=0.8), {"kv_clip_ratio": "--set"})
    assert m.check_settings(m.Config(settings=("W4A4KV4",), kv_clip_ratio=0.8), {"kv_clip_ratio": "--set"}) == {}


def test_out_needs_the_saved_model_among_the_selected():
    from icml26.core.errors import InputError

    with pytest.raises(InputError, match="save_method fptquant"):
        m.check_settings(m.Config(methods=("fp", "rtn"), save_method="fptquant"), {}, out="o")
    with pytest.raises(InputError, match="save_setting W8A8"):
        m.check_settings(m.Config(save_setting="W8A8"), {}, out="o")
    with pytest.raises(InputError, match="packable|not among"):
        m.check_settings(m.Config(methods=("fp", "gptq")), {}, out="o")
    assert m.check_settings(m.Config(), {}, out="o") == {}


def test_weight_quant_says_whether_the_clip_search_ran():
    assert "no clip search" in m.Config().weight_quant_note(4)
    assert "clip search ran" in m.Config(w_clip_search=True).weight_quant_note(4)
    assert "not quantized" in m.Config(w_clip_search=True).weight_quant_note(16)


# ----------------------------------------------------------------------------- CLI, tiny model
def test_cli_unhonoured_set_exits_2_before_any_record(tiny_folder, tmp_path):
    r = runner.invoke(
        app,
        _args(
            tiny_folder,
            "--method",
            "quarot",
            "--set",
            "fpt_down_hadamard=false",
            "--out",
            str(tmp_path / "o"),
            fpt=False,
        ),
    )
    assert r.exit_code == 2
    assert (
        "fpt_down_hadamard is read by fptquant, fptquant-local, fptquant-e2e-only, fptquant-untrained only" in r.output
    )
    assert "(quarot)" in r.output and "quantize config: fpt_down_hadamard" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not r.stdout.strip().startswith("{") and not (tmp_path / "o").exists()
    # the same sizes from a recipe: the run goes on and the config record lists what it does not use
    rec = tmp_path / "r.yaml"
    rec.write_text("method: quantize\nconfig:\n  local_steps: 3\n  e2e_steps: 1\n", encoding="utf-8")
    r = runner.invoke(app, _args(tiny_folder, "--method", "fp", "-r", str(rec), "-q", fpt=False))
    assert r.exit_code == 0, r.output
    cfg = _records(r.stdout)[0]
    assert (
        set(cfg["unused_settings"]) == {"local_steps", "e2e_steps"}
        and "fptquant" in cfg["unused_settings"]["local_steps"]
    )


def test_records_list_the_transforms_applied(tiny_folder, tmp_path):
    r = runner.invoke(
        app,
        _args(
            tiny_folder,
            "--method",
            "rtn,smoothquant,quarot,fptquant",
            "--setting",
            "W4A8",
            "--set",
            "fpt_down_hadamard=false",
            "--set",
            "fpt_mlp=false",
            "--out",
            str(tmp_path / "o"),
            "--set",
            "save_method=quarot",
            "-q",
        ),
    )
    assert r.exit_code == 0, r.output
    res = {x["method"]: x for x in _records(r.stdout) if x["kind"] == "result"}
    assert res["rtn"]["transforms"] == [] and res["rtn"]["tied_embeddings"] is True
    assert (
        res["smoothquant"]["transforms"] == ["smoothquant_scales(alpha=0.5)"]
        and res["smoothquant"]["tied_embeddings"] is True
    )
    assert res["quarot"]["transforms"] == [
        "untie_embeddings",
        "fuse_norms",
        "residual_hadamard",
        "value_hadamard",
        "online_down_hadamard",
    ]  # QuaRot keeps its down-projection Hadamard
    assert res["quarot"]["tied_embeddings"] is False
    f = res["fptquant"]["transforms"]
    assert "online_down_hadamard" not in f and "mlp_scaler" not in f  # fpt_down_hadamard=false, fpt_mlp=false honoured
    assert {"residual_hadamard", "qk_transform", "dyn_scale"} <= set(f) and res["fptquant"]["tied_embeddings"] is False
    for x in res.values():
        assert x["clip_search"] is False and "no clip search" in x["weight_quant"]
    # the saved model's quantization_config agrees with the record of what ran
    qc = json.loads((tmp_path / "o" / "model" / "config.json").read_text())["quantization_config"]
    assert (
        qc["method"] == "quarot"
        and qc["online_down_hadamard"] is True
        and qc["transforms"] == res["quarot"]["transforms"]
    )


def test_cli_eval_text_alone_calibrates_on_the_builtin_corpus(tiny_folder):
    from tests.conftest import need_debian

    need_debian("python3.11-doc")
    r = runner.invoke(app, _args(tiny_folder, "--method", "fp", "-q", eval_only=True, fpt=False))
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    data = next(x for x in recs if x.get("stage") == "data")
    assert data["calib_source"].startswith("python-docs") and data["eval_source"] == str(tiny_folder / "eval.txt")
    assert "calibration documents" in data["text"] and str(tiny_folder / "eval.txt") in data["text"]
    assert data["calib_eval_shared_lines"] == 0  # Python docs vs the tiny word list: disjoint
    assert recs[0]["calib_text"] is None and recs[0]["eval_text"] == str(tiny_folder / "eval.txt")


def test_default_run_and_estimate(tiny_folder, tmp_path):
    r = runner.invoke(app, _args(tiny_folder, "--bits", "4", "--out", str(tmp_path / "o"), "-q"))
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    assert recs[0]["methods"] == ["fp", "rtn", "fptquant-merged"] and recs[0]["settings"] == ["W4A16", "W4A8"]
    kinds = [(x["kind"], x.get("stage")) for x in recs]
    assert kinds.index(("step", "estimate")) < kinds.index(("result", None))  # the estimate comes before any result
    est = next(x for x in recs if x.get("stage") == "estimate")
    assert est["estimated_s"] > 0 and est["runs"] == 4 and est["fp_tokens_per_s"] > 0
    assert {(x["method"], x["setting"]) for x in recs if x["kind"] == "result"} == {
        ("fp", "FP32"),
        ("rtn", "W4A16"),
        ("rtn", "W4A8"),
        ("fptquant-merged", "W4A16"),
        ("fptquant-merged", "W4A8"),
    }
    for x in recs:
        if x["kind"] == "result" and x["method"] != "fp":  # every result says its grid and what ran
            assert x["group_size"] == 0 and "transforms" in x and "stages" in x
    f = next(x for x in recs if x.get("method") == "fptquant-merged")
    assert f["stages"][0].startswith("local(steps=3") and f["stages"][1].startswith("e2e(steps=1")
    assert set(f["transforms"]) == {"qk_transform", "value_transform", "mlp_scaler"}
    assert f["calibration_use"] == ["e2e KL training (1 steps x 32 tokens)"] and f["stages"][1].endswith("text)")
    assert all(x["calibration_use"] == [] for x in recs if x.get("method") == "rtn")  # RTN saw no text
    assert len(recs[-1]["unequal_calibration"]) == 2  # the summary says so, at both settings
    saved = next(x for x in recs if x.get("stage") == "saved")
    assert saved["format"] == "compressed-tensors"
    assert (saved["method"], saved["setting"]) == ("fptquant-merged", "W4A16") and (
        tmp_path / "o/model/model.safetensors"
    ).is_file()
    assert recs[-1]["estimated_s"] == est["estimated_s"] and recs[-1]["time_s"] > 0
