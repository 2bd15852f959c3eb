"""filter-data score/select refuse an --output (or --log) that is one of their inputs (exit 2,
input untouched): the atomic rename would otherwise replace the input with the selection."""

import json

import pytest

from typer.testing import CliRunner

from icml26.cli import app


def _docs(path, n=20):
    path.write_text(
        "".join(json.dumps({"text": f"doc {i}", "metadata": {"quality_score": i / n}}) + "\n" for i in range(n))
    )
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
    r = _cli(
        "select", "--threshold", "0.5", str(src), "--output", str(tmp_path / "kept.jsonl"), "--log", str(src), "-q"
    )
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


def _rows(lines: list[str]) -> dict:
    """``  name  type = default`` rows of `--set list` (help lines below them are indented deeper)."""
    out = {}
    for ln in lines[1:]:
        if ln.startswith("  ") and not ln.startswith("   ") and " = " in ln:
            name, rest = ln.split(None, 1)
            typ, val = rest.split(" = ", 1)
            out[name] = [typ.strip(), val.strip()]
    return out


def test_train_set_list_works_without_the_required_options():
    for word in ("list", "help"):
        r = _cli("train", "--set", word)
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        assert lines[0].startswith("filter-data train: settings (a recipe's config")
        rows = _rows(lines)
        assert rows["classifier"] == ["ngram|embed|dsir", "'ngram'"]
        assert rows["n_features"] == ["int", "262144"]
        assert rows["val_fraction"] == ["float", "0.2"]


def test_train_missing_hq_pool_is_one_line_exit_2(tmp_path):
    r = _cli("train", "--out", str(tmp_path / "m"))
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "icml26: error: filter-data train: missing required options --hq FILE and --pool FILE"
    ]
    r = _cli("train", "--hq", "a.jsonl", "--out", str(tmp_path / "m"))
    assert (
        r.exit_code == 2 and r.stderr.strip() == "icml26: error: filter-data train: missing required option --pool FILE"
    )
    assert not (tmp_path / "m").exists()


# Every filter-data subcommand that takes --set: `--set list`/`help` needs none of the
# required options; a missing one is one stderr line naming it, exit 2, nothing on stdout.
# (subcommand, the required options as given on the command line, rows of its settings list)
_WITH_SET = {
    "make-corpus": (
        {"--out DIR": ["--out", "{tmp}/corpus"]},
        {"docs_per_source": ["int", "2000"], "pool_heldout_fraction": ["float", "0.2"]},
    ),
    "train": (
        {
            "--hq FILE": ["--hq", "{tmp}/hq.jsonl"],
            "--pool FILE": ["--pool", "{tmp}/pool.jsonl"],
            "--out DIR": ["--out", "{tmp}/m"],
        },
        {"classifier": ["ngram|embed|dsir", "'ngram'"], "n_features": ["int", "262144"]},
    ),
    "analyze": (
        {
            "--model DIR": ["--model", "{tmp}/m"],
            "--hq FILE": ["--hq", "{tmp}/hq.jsonl"],
            "--pool FILE": ["--pool", "{tmp}/pool.jsonl"],
        },
        {"n_deciles": ["int", "10"], "max_docs": ["int", "0"]},
    ),
    "proxy": (
        {"--corpus DIR": ["--corpus", "{tmp}/corpus"], "--model DIR": ["--model", "{tmp}/m"]},
        {
            "experiment": ["selection|conditioning", "'selection'"],
            "tokens": ["int", "400000"],
            "top_fraction": ["float", "0.3"],
        },
    ),
}


def test_every_set_subcommand_is_covered():
    import typer.main

    from icml26.commands.filter_data import filter_app

    group = typer.main.get_command(filter_app)
    assert {"make-corpus", "train", "score", "select", "analyze", "proxy"} <= set(group.commands)
    with_set = {
        name for name, cmd in group.commands.items() if any("--set" in getattr(p, "opts", ()) for p in cmd.params)
    }
    assert with_set == set(_WITH_SET)


@pytest.mark.parametrize("sub", sorted(_WITH_SET))
@pytest.mark.parametrize("word", ["list", "help"])
def test_set_list_works_without_the_required_options(sub, word):
    r = _cli(sub, "--set", word)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"filter-data {sub}: settings (a recipe's config")
    rows = _rows(lines)
    for key, row in _WITH_SET[sub][1].items():
        assert rows[key] == row, (sub, key)


@pytest.mark.parametrize("sub,flag", [(s, f) for s in sorted(_WITH_SET) for f in _WITH_SET[s][0]])
def test_a_missing_required_option_is_one_line_exit_2(sub, flag, tmp_path):
    given = [a.format(tmp=tmp_path) for f, args in _WITH_SET[sub][0].items() if f != flag for a in args]
    before = sorted(tmp_path.iterdir())
    r = _cli(sub, *given, "-q")
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.splitlines() == [f"icml26: error: filter-data {sub}: missing required option {flag}"]
    assert sorted(tmp_path.iterdir()) == before  # nothing written


@pytest.mark.parametrize("sub", sorted(_WITH_SET))
def test_all_required_options_missing_are_named_together(sub):
    flags = list(_WITH_SET[sub][0])
    names = flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " and " + flags[-1]
    r = _cli(sub, "-q")
    assert r.exit_code == 2 and r.stdout == ""
    s = "s" if len(flags) > 1 else ""
    assert r.stderr.splitlines() == [f"icml26: error: filter-data {sub}: missing required option{s} {names}"]


@pytest.mark.parametrize("sub", sorted(_WITH_SET))
def test_help_says_required(sub):
    import typer.main

    from icml26.commands.filter_data import filter_app

    cmd = typer.main.get_command(filter_app).commands[sub]
    by_flag = {o: p for p in cmd.params for o in getattr(p, "opts", ())}
    for flag in _WITH_SET[sub][0]:
        p = by_flag[flag.split()[0]]
        assert p.required is False and p.help.endswith("Required."), (sub, flag, p.help)


@pytest.mark.parametrize(
    "argv,line",
    [
        (["score"], "icml26: error: Missing option '--model' / '-m'."),  # score/select take no --set:
        (["select", "-"], "icml26: error: give exactly one of --top and --threshold"),  # the parser/method checks
    ],
)
def test_score_and_select_missing_options_from_the_console_entry(argv, line, capsys, monkeypatch):
    import io
    import sys

    from icml26.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(SystemExit) as e:
        main(["filter-data", *argv])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [line]


@pytest.mark.parametrize(
    "sub, args, needle",
    [
        ("proxy", ["--set", "tokens=4000000000", "--set", "seeds=10"], "FLOPs of proxy-LM training"),
        ("proxy", ["--set", "n_embd=8192", "--set", "n_head=8"], "~1.6e+16 FLOPs"),
        ("train", ["--set", "max_docs=1e12"], "max_docs=1.0e+12 is over its limit"),
        ("make-corpus", ["--docs-per-source", "100000000"], "docs_per_source=1.0e+08 is over its limit"),
    ],
)
def test_limits_are_checked_before_the_required_options_and_any_output(sub, args, needle, tmp_path):
    """A setting over its limit (alone, or by proxy's FLOPs model) is named first, exit 2, before
    the missing --hq/--corpus are and before --out exists."""
    r = _cli(sub, *args, "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o").exists()


def test_proxy_help_gives_the_unit_the_code_counts_and_the_ranges():
    """The proxy GPT is byte-level: its budgets, context and evaluation sets count bytes, and
    `--set help` says so in the unit; top_fraction and ks show the (0, 1] range they are held to."""
    r = _cli("proxy", "--set", "help")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    help_of = {ln.split()[0]: lines[i + 1] for i, ln in enumerate(lines[:-1]) if ln.startswith("  ") and " = " in ln}
    for key in ("tokens", "budgets_tokens", "eval_tokens", "block_size"):
        assert "unit: bytes" in help_of[key] and "unit: tokens" not in help_of[key], (key, help_of[key])
    for key in ("top_fraction", "ks"):
        assert "range: > 0, <= 1" in help_of[key], (key, help_of[key])


@pytest.mark.parametrize("setting", ["top_fraction=0", "top_fraction=1.5", "ks=1.0,0", "ks=2"])
def test_proxy_fractions_out_of_range_exit_2(setting, tmp_path):
    r = _cli("proxy", "--set", setting, "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert "top_fraction" in r.stderr or "ks" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
