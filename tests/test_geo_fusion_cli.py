"""icml26 geo-fusion: score on a hand-made file, bad input -> exit 2 with one line, povray missing
-> exit 2 naming the install command, and the tiny recipe end to end (make-bench twice, train)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.data import renders as R
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "geo-fusion" / "tiny.yaml"
runner = CliRunner()


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_score_cli_hand_made(tmp_path):
    rows = [
        {
            "id": "a",
            "task": "object_counting",
            "question_type": "numeric",
            "answer": "5",
            "prediction": "4",
        },  # err 1/5 -> 0.6 (float: 0.2 > 1 - 0.8)
        {"id": "b", "task": "object_counting", "question_type": "numeric", "answer": "5", "prediction": "five"},
        {
            "id": "c",
            "task": "object_rel_distance",
            "question_type": "multiple_choice",
            "answer": "C",
            "prediction": "C. sofa",
            "options": ["A. tv", "B. lamp", "C. sofa", "D. bed"],
        },
    ]
    r = runner.invoke(app, ["geo-fusion", "score", "--predictions", str(_write(tmp_path / "p.jsonl", rows)), "-q"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    by = {x["task"]: x for x in recs if x["kind"] == "result"}
    assert by["object_counting"]["metric"] == "mra" and by["object_counting"]["score"] == pytest.approx(0.3)
    assert by["object_counting"]["n"] == 2 and by["object_counting"]["n_unparsable"] == 1
    assert by["object_rel_distance"]["metric"] == "accuracy" and by["object_rel_distance"]["score"] == 1.0
    assert recs[-1]["overall"] == pytest.approx((0.3 + 1.0 + 0.0) / 3) and recs[-1]["n_unparsable"] == 1


@pytest.mark.parametrize(
    "bad,msg",
    [
        ('{"id": 1, "task": "object_counting"}', "missing field"),
        ('{"id": 1, "task": "counting", "question_type": "numeric", "answer": "1", "prediction": "1"}', "unknown task"),
        (
            '{"id": 1, "task": "object_counting", "question_type": "multiple_choice", "answer": "1", "prediction": '
            '"1"}',
            "question_type",
        ),
        ("not json", "not a JSON object"),
    ],
)
def test_score_bad_input_exit_2(tmp_path, bad, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text(bad + "\n")
    r = runner.invoke(app, ["geo-fusion", "score", "--predictions", str(p)])
    assert r.exit_code == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_make_bench_without_povray_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_POVRAY", "")
    r = runner.invoke(app, ["geo-fusion", "make-bench", "--out", str(tmp_path / "b"), "--scenes", "1"])
    assert r.exit_code == 2 and "apt-get install -y povray povray-examples" in r.stderr
    assert not (tmp_path / "b").exists()


def test_train_bad_input_exit_2(tmp_path):
    r = runner.invoke(app, ["geo-fusion", "train", "--bench", str(tmp_path), "--train-bench", str(tmp_path)])
    assert r.exit_code == 2 and "not a benchmark folder" in r.stderr
    r = runner.invoke(app, ["geo-fusion", "train", "--variant", "sgf,bogus", "--bench", "x", "--train-bench", "y"])
    assert r.exit_code == 2 and "bogus" in r.stderr
    r = runner.invoke(app, ["geo-fusion", "make-bench", "--out", str(tmp_path / "b"), "--set", "views_min=1"])
    assert r.exit_code == 2 and "views_min" in r.stderr


@pytest.mark.slow
def test_tiny_recipe_end_to_end(tmp_path):
    """Two tiny benchmarks (2 scenes, 8 views at 64x64) and a 5-step train of none and sgf: the record
    contract, the question layout of the issue, and predictions that `score` reproduces."""
    need(lambda: R.povray_path() is not None, f"needs POV-Ray: {R.POVRAY_INSTALL}")
    ev, tr = tmp_path / "ev", tmp_path / "tr"
    for d, first in ((ev, "0"), (tr, "100")):
        r = runner.invoke(
            app, ["geo-fusion", "make-bench", "-r", str(TINY), "--out", str(d), "--first-index", first, "-q"]
        )
        assert r.exit_code == 0, (r.output, r.exception)
    q = json.loads((ev / "questions.jsonl").read_text().splitlines()[0])
    assert {"id", "task", "question_type", "answer", "scene", "frames", "question"} <= set(q) and "prediction" not in q
    assert all((ev / f).is_file() for f in q["frames"])
    rs = R.read_scene(ev / "scenes" / q["scene"])
    assert len(rs) == 8 and rs.depth(0).shape == (64, 64)
    r = runner.invoke(
        app,
        [
            "geo-fusion",
            "train",
            "-r",
            str(TINY),
            "--bench",
            str(ev),
            "--train-bench",
            str(tr),
            "-q",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = [x for x in recs if x["kind"] == "result"]
    assert {x["variant"] for x in res} == {"none", "sgf"}
    ov = {x["variant"]: x for x in res if x["task"] == "overall"}
    assert (
        set(ov["sgf"]) >= {"score", "score_ci", "params_trained", "seeds"}
        and ov["sgf"]["params_trained"] > ov["none"]["params_trained"]
    )
    pred = tmp_path / "run" / "predictions-sgf-seed0.jsonl"
    r2 = runner.invoke(app, ["geo-fusion", "score", "--predictions", str(pred), "-q"])
    assert r2.exit_code == 0
    assert json.loads(r2.stdout.splitlines()[-1])["overall"] == pytest.approx(ov["sgf"]["score"])


def test_make_bench_refuses_a_folder_of_other_settings(tmp_path):
    """Scene folders are reused on a rerun (resume), so a folder rendered with another seed or
    config, or stale scenes without the settings file, must be refused before anything is written."""
    import dataclasses
    import json as _json

    from icml26.core.errors import InputError
    from icml26.methods.spatial import bench as B

    cfg = B.BenchConfig(scenes=2)
    out = tmp_path / "b"
    out.mkdir()
    (out / B.SETTINGS_FILE).write_text(_json.dumps(B._settings(cfg, 0, 0)))
    B.check_out(out, cfg, seed=0, first_index=0)  # same settings: resume
    B.check_out(out, dataclasses.replace(cfg, scenes=5), seed=0, first_index=0)  # more scenes: extends
    with pytest.raises(InputError, match="seed"):
        B.check_out(out, cfg, seed=1, first_index=0)
    with pytest.raises(InputError, match="first_index"):
        B.check_out(out, cfg, seed=0, first_index=100)
    stale = tmp_path / "stale"
    (stale / "scenes" / "scene_0000").mkdir(parents=True)
    with pytest.raises(InputError, match="no make-bench.json"):
        B.check_out(stale, cfg, seed=0, first_index=0)
    r = runner.invoke(app, ["geo-fusion", "make-bench", "--out", str(stale), "--scenes", "1", "-q"])
    assert r.exit_code == 2 and not r.stdout.strip()
    with pytest.raises(ValueError, match="scenes"):
        B.BenchConfig(scenes=10**9)


_Q = {
    "id": "s0-00",
    "scene": "s0",
    "task": "object_counting",
    "question_type": "numeric",
    "question": "How many lamp(s)?",
    "answer": "1",
}


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({**_Q, "id": 5, "task": "nosuch"}, "line 2: field 'id' must be a string"),
        ({**_Q, "task": "nosuch"}, "line 2: unknown task 'nosuch'"),
        ({k: v for k, v in _Q.items() if k != "answer"}, "line 2: field 'answer' must be a string"),
        ({**_Q, "options": "A. tv"}, "line 2: field 'options' must be a list of strings"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ("{not json", "line 2: not JSON"),
        (None, "holds no questions"),
    ],
)
def test_train_checks_every_question_line_before_writing(tmp_path, bad, msg):
    """A bad line of questions.jsonl (or an empty file) in --bench: exit 2 naming the flag, the file and the line,
    before the config record, and no --out folder."""
    ev, tr = tmp_path / "ev", tmp_path / "tr"
    ev.mkdir(), tr.mkdir()
    _write(tr / "questions.jsonl", [_Q])
    if bad is None:
        (ev / "questions.jsonl").write_text("")
    else:
        (ev / "questions.jsonl").write_text(
            json.dumps(_Q) + "\n" + (bad if isinstance(bad, str) else json.dumps(bad)) + "\n"
        )
    r = runner.invoke(
        app, ["geo-fusion", "train", "--bench", str(ev), "--train-bench", str(tr), "--out", str(tmp_path / "run")]
    )
    err = r.stderr.strip()
    assert r.exit_code == 2 and len(err.splitlines()) == 1 and err.startswith("icml26: error: --bench:"), err
    assert msg in err and "questions.jsonl" in err, err
    assert r.stdout == "" and not (tmp_path / "run").exists()


def test_train_reads_every_scene_before_the_first_record(tmp_path):
    """A scene that the questions name but that is missing (or has a corrupt file: the readers'
    InputError, tests/test_renders.py) stops `train` with exit 2 and nothing on stdout."""
    ev, tr = tmp_path / "ev", tmp_path / "tr"
    ev.mkdir(), tr.mkdir()
    _write(tr / "questions.jsonl", [_Q])
    _write(ev / "questions.jsonl", [{**_Q, "id": "s9-00", "scene": "s9"}])
    r = runner.invoke(
        app, ["geo-fusion", "train", "--bench", str(ev), "--train-bench", str(tr), "--out", str(tmp_path / "run")]
    )
    err = r.stderr.strip()
    assert r.exit_code == 2 and len(err.splitlines()) == 1 and "scene folder" in err and "s0" in err, err
    assert r.stdout == "" and not (tmp_path / "run").exists()
