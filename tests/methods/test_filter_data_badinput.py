"""filter-data score/select refuse an --output (or --log) that is one of their inputs (exit 2,
input untouched): the atomic rename would otherwise replace the input with the selection."""

import json

from typer.testing import CliRunner

from icml26.cli import app


def _docs(path, n=20):
    path.write_text("".join(json.dumps({"text": f"doc {i}", "metadata": {"quality_score": i / n}}) + "\n" for i in range(n)))
    return path.read_bytes()


def _cli(*args):
    return CliRunner().invoke(app, ["filter-data", *args])


def test_select_output_same_as_input_is_refused(tmp_path):
    src = tmp_path / "same.jsonl"
    before = _docs(src)
    r = _cli("select", "--top", "0.3", str(src), "--output", str(src), "-q")
    assert r.exit_code == 2, r.output
    assert "would overwrite the input" in r.output and "--output" in r.output
    assert src.read_bytes() == before


def test_select_output_same_file_by_another_spelling_and_log(tmp_path):
    src = tmp_path / "d.jsonl"
    before = _docs(src)
    (tmp_path / "sub").mkdir()
    other = tmp_path / "sub" / ".." / "d.jsonl"
    r = _cli("select", "--threshold", "0.5", str(src), "--output", str(other), "-q")
    assert r.exit_code == 2 and "would overwrite the input" in r.output
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    r = _cli("select", "--threshold", "0.5", str(src), "--output", str(link), "-q")
    assert r.exit_code == 2 and "would overwrite the input" in r.output
    r = _cli("select", "--threshold", "0.5", str(src), "--output", str(tmp_path / "kept.jsonl"), "--log", str(src), "-q")
    assert r.exit_code == 2 and "--log" in r.output
    assert src.read_bytes() == before


def test_log_same_as_output_is_refused(tmp_path):
    src = tmp_path / "d.jsonl"
    _docs(src)
    out = tmp_path / "kept.jsonl"
    out.write_text("earlier selection\n")
    r = _cli("select", "--top", "0.3", str(src), "--output", str(out), "--log", str(out), "-q")
    assert r.exit_code == 2, r.output
    assert "--log" in r.output and "would overwrite the output" in r.output
    assert out.read_text() == "earlier selection\n"  # nothing written
    (tmp_path / "model").mkdir()
    r = _cli("score", "--model", str(tmp_path / "model"), str(src), "--output", str(out), "--log", str(out), "-q")
    assert r.exit_code == 2 and "would overwrite the output" in r.output
    assert out.read_text() == "earlier selection\n"


def test_select_to_another_file_still_works(tmp_path):
    src = tmp_path / "d.jsonl"
    _docs(src)
    out = tmp_path / "kept.jsonl"
    r = _cli("select", "--top", "0.3", str(src), "--output", str(out), "-q")
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 6


def test_score_output_same_as_input_is_refused(tmp_path):
    src = tmp_path / "d.jsonl"
    before = _docs(src)
    (tmp_path / "model").mkdir()  # refused before the model is read
    r = _cli("score", "--model", str(tmp_path / "model"), str(src), "--output", str(src), "-q")
    assert r.exit_code == 2 and "would overwrite the input" in r.output
    assert src.read_bytes() == before


def test_score_refuses_to_overwrite_its_model(tmp_path):
    # --model given as the train --out folder: its model.safetensors is protected too
    src = tmp_path / "d.jsonl"
    _docs(src)
    (tmp_path / "m").mkdir()
    mf = tmp_path / "m" / "model.safetensors"
    mf.write_bytes(b"the trained model")
    for flag in ("--output", "--log"):
        for model in (str(tmp_path / "m"), str(mf)):
            r = _cli("score", "--model", model, str(src), flag, str(mf), "-q")
            assert r.exit_code == 2, (flag, model, r.output)
            assert flag in r.output and "would overwrite the model" in r.output
    assert mf.read_bytes() == b"the trained model"


def test_select_output_directory_or_empty_and_nan_threshold(tmp_path):
    src = tmp_path / "d.jsonl"
    _docs(src)
    r = _cli("select", "--top", "0.5", str(src), "--output", str(tmp_path), "-q")
    assert r.exit_code == 2 and "is a directory" in r.output
    r = _cli("select", "--top", "0.5", str(src), "--output", "", "-q")
    assert r.exit_code == 2 and "--output is empty" in r.output
    r = _cli("select", "--threshold", "nan", str(src), "-q")
    assert r.exit_code == 2 and "--threshold is nan" in r.output


def test_train_refuses_the_same_file_as_hq_and_pool(tmp_path):
    src = tmp_path / "d.jsonl"
    _docs(src)
    r = _cli("train", "--hq", str(src), "--pool", str(src), "--out", str(tmp_path / "m"), "-q")
    assert r.exit_code == 2 and "--hq and --pool are the same file" in r.output
    assert not (tmp_path / "m").exists()


def test_train_set_list_works_without_the_required_options():
    for word in ("list", "help"):
        r = _cli("train", "--set", word)
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        assert lines[0].startswith("filter-data train: settings for a recipe's config")
        rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:]}
        assert rows["classifier"] == ["str", "'ngram'"]
        assert rows["n_features"] == ["int", "262144"]
        assert rows["val_fraction"] == ["float", "0.2"]


def test_train_missing_hq_pool_is_one_line_exit_2(tmp_path):
    r = _cli("train", "--out", str(tmp_path / "m"))
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == ["icml26: error: filter-data train: missing required options --hq FILE and --pool FILE"]
    r = _cli("train", "--hq", "a.jsonl", "--out", str(tmp_path / "m"))
    assert r.exit_code == 2 and r.stderr.strip() == "icml26: error: filter-data train: missing required option --pool FILE"
    assert not (tmp_path / "m").exists()
