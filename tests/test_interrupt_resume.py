"""A run that ends abnormally (Ctrl-C, SIGTERM, an error) marks its --out folder; a rerun there
names --resume and the folder to delete; --resume keeps the stored results, computes the rest
and leaves records.jsonl as an uninterrupted run's (icml26.core.output, mcts / bai / bpi)."""

import datetime
import json
import os
import signal
from pathlib import Path

import pytest

from icml26.core.errors import InputError
from icml26.core.output import INTERRUPTED, prepare_out_dir, previous_results, read_marker, resume_records, stream
from icml26.core.preamble import Run

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the stream API


def _results(done=None, stop_after=None, computed=None, how="interrupt"):
    """Five result records and a summary; raises after ``stop_after`` results ("interrupt":
    KeyboardInterrupt, "sigterm": SIGTERM to this process, "error": RuntimeError)."""
    done = done or {}
    res = []
    for i in range(5):
        if stop_after is not None and i == stop_after:
            if how == "interrupt":
                raise KeyboardInterrupt
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            raise RuntimeError("boom")
        if ("a", i) in done:
            r = done[("a", i)]
        else:
            if computed is not None:
                computed.append(i)
            r = {"kind": "result", "algo": "a", "budget": i, "value": i / 7}
        res.append(r)
        yield r
    yield {"kind": "summary", "total": sum(r["value"] for r in res)}


def _run(d, gen, **kw):
    return stream(gen, Run("toy", out=d, resumable=True, **kw), extra_config={"x": 1}, quiet=True)


def test_interrupt_marks_the_folder_and_a_rerun_names_resume(tmp_path, capsys):
    d = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(d, _results(stop_after=3))
    lines = (d / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["config", "result", "result", "result"]
    m = read_marker(d)
    assert m["kind"] == "interrupted" and m["reason"] == "KeyboardInterrupt" and m["results"] == 3 and m["records"] == 4
    when = datetime.datetime.fromisoformat(m["when"].replace("Z", "+00:00"))
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 120
    with pytest.raises(
        InputError,
        match=r"already holds a run \(records.jsonl\) that was interrupted \(KeyboardInterrupt at .*, "
        r"after 3 results\); continue it with --resume, or delete the folder '.*run' to start over",
    ):
        prepare_out_dir(d, resumable=True)
    with pytest.raises(InputError, match=r"interrupted .*; to start over, delete the folder '.*run'"):
        prepare_out_dir(d)  # a command without --resume
    # without a marker (killed outright) an unfinished run is still named as such
    (d / INTERRUPTED).unlink()
    with pytest.raises(InputError, match=r"did not finish \(3 results, no summary\); continue it with --resume"):
        prepare_out_dir(d, resumable=True)


def test_resume_keeps_stored_results_and_ends_as_an_uninterrupted_run(tmp_path, capsys):
    full = tmp_path / "full"
    whole = _run(full, _results())
    d = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(d, _results(stop_after=2))
    # settings must match
    with pytest.raises(InputError, match=r"--resume: x is 2 now but 1 in the run in '.*run'; .*delete the folder"):
        resume_records(d, command="toy", extra_config={"x": 2})
    # a setting added since the run was stored: unset now resumes, set now is a different run
    assert len(resume_records(d, command="toy", extra_config={"x": 1, "new_option": None})) == 3
    with pytest.raises(InputError, match=r"--resume: new_option is 0.5 now but \"<absent>\" in the run"):
        resume_records(d, command="toy", extra_config={"x": 1, "new_option": 0.5})
    with pytest.raises(InputError, match=r"is not a run of 'icml26 other'"):
        resume_records(d, command="other", extra_config={"x": 1})
    with pytest.raises(InputError, match=r"--resume needs --out"):
        resume_records(None, command="toy")
    # interrupted again while replaying, then resumed to the end
    prev = resume_records(d, command="toy", extra_config={"x": 1})
    assert [r["kind"] for r in prev] == ["config", "result", "result"]
    computed = []
    with pytest.raises(KeyboardInterrupt):
        _run(d, _results(done=previous_results(prev, "algo", "budget"), stop_after=4, computed=computed), previous=prev)
    assert computed == [2, 3] and read_marker(d)["results"] == 4
    # a last line cut short by a kill is dropped
    with open(d / "records.jsonl", "a") as f:
        f.write('{"kind": "result", "al')
    prev = resume_records(d, command="toy", extra_config={"x": 1})
    assert len(prev) == 5
    computed = []
    again = _run(d, _results(done=previous_results(prev, "algo", "budget"), computed=computed), previous=prev)
    assert computed == [4]
    assert (d / "records.jsonl").read_text() == (full / "records.jsonl").read_text()
    assert again == whole and not (d / INTERRUPTED).exists()
    # resuming a complete run changes nothing
    prev = resume_records(d, command="toy", extra_config={"x": 1})
    computed = []
    _run(d, _results(done=previous_results(prev, "algo", "budget"), computed=computed), previous=prev)
    assert computed == [] and (d / "records.jsonl").read_text() == (full / "records.jsonl").read_text()


def test_a_stored_line_that_differs_is_replaced(tmp_path, capsys):
    full = tmp_path / "full"
    _run(full, _results())
    d = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(d, _results(stop_after=3))
    prev = resume_records(d, command="toy", extra_config={"x": 1})
    # the method recomputes everything (replays nothing) and the third result comes out different
    lines = (d / "records.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace('"value": ', '"value": 1')
    (d / "records.jsonl").write_text("\n".join(lines) + "\n")
    _run(d, _results(), previous=prev)
    assert (d / "records.jsonl").read_text() == (full / "records.jsonl").read_text()


@pytest.mark.parametrize("how, reason", [("sigterm", "SIGTERM"), ("error", "RuntimeError: boom")])
def test_sigterm_and_errors_mark_the_folder(tmp_path, capsys, how, reason):
    d = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt if how == "sigterm" else RuntimeError):
        _run(d, _results(stop_after=1, how=how))
    m = read_marker(d)
    assert m["reason"] == reason and m["results"] == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_bad_input_before_the_first_result_still_leaves_nothing(tmp_path, capsys):
    def bad():
        yield {"kind": "env"}
        raise InputError("bad")

    d = tmp_path / "run"
    with pytest.raises(InputError):
        _run(d, bad())
    assert not d.exists()


# ------------------------------------------------------------------ the commands


def _main(args, capsys):
    """icml26's entry point in this process: (exit code, stdout, stderr)."""
    from icml26.cli import main

    with pytest.raises(SystemExit) as e:
        main(args)
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def _interrupt_on_call(monkeypatch, module, name, n):
    """Make ``module.name`` raise KeyboardInterrupt on its n-th call (1-based); return the calls."""
    real = getattr(module, name)
    calls = []

    def wrapped(*a, **k):
        calls.append(a)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def _count_calls(monkeypatch, module, name):
    real = getattr(module, name)
    calls = []

    def wrapped(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)
    return calls


MCTS = ["mcts", "-r", str(ROOT / "recipes/mcts/tiny.yaml"), "--algo", "uct,varde,gumbel,mdp-gape", "-q"]


def test_mcts_ctrl_c_then_resume_matches_an_uninterrupted_run(tmp_path, monkeypatch, capsys):
    from icml26.ops import mcts as ops

    code, full_out, _ = _main(MCTS + ["--out", str(tmp_path / "full")], capsys)
    assert code == 0
    d = str(tmp_path / "run")
    with monkeypatch.context() as mp:
        _interrupt_on_call(mp, ops, "tree_search", 3)  # during the third algorithm
        code, _, err = _main(MCTS + ["--out", d], capsys)
    assert code == 130
    assert f"icml26 mcts: stopped (KeyboardInterrupt) after 4 results; {d!r} is marked as interrupted" in err
    assert "continue it with --resume" in err
    m = read_marker(d)
    assert m["reason"] == "KeyboardInterrupt" and m["results"] == 4  # 2 algorithms x 2 budgets
    # a plain rerun is refused, naming --resume and the folder
    code, out, err = _main(MCTS + ["--out", d], capsys)
    assert code == 2 and out == "" and "--resume" in err and f"delete the folder {d!r}" in err
    # other settings: refused, naming the field
    code, out, err = _main(MCTS + ["--out", d, "--resume", "--seeds", "21"], capsys)
    assert code == 2 and out == "" and "--resume: seeds is 21 now but 20" in err
    code, out, err = _main(MCTS + ["--out", d, "--resume", "--seed", "3"], capsys)
    assert code == 2 and "--resume: seed is 3 now but 0" in err
    with monkeypatch.context() as mp:
        calls = _count_calls(mp, ops, "tree_search")
        code, out, _ = _main(MCTS + ["--out", d, "--resume"], capsys)
    assert code == 0 and len(calls) == 2  # only gumbel and mdp-gape searched again
    assert out == full_out  # same seeds -> identical numbers; the summary covers every result
    assert (Path(d) / "records.jsonl").read_text() == (tmp_path / "full" / "records.jsonl").read_text()
    assert not (Path(d) / INTERRUPTED).exists() and (Path(d) / "p_correct.png").is_file()
    summary = json.loads(out.splitlines()[-1])
    assert sorted(summary["p_correct"]) == ["gumbel", "mdp-gape", "uct", "varde"]


def test_mcts_resume_without_out_or_on_an_empty_folder(tmp_path, capsys):
    code, out, err = _main(MCTS + ["--resume"], capsys)
    assert code == 2 and out == "" and "--resume needs --out" in err
    code, out, err = _main(MCTS + ["--algo", "uct", "--out", str(tmp_path / "new"), "--resume"], capsys)
    assert code == 0 and "holds no run yet" in err and (tmp_path / "new" / "records.jsonl").is_file()


def test_bai_ctrl_c_then_resume(tmp_path, monkeypatch, capsys):
    from icml26.methods.exploration import bai as B

    args = ["bai", "-r", str(ROOT / "recipes/bai/tiny.yaml"), "--budget", "100", "--budget", "150", "-q"]
    code, full_out, _ = _main(args + ["--out", str(tmp_path / "full")], capsys)
    assert code == 0
    d = str(tmp_path / "run")
    with monkeypatch.context() as mp:
        _interrupt_on_call(mp, B, "run_algo", 4)  # the first algorithm of the second budget
        code, _, _ = _main(args + ["--out", d], capsys)
    assert code == 130 and read_marker(d)["results"] == 3
    with monkeypatch.context() as mp:
        calls = _count_calls(mp, B, "run_algo")
        code, out, _ = _main(args + ["--out", d, "--resume"], capsys)
    assert code == 0 and len(calls) == 3
    strip = lambda text: [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in text.splitlines()]  # noqa: E731
    assert strip(out) == strip(full_out)  # identical numbers (only the timings differ)
    assert strip((Path(d) / "records.jsonl").read_text()) == strip(full_out)


def test_bpi_ctrl_c_then_resume(tmp_path, monkeypatch, capsys):
    from icml26.methods.exploration import bpi as P

    args = ["bpi", "-r", str(ROOT / "recipes/bpi/tiny.yaml"), "-q"]
    code, full_out, _ = _main(args + ["--out", str(tmp_path / "full")], capsys)
    assert code == 0
    n_algos = sum(1 for x in full_out.splitlines() if json.loads(x)["kind"] == "result")
    seeds = 6
    d = str(tmp_path / "run")
    with monkeypatch.context() as mp:
        _interrupt_on_call(mp, P, "identify", seeds + 2)  # inside the second algorithm
        code, _, _ = _main(args + ["--out", d], capsys)
    assert code == 130 and read_marker(d)["results"] == 1
    with monkeypatch.context() as mp:
        calls = _count_calls(mp, P, "identify")
        code, out, _ = _main(args + ["--out", d, "--resume"], capsys)
    assert code == 0 and len(calls) == (n_algos - 1) * seeds
    assert out == full_out
    assert (Path(d) / "records.jsonl").read_text() == (tmp_path / "full" / "records.jsonl").read_text()


@pytest.mark.parametrize("exc, code, word", [("sigterm", 143, "terminated"), ("ctrl-c", 130, "interrupted")])
def test_cli_exit_code_is_the_shells_for_the_signal(monkeypatch, capsys, exc, code, word):
    """SIGTERM (raised as output._Terminated inside a run) exits 128 + 15, Ctrl-C 128 + 2."""
    from icml26 import cli
    from icml26.core.output import _Terminated

    def boom(*a, **k):
        raise _Terminated() if exc == "sigterm" else KeyboardInterrupt()

    monkeypatch.setattr(cli, "app", boom)
    with pytest.raises(SystemExit) as e:
        cli.main(["env"])
    assert e.value.code == code
    assert capsys.readouterr().err.strip() == f"icml26: {word}"
