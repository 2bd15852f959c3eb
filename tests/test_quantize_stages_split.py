"""``icml26 quantize``: results are named for the training stages that ran, and the validation split.

- an FPTQuant variant's name means local + end-to-end training; a run with ``e2e_steps=0`` gives
  ``fptquant-merged-local`` (the name ``--method`` also takes), with the same figure either way;
  two names that would run the same thing are refused;
- ``eval_split=validation`` scores held-out text of the calibration source (after the calibration
  tokens), never the evaluation text; every record says which split was scored;
- the run records its CPU time beside the estimate's.
"""

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.methods.quantization.config import Config, result_name, stage_steps
from tests.test_quantize_cli import _records, _tiny_args, tiny_folder  # noqa: F401  (module fixture)

runner = CliRunner()


def _results(r) -> dict:
    assert r.exit_code == 0, r.output
    return {(x["method"], x["setting"]): x for x in _records(r.stdout) if x["kind"] == "result"}


def test_names_follow_the_stages():
    assert result_name("fptquant-merged", Config()) == "fptquant-merged"
    assert result_name("fptquant-merged", Config(e2e_steps=0)) == "fptquant-merged-local"
    assert result_name("fptquant", Config(local_steps=0)) == "fptquant-e2e-only"
    assert result_name("fptquant-merged-local", Config(local_steps=0)) == "fptquant-merged-untrained"
    assert stage_steps("fptquant-merged-local", Config()) == (200, 0)
    assert result_name("rtn", Config(e2e_steps=0)) == "rtn"
    with pytest.raises(ValueError, match="would both run as fptquant-merged-local"):
        Config(methods=("fptquant-merged", "fptquant-merged-local"), e2e_steps=0)


def test_e2e_steps_0_is_named_local_and_equals_the_local_method(tiny_folder):
    a = _results(
        runner.invoke(app, _tiny_args(tiny_folder, "--method", "fptquant-merged", "--set", "e2e_steps=0", "-q"))
    )
    b = _results(runner.invoke(app, _tiny_args(tiny_folder, "--method", "fptquant-merged,fptquant-merged-local", "-q")))
    assert {m for m, _ in a} == {"fptquant-merged-local"}
    assert {m for m, _ in b} == {"fptquant-merged", "fptquant-merged-local"}
    for st in ("W4A16", "W4A8"):
        loc = b[("fptquant-merged-local", st)]
        assert len(loc["stages"]) == 1 and loc["stages"][0].startswith("local(steps=3")
        assert loc["variant"] == "fptquant-merged" and "e2e_kl_last" not in loc and loc["calibration_use"] == []
        full = b[("fptquant-merged", st)]
        assert [s.split("(")[0] for s in full["stages"]] == ["local", "e2e"] and full["e2e_kl_last"] is not None
        assert a[("fptquant-merged-local", st)]["perplexity"] == loc["perplexity"]  # the same run, either way
        assert a[("fptquant-merged-local", st)]["stages"] == loc["stages"]


def test_two_names_for_one_run_exit_2(tiny_folder):
    r = runner.invoke(
        app, _tiny_args(tiny_folder, "--method", "fptquant-merged,fptquant-merged-local", "--set", "e2e_steps=0")
    )
    assert r.exit_code == 2 and "would both run as fptquant-merged-local" in r.output and '"kind"' not in r.stdout


def test_validation_split_scores_calibration_text_after_the_calibration_tokens(tiny_folder, tmp_path):
    val = ["--method", "fp,rtn", "--setting", "W4A16", "--set", "eval_split=validation", "-q"]
    r = runner.invoke(app, _tiny_args(tiny_folder, *val, fpt=False))
    assert r.exit_code == 0, r.output
    recs = _records(r.stdout)
    data = next(x for x in recs if x.get("stage") == "data")
    assert data["eval_split"] == "validation" and data["text"].startswith("validation = ")
    assert data["calib_validation_shared_lines"] == 0 and data["validation_eval_shared_lines"] == 0
    res = {(x["method"], x["setting"]): x for x in recs if x["kind"] == "result"}
    assert all(x["eval_split"] == "validation" for x in res.values()) and recs[-1]["eval_split"] == "validation"
    # the evaluation text is not what is scored: another evaluation file gives the same validation figures
    other = tmp_path / "other.txt"
    other.write_text("the value of the list is a string " * 20, encoding="utf-8")
    args = _tiny_args(tiny_folder, *val, fpt=False)
    args[args.index(str(tiny_folder / "eval.txt"))] = str(other)
    res2 = _results(runner.invoke(app, args))
    assert res2[("fp", "FP32")]["perplexity"] == res[("fp", "FP32")]["perplexity"]
    assert res2[("rtn", "W4A16")]["perplexity"] == res[("rtn", "W4A16")]["perplexity"]
    # ... while the test split scores the evaluation text (a different figure)
    test = _results(runner.invoke(app, _tiny_args(tiny_folder, "--method", "fp", "-q", fpt=False)))
    assert test[("fp", "FP32")]["perplexity"] != res[("fp", "FP32")]["perplexity"]
    assert test[("fp", "FP32")]["eval_split"] == "test"


def test_validation_needs_calibration_and_validation_tokens_in_the_file(tiny_folder):
    r = runner.invoke(
        app,
        _tiny_args(
            tiny_folder, "--method", "fp", "--set", "eval_split=validation", "--set", "calib_tokens=672", fpt=False
        ),
    )
    assert r.exit_code == 2 and "eval_split=validation" in r.output and "736 needed" in r.output, r.output


def test_split_after_starts_at_the_next_document():
    import torch

    from icml26.methods.quantization.textdata import split_after

    class Tok:  # one token per character
        def __call__(self, s, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in s]}

    docs = ["aaaaaaaa", "bbbbbbbb", "cccccccc", "dddddddd"]  # 10 tokens each with "\n\n"
    first, second = split_after(Tok(), docs, 15, 12)
    assert first.tolist() == [ord(c) for c in "aaaaaaaa\n\nbbbbb"]
    assert second.tolist() == [ord(c) for c in "cccccccc\n\ndd"]  # doc b's tail is in neither
    _, second = split_after(Tok(), docs, 15, 10, skip=lambda d: d.startswith("c"))  # a document left out
    assert second.tolist() == [ord(c) for c in "dddddddd\n\n"]
    one, two = split_after(Tok(), ["abcdefghij"], 4, 3)
    assert torch.equal(one, torch.tensor([ord(c) for c in "abcd"])) and two.tolist() == [ord(c) for c in "efg"]
    with pytest.raises(ValueError, match="validation tokens after them"):
        split_after(Tok(), docs, 35, 10)


def test_one_calibration_file_leaves_out_the_lines_it_shares_with_the_evaluation_text():
    """With a single --calib-text file the validation side is the rest of that file: a line of it
    (>= 40 characters) found in the evaluation text is left out, as a shared document is for a corpus."""
    from icml26.methods.quantization.textdata import split_after

    class Tok:  # one token per character
        def __call__(self, s, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in s]}

        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    shared = "x" * 45
    text = "c" * 10 + "\n" + shared + "\n" + "v" * 50
    test = "eval text\n" + shared + "\nmore"
    hits = []

    def skip_line(ln):
        hit = len(ln.strip()) >= 40 and ln.strip() in test
        hits.extend([ln] if hit else [])
        return hit

    first, second = split_after(Tok(), [text], 11, 30, skip_line=skip_line)
    assert Tok().decode(first.tolist()) == "c" * 10 + "\n"
    assert Tok().decode(second.tolist()) == "v" * 30 and hits == [shared]  # the shared line is not scored
    _, unfiltered = split_after(Tok(), [text], 11, 30)
    assert Tok().decode(unfiltered.tolist()) == shared[:30]
