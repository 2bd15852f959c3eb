"""Bad input handled by the shared core: one line on stderr, exit code 2, nothing left behind."""

import errno
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26 import cli
from icml26.cli import app
from icml26.core.errors import InputError
from icml26.core.output import prepare_out_dir, stream
from icml26.core.preamble import Run
from icml26.core.recipe import parse_sets, read_yaml, resolve

ROOT = Path(__file__).resolve().parents[2]
TINY_BAI = ROOT / "recipes" / "bai" / "tiny.yaml"
runner = CliRunner()


def _one_line_error(r, *needles):
    assert r.exit_code == 2, (r.output, r.exception)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("icml26: error:"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


@dataclass(frozen=True)
class Cfg:
    budget: int = 10
    std: float = 1.0


# 1. YAML: scientific notation is a float, duplicate keys are refused ----------------------


def test_read_yaml_scientific_notation(tmp_path):
    f = tmp_path / "env.yaml"
    f.write_text("a: 1e-2\nb: 1E5\nc: -3e+4\nd: 1e308\ne: 1.5e3\nf: 2.0\ng: 12\nh: abc\ni: 1e\nj: '1e-2'\n")
    d = read_yaml(f)
    assert d == {
        "a": 0.01,
        "b": 1e5,
        "c": -3e4,
        "d": 1e308,
        "e": 1500.0,
        "f": 2.0,
        "g": 12,
        "h": "abc",
        "i": "1e",
        "j": "1e-2",
    }
    assert all(isinstance(d[k], float) for k in "abcdef") and isinstance(d["g"], int)
    assert parse_sets(["std=1e-2"]) == {"std": 0.01}
    # the process-wide SafeLoader is not changed
    import yaml

    assert yaml.safe_load("x: 1e-2") == {"x": "1e-2"}


def test_bandit_env_scientific_std(tmp_path):
    from icml26.methods.exploration.bandit_env import load_env

    f = tmp_path / "b.yaml"
    f.write_text(
        "name: sci\narms:\n  - {dist: gaussian, mean: 0.5, std: 1e-2}\n  - {dist: gaussian, mean: 0.4, std: 1E2}\n"
    )
    t = load_env(f)
    assert t.variances[0] == pytest.approx(1e-4)


def test_read_yaml_duplicate_key(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("method: bai\nconfig:\n  seeds: 10\n  budget: [50]\n  seeds: 20\n")
    with pytest.raises(InputError, match=r"r\.yaml.*line 5.*duplicate key 'seeds'"):
        read_yaml(f, "recipe")
    # merge keys may still be overridden
    g = tmp_path / "m.yaml"
    g.write_text("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n")
    assert read_yaml(g)["d"] == {"x": 3, "y": 2}


def test_cli_duplicate_key_exits_2(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text(TINY_BAI.read_text() + "  seeds: 5\n")
    r = runner.invoke(app, ["bai", "--recipe", str(f), "-q"])
    err = _one_line_error(r, "duplicate key 'seeds'", "dup.yaml")
    assert r.exit_code == 2 and "not valid YAML" in err


# 2. a run that fails before its first result leaves --out as it was -----------------------


def _one_record_then(rec: dict, exc: Exception):
    yield rec
    raise exc


def _fails_after_one_step():
    return _one_record_then({"kind": "step", "i": 0}, InputError("bad input found inside the run"))


def _ok_run():
    yield {"kind": "result", "x": 1.0}
    yield {"kind": "summary", "n": 1}


def test_stream_failure_removes_created_out_dir(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(InputError, match="inside the run"):
        stream(_fails_after_one_step(), Run("t", out=out), quiet=True)
    assert not out.exists()
    # the same --out works once the input is fixed
    stream(_ok_run(), Run("t", out=out), quiet=True)
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["config", "result", "summary"]


def test_stream_failure_removes_the_parents_it_created(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep.txt").write_text("mine")
    out = tmp_path / "a" / "b" / "c" / "run"  # b, c and run are created by this run
    with pytest.raises(InputError):
        stream(_fails_after_one_step(), Run("t", out=out), quiet=True)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["keep.txt"]
    # the same through prepare_out_dir (train-lfm's way); a parent that gained a file is kept
    prepare_out_dir(out)
    (tmp_path / "a" / "b" / "other.txt").write_text("x")
    with pytest.raises(InputError):
        stream(_fails_after_one_step(), Run("t", out=out, resume=True), quiet=True)
    assert not (tmp_path / "a" / "b" / "c").exists()
    assert (tmp_path / "a" / "b" / "other.txt").read_text() == "x"


def test_stream_failure_keeps_what_existed(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InputError):
        stream(_one_record_then({"kind": "step"}, InputError("bad")), Run("t", out=out), quiet=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"


def test_stream_failure_on_resume_restores_files(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("old config\n")
    (out / "records.jsonl").write_text('{"kind": "result", "x": 0}\n')
    with pytest.raises(InputError):
        stream(_fails_after_one_step(), Run("t", out=out, resume=True), quiet=True)
    assert (out / "config.yaml").read_text() == "old config\n"
    assert (out / "records.jsonl").read_text() == '{"kind": "result", "x": 0}\n'


def test_stream_failure_after_a_result_keeps_the_records(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(InputError):
        stream(_one_record_then({"kind": "result", "x": 1.0}, InputError("late")), Run("t", out=out), quiet=True)
    assert len((out / "records.jsonl").read_text().splitlines()) == 2


def test_stream_failure_after_prepare_out_dir_removes_it(tmp_path, capsys):
    # commands such as train-lfm call prepare_out_dir themselves, then stream(resume=True)
    out = tmp_path / "run"
    prepare_out_dir(out)
    with pytest.raises(InputError):
        stream(_fails_after_one_step(), Run("t", out=out, resume=True), quiet=True)
    assert not out.exists()


def test_stream_failure_keeps_what_the_run_wrote(tmp_path, capsys):
    # a checkpoint written before the error is kept (so is the folder); only config/records go
    out = tmp_path / "run"
    prepare_out_dir(out)
    (out / "ckpt.bin").write_bytes(b"x")
    with pytest.raises(InputError):
        stream(_fails_after_one_step(), Run("t", out=out, resume=True), quiet=True)
    assert (out / "ckpt.bin").read_bytes() == b"x"
    assert not (out / "config.yaml").exists() and not (out / "records.jsonl").exists()


def test_stream_crash_that_is_not_bad_input_keeps_everything(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        stream(
            _one_record_then({"kind": "step", "step": 1}, RuntimeError("out of memory")),
            Run("t", out=out),
            quiet=True,
        )
    assert len((out / "records.jsonl").read_text().splitlines()) == 2 and (out / "config.yaml").is_file()


# 3. an unwritable --out is one line, exit 2 -----------------------------------------------


@pytest.fixture
def read_only_dir(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
    else:  # root writes anywhere: refuse writes under ro/ as a read-only mount would
        real = tempfile.mkstemp

        def mkstemp(*a, dir=None, **k):
            if dir is not None and Path(dir).resolve() == ro.resolve():
                raise OSError(errno.EROFS, "Read-only file system", str(dir))
            return real(*a, dir=dir, **k)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    yield ro
    ro.chmod(0o755)


def test_prepare_out_dir_unwritable(read_only_dir):
    with pytest.raises(InputError, match=r"--out '.*ro': cannot write there"):
        prepare_out_dir(read_only_dir)
    assert list(read_only_dir.iterdir()) == []


def test_cli_read_only_out_exits_2(read_only_dir):
    r = runner.invoke(app, ["bai", "--recipe", str(TINY_BAI), "-q", "--out", str(read_only_dir)])
    _one_line_error(r, str(read_only_dir), "cannot write there")
    assert r.exit_code == 2 and list(read_only_dir.iterdir()) == []


@pytest.mark.parametrize(
    "exc",
    [
        PermissionError(errno.EACCES, "Permission denied", "/some/run/config.yaml"),
        OSError(errno.EROFS, "Read-only file system", "/some/run/records.jsonl"),
        OSError(errno.ENOSPC, "No space left on device", "/some/run/records.jsonl"),
    ],
)
def test_main_maps_write_refusals_to_exit_2(exc, monkeypatch, capsys):
    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(cli, "app", boom)
    monkeypatch.delenv("ICML26_DEBUG", raising=False)
    with pytest.raises(SystemExit) as e:
        cli.main(["bai"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("icml26: error:") and "/some/run/" in err


def test_main_other_os_errors_stay_exit_1(monkeypatch, capsys):
    def boom(*a, **k):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")

    monkeypatch.setattr(cli, "app", boom)
    monkeypatch.delenv("ICML26_DEBUG", raising=False)
    with pytest.raises(SystemExit) as e:
        cli.main(["bai"])
    assert e.value.code == 1


# 4. --out "" ------------------------------------------------------------------------------


def test_cli_empty_out_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["bai", "--recipe", str(TINY_BAI), "-q", "--out", ""])
    _one_line_error(r, "--out is empty")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="--out is empty"):
        prepare_out_dir("")


# 5. --set values are checked even when a typed option overrides them ---------------------


def test_resolve_checks_overridden_set_and_recipe_values(tmp_path):
    with pytest.raises(InputError, match=r"--set.*budget: expected an integer, got 'abc'"):
        resolve(Cfg, "t", None, ["budget=abc"], budget=100)
    r = tmp_path / "r.yaml"
    r.write_text("method: t\nconfig:\n  std: lots\n")
    with pytest.raises(InputError, match=r"recipe .*r\.yaml.*std: expected a number"):
        resolve(Cfg, "t", r, ["std=0.5"])
    assert resolve(Cfg, "t", None, ["budget=7", "std=1e-2"], budget=100) == Cfg(budget=100, std=0.01)


def test_cli_set_overridden_by_typed_option_exits_2():
    r = runner.invoke(app, ["bai", "--recipe", str(TINY_BAI), "-q", "--set", "budget=abc", "--budget", "100"])
    err = _one_line_error(r, "budget", "'abc'")
    assert r.exit_code == 2 and "expected an integer" in err


def test_an_integer_beyond_float_range_is_a_one_line_error():
    from icml26.core.recipe import _coerce

    with pytest.raises(InputError, match="within float range"):
        _coerce("tau", 10**400, float)


def test_tables_in_a_log_are_not_cut_at_80_columns(capsys, monkeypatch):
    # stderr redirected to a file or pipe: rich would wrap/cut at 80 columns
    from icml26.core.output import print_table

    monkeypatch.delenv("COLUMNS", raising=False)
    rec = {
        "kind": "result",
        "method": "capkv-with-a-long-name",
        "compression_ratio": 0.5,
        "needle_accuracy": 0.95,
        "kl": 0.0617,
        "top1_agreement": 0.93,
        "kept_bytes": 123456789,
        "overhead_ratio": 0.076,
    }
    print_table([rec])
    err = capsys.readouterr().err
    header = [ln for ln in err.splitlines() if "compression_ratio" in ln]
    assert len(header) == 1, err  # one header line: no column wrapped onto a second line
    for name in ("capkv-with-a-long-name", "needle_accuracy", "top1_agreement", "overhead_ratio", "123456789"):
        assert name in err
    assert "…" not in err
    assert max(len(ln) for ln in err.splitlines()) > 80
    monkeypatch.setenv("COLUMNS", "abc")  # not a number: the same
    print_table([rec])
    assert "…" not in capsys.readouterr().err


def test_set_help_lists_the_fields_with_their_defaults():
    r = CliRunner().invoke(app, ["mcts", "--set", "help"])
    assert r.exit_code == 0, r.output
    out = r.stdout.splitlines()
    lines = {ln.split()[0]: (ln.split(), out[i + 1].strip()) for i, ln in enumerate(out[1:-1], 1) if " = " in ln}
    assert lines["c_visit"][0][1:] == ["float", "=", "50.0"]
    assert lines["c_visit"][1] == "sigma(q) constants of Gumbel MuZero (mctx defaults)"  # its help, on the next line
    assert lines["simulations"][0][1:] == ["int,...", "=", "100,300,1000"]
    assert lines["simulations"][1] == "budgets at the root; range: <= 1e+07 (sized)"  # = MAX_SIMULATIONS
    assert "kind" not in r.stdout  # nothing ran
    r = CliRunner().invoke(app, ["bpi", "--set", "list", "--set", "epsilon=0.2"])
    assert r.exit_code == 0 and "  epsilon     float = 0.2" in r.stdout  # the value this run would use


def test_algo_lists_reject_empty_names_and_drop_repeats():
    from icml26.core.recipe import parse_choices

    assert parse_choices("b,a,b", ["a", "b", "c"]) == ["b", "a"]
    assert parse_choices("all", ["a", "b"]) == ["a", "b"]
    for bad in ("", "a,", ",a", "a,,b"):
        with pytest.raises(ValueError, match="empty name"):
            parse_choices(bad, ["a", "b"])
    r = CliRunner().invoke(app, ["mcts", "--algo", "uct,", "-n", "5", "--seeds", "1", "-q"])
    assert r.exit_code == 2 and "empty name" in r.output


def test_a_killed_kernel_build_does_not_block_the_next_one(tmp_path):
    # torch leaves build/lock behind when a build is killed; the next load must not wait forever
    from icml26.core.ext import _build_lock

    (tmp_path / "lock").write_text("")
    with _build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()
    with _build_lock(tmp_path):  # re-entrant across calls: the flock was released
        pass


def test_seed_beyond_64_bits_is_refused():
    r = CliRunner().invoke(app, ["mcts", "--seed", "99999999999999999999999", "-n", "5", "--seeds", "1", "-q"])
    assert r.exit_code == 2 and "--seed" in r.output


@pytest.mark.parametrize("content", [b"not an archive\n", b"\x80\x04\x95pickle-looking bytes"])
def test_image_npz_that_is_not_an_archive_names_the_format(tmp_path, content):
    """A text or pickle file named .npz: one InputError naming numpy.savez, never numpy's pickle advice."""
    import numpy as np

    from icml26.core.data.images import load_images

    bad = tmp_path / "bad.npz"
    bad.write_bytes(content)
    with pytest.raises(InputError) as e:
        load_images(bad)
    msg = str(e.value)
    assert "not an .npz archive" in msg and "numpy.savez" in msg and "allow_pickle" not in msg
    good = tmp_path / "good.npz"
    np.savez(good, x_train=np.zeros((3, 8, 8), np.uint8), y_train=np.array([0, 1, 2]))
    s = load_images(good)
    assert s.images.shape[0] == 3 and list(s.labels) == [0, 1, 2]
