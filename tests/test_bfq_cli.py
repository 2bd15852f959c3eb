"""icml26 bfq through the CLI: make-dataset (SAC here, then --from the run) and train on its
file (the tiny recipes' contract), a Minari folder, a file without an environment (evaluation
skipped, said in the records), bad datasets / options -> exit 2 with one line before anything is
written, --resume after an interruption."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app

pytest.importorskip("mujoco")
pytest.importorskip("h5py")
ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "bfq" / "tiny.yaml"
TINY_MAKE = ROOT / "recipes" / "bfq" / "tiny-make-dataset.yaml"
runner = CliRunner()
STEP_FIELDS = {"kind", "step", "algo", "seed", "normalized_score", "critic_loss", "actor_loss", "eval_return"}
RESULT_FIELDS = {
    "kind",
    "algo",
    "dataset",
    "env",
    "steps",
    "seeds",
    "normalized_score_final",
    "normalized_score_final_ci",
    "normalized_score_best",
    "normalized_score_best_ci",
    "best_step",
    "return_final",
    "train_hz",
    "actions_per_s_b1",
    "actions_per_s_b256",
    "nfe",
    "score_reference",
    "ref_min_return",
    "ref_max_return",
    "evaluation",
    "diverged",
    "normalized_score_d4rl_final",
    "normalized_score_d4rl_final_ci",
}


def _recs(r):
    return [json.loads(x) for x in r.stdout.splitlines()]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("bfq") / "data"
    r = runner.invoke(app, ["bfq", "make-dataset", "-r", str(TINY_MAKE), "-q", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    return out, _recs(r)


def test_make_dataset_follows_d4rl_rules(made):
    from icml26.methods.rl import d4rl

    out, recs = made
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    res = {r["dataset"]: r for r in recs if r["kind"] == "result"}
    assert (
        res["hopper-v5-expert"]["made"] is False
        and "below 0.8 x D4RL's expert 3234.3" in res["hopper-v5-expert"]["why"]
    )
    summ = recs[-1]
    for kind in ("random", "medium", "medium-replay"):
        r = res[f"hopper-v5-{kind}"]
        data, attrs = d4rl.read(out / r["path"])
        assert attrs["env"] == "Hopper-v5" and attrs["kind"] == kind
        assert attrs["ref_min_return"] == pytest.approx(summ["random_return"])
        # the reference maximum is the best evaluated snapshot's return (D4RL's expert: the best policy)
        assert attrs["ref_max_return"] == pytest.approx(summ["expert_return"])
        assert attrs["expert_step"] == summ["expert_step"]
        assert r["transitions"] == len(data["rewards"])
        assert not np.any(data["terminals"] & data["timeouts"])
        assert data["timeouts"][-1] or data["terminals"][-1]
    sac = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in sac] == [100, 200, 300]
    evals = {r["step"]: r["eval_return"] for r in sac}
    assert summ["expert_return"] == pytest.approx(max(evals.values()))
    assert summ["expert_step"] == min(s for s in evals if evals[s] == max(evals.values()))
    med = summ["medium_step"]  # the first evaluation at >= 1/3 of the final return
    assert evals[med] >= evals[300] / 3 and all(evals[s] < evals[300] / 3 for s in evals if s < med)
    assert res["hopper-v5-medium-replay"]["transitions"] == med  # the replay buffer up to the medium snapshot
    # --from the SAC run folder gives the same random dataset (same seed)
    again = out.parent / "again"
    r = runner.invoke(
        app,
        [
            "bfq",
            "make-dataset",
            "-r",
            str(TINY_MAKE),
            "--kind",
            "random",
            "--from",
            str(out / "sac"),
            "-q",
            "--out",
            str(again),
        ],
    )
    assert r.exit_code == 0, r.output
    a, _ = d4rl.read(again / "hopper-v5-random.hdf5")
    b, _ = d4rl.read(out / "hopper-v5-random.hdf5")
    assert np.array_equal(a["observations"], b["observations"])


def test_train_records_follow_the_contract(made, tmp_path):
    out, _ = made
    run = tmp_path / "run"
    r = runner.invoke(
        app, ["bfq", "train", "-r", str(TINY), "--dataset", str(out / "hopper-v5-medium.hdf5"), "-q", "--out", str(run)]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = _recs(r)
    assert recs[0]["kind"] == "config" and recs[-1]["kind"] == "summary"
    assert recs[1]["kind"] == "data" and recs[1]["transitions"] > 0 and recs[1]["rows_dropped_nonfinite"] == 0
    steps = [x for x in recs if x["kind"] == "step"]
    results = [x for x in recs if x["kind"] == "result"]
    assert steps and all(set(x) == STEP_FIELDS for x in steps)
    assert len(results) == 6 and all(set(x) == RESULT_FIELDS for x in results)
    assert {x["algo"] for x in results} == {"bfq", "fql", "diffusion-ql", "iql", "td3bc", "bc"}
    from icml26.methods.rl import d4rl

    attrs = d4rl.read(out / "hopper-v5-medium.hdf5")[1]
    # the dataset's own random/expert returns, unless its "expert" does not beat random (a tiny SAC run): D4RL's
    want_ref = (
        ("dataset", attrs["ref_min_return"], attrs["ref_max_return"])
        if attrs["ref_max_return"] > attrs["ref_min_return"]
        else ("d4rl", -20.272305, 3234.3)
    )
    for x in results:
        assert (x["score_reference"], x["ref_min_return"], x["ref_max_return"]) == pytest.approx(want_ref)
        assert x["evaluation"] == "done" and x["seeds"] == 2 and x["steps"] == 40
        assert (
            x["normalized_score_final"] is not None
            and x["normalized_score_final_ci"][0] <= x["normalized_score_final"] <= x["normalized_score_final_ci"][1]
        )
        assert x["normalized_score_best"] >= x["normalized_score_final"] - 1e-9
        want = 100 * (x["return_final"] - x["ref_min_return"]) / (x["ref_max_return"] - x["ref_min_return"])
        assert x["normalized_score_final"] == pytest.approx(want)
        d4rl_scale = 100 * (x["return_final"] + 20.272305) / (3234.3 + 20.272305)  # D4RL's hopper references
        assert x["normalized_score_d4rl_final"] == pytest.approx(d4rl_scale)
        assert (
            x["nfe"] == (5 if x["algo"] == "diffusion-ql" else 1)
            and x["train_hz"] > 0
            and x["actions_per_s_b256"] > x["actions_per_s_b1"]
        )
    assert all(x["critic_loss"] is None for x in steps if x["algo"] == "bc")
    assert (run / "checkpoint-bfq.safetensors").is_file()


def test_minari_folder_and_a_file_without_env(tmp_path):
    from icml26.methods.rl import d4rl
    from tests.methods.bfq_synth import episodes_data, write_minari

    data = episodes_data(np.random.default_rng(0), (30, 30), o=11, a=3)
    write_minari(tmp_path / "m", data, (30, 30))
    base = ["bfq", "train", "-r", str(TINY), "--algo", "bfq,bc", "--steps", "4", "--set", "eval_interval=4", "-q"]
    r = runner.invoke(app, [*base, "--dataset", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    res = [x for x in _recs(r) if x["kind"] == "result"]
    assert res[0]["env"] == "Hopper-v5" and res[0]["score_reference"] == "d4rl" and res[0]["ref_max_return"] == 3234.3
    p = d4rl.write(tmp_path / "noenv.hdf5", data)
    r = runner.invoke(app, [*base, "--dataset", str(p)])
    assert r.exit_code == 0, r.output
    recs = _recs(r)
    res = [x for x in recs if x["kind"] == "result"]
    assert all(x["normalized_score_final"] is None and x["evaluation"].startswith("skipped") for x in res)
    assert all(x["normalized_score"] is None for x in recs if x["kind"] == "step")


def _bad_files(tmp_path):
    import h5py

    from tests.methods.bfq_synth import episodes_data

    out = {}
    for name, edit in (
        ("missing", lambda d: d.pop("terminals")),
        ("nan", lambda d: d["rewards"].__setitem__(3, np.nan)),
        ("lengths", lambda d: d.__setitem__("observations", d["observations"][:-2])),
        ("strings", lambda d: d.__setitem__("rewards", np.array([b"x"] * len(d["rewards"])))),
        ("flags", lambda d: d.__setitem__("terminals", np.full(len(d["terminals"]), 0.5))),
    ):
        d = episodes_data(np.random.default_rng(1), (10, 10), o=11, a=3)
        edit(d)
        p = tmp_path / f"{name}.hdf5"
        with h5py.File(p, "w") as f:
            for k, v in d.items():
                f.create_dataset(k, data=v)
        out[name] = p
    (tmp_path / "notmin").mkdir()
    out["folder"] = tmp_path / "notmin"
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    out["junk"] = tmp_path / "junk.hdf5"
    return out


@pytest.mark.parametrize(
    "which,extra,needle",
    [
        ("missing", [], "missing field 'terminals'"),
        (
            "nan",
            [],
            "row 3 holds NaN in 'rewards' (1 row with NaN or inf in all); fix the file, or --set drop_nonfinite=true",
        ),
        ("lengths", [], "has 18 rows but rewards has 20"),
        ("folder", [], "not a Minari dataset"),
        ("junk", [], "not a readable hdf5 file"),
        ("strings", [], "field 'rewards' holds |S1 values; numbers are expected"),
        ("flags", [], "field 'terminals' holds values other than 0 and 1"),
        ("good", ["--set", "seeds=100000", "--set", "batch_size=8"], "seeds=1.0e+05 is over its limit 1000"),
        (
            "good",
            ["--set", "seeds=1000", "--set", "hidden=[2048, 2048]", "--algo", "bfq"],
            "bytes of network and Adam state (1000 batched seeds of [2048, 2048] networks;",
        ),
        (  # under the limit at 1-d observations (before the file is read), over it at the file's 11 + 3
            "good",
            ["--set", "seeds=206", "--set", "hidden=[800, 800]", "--algo", "bfq", "--set", "batch_size=8"],
            "~1.7e+10 bytes of network and Adam state (206 batched seeds",
        ),
        ("good", ["--steps", "1000000000000", "--set", "batch_size=8"], "steps=1.0e+12 is over its limit 1e+09"),
        (
            "good",
            ["--steps", "100000000", "--algo", "fql", "--set", "fql_hidden=[2048,2048,2048,2048]", "--seeds", "1"],
            "flops of training",
        ),
        ("none", [], "does not exist"),
        ("good", ["--env", "Walker2d-v5"], "observations of 17"),
        ("good", ["--env", "Hopperr-v5"], "--env 'Hopperr-v5'"),
        ("good", ["--algo", "cql"], "algo 'cql'"),
        ("good", ["--set", "bfq_lam=2"], "bfq_lam"),
        ("good", ["--set", "batch_size=5000"], "exceeds the dataset"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, which, extra, needle):
    from icml26.methods.rl import d4rl
    from tests.methods.bfq_synth import episodes_data

    files = _bad_files(tmp_path)
    files["none"] = tmp_path / "nope.hdf5"
    files["good"] = d4rl.write(
        tmp_path / "good.hdf5", episodes_data(np.random.default_rng(2), (10, 10), o=11, a=3), attrs={"env": "Hopper-v5"}
    )
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["bfq", "train", "-r", str(TINY), "--dataset", str(files[which]), *extra, "-q", "--out", str(out)]
    )
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists()


def test_make_dataset_bad_input_exits_2(tmp_path):
    for args, needle in (
        (["--env", "Hopperr-v5"], "--env 'Hopperr-v5'"),
        (["--kind", "expert-replay"], "kinds 'expert-replay'"),
        (["--from", str(tmp_path)], "not an icml26 dsac-aid run folder"),
    ):
        r = runner.invoke(app, ["bfq", "make-dataset", "-r", str(TINY_MAKE), *args, "-q", "--out", str(tmp_path / "o")])
        assert r.exit_code == 2, r.output
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and needle in lines[0], r.stderr
        assert not (tmp_path / "o").exists()


def test_resume_after_interruption_matches_uninterrupted(made, tmp_path, monkeypatch):
    from icml26.methods.rl import offline as m

    out, _ = made
    a, b = tmp_path / "a", tmp_path / "b"
    base = [
        "bfq",
        "train",
        "-r",
        str(TINY),
        "--dataset",
        str(out / "hopper-v5-medium.hdf5"),
        "--algo",
        "bfq,td3bc",
        "-q",
    ]
    r = runner.invoke(app, [*base, "--out", str(a)])
    assert r.exit_code == 0, r.output
    orig = m.train

    def stopping(*args, **kw):  # bfq stops after its first checkpoint (20 updates), as Ctrl-C would
        yield from orig(*args, **{**kw, "stop_after": 20})
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "train", stopping)
    r = runner.invoke(app, [*base, "--out", str(b)])
    assert r.exit_code != 0 and (b / "interrupted.json").is_file()
    monkeypatch.setattr(m, "train", orig)
    r = runner.invoke(app, [*base, "--out", str(b), "--resume"])
    assert r.exit_code == 0, r.output
    drop = {"train_hz", "actions_per_s_b1", "actions_per_s_b256"}
    ra = [
        {k: v for k, v in json.loads(x).items() if k not in drop}
        for x in (a / "records.jsonl").read_text().splitlines()
    ]
    rb = [
        {k: v for k, v in json.loads(x).items() if k not in drop}
        for x in (b / "records.jsonl").read_text().splitlines()
    ]
    assert ra == rb


def test_train_on_a_d4rl_layout_file_reports_what_was_read_and_progress(tmp_path, monkeypatch):
    """A file as D4RL ships it (float64, bool flags, infos/ and metadata/ groups, no
    next_observations, every episode ended by timeout): the data record counts its 3 episodes,
    every method trains and is scored, progress lines on stderr carry updates/s and the score."""
    from tests.methods.bfq_synth import write_d4rl_file

    write_d4rl_file(tmp_path / "hopper-medium-v2.hdf5", (30, 40, 30), ("timeout",) * 3)
    monkeypatch.setenv("ICML26_PROGRESS_S", "0")
    r = runner.invoke(
        app,
        ["bfq", "train", "-r", str(TINY), "--dataset", str(tmp_path / "hopper-medium-v2.hdf5"), "--steps", "4"]
        + ["--algo", "bfq,fql,diffusion-ql,iql", "--set", "eval_interval=4"],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = _recs(r)
    data = recs[1]
    assert (data["kind"], data["transitions"], data["episodes"], data["rows_dropped_ends"]) == ("data", 97, 3, 3)
    assert data["dataset_kind"] == "medium" and data["return_min"] < data["return_max"]
    res = [x for x in recs if x["kind"] == "result"]
    assert [x["algo"] for x in res] == ["bfq", "fql", "diffusion-ql", "iql"]
    assert all(x["normalized_score_final"] is not None and x["diverged"] is False for x in res)
    lines = [x for x in r.stderr.splitlines() if x.startswith("[bfq diffusion-ql] 4/4 (100%)")]
    assert lines and "/s" in lines[-1] and "score=" in lines[-1], r.stderr


def test_diverged_method_is_flagged_and_left_out_of_best_algo(tmp_path):
    from icml26.methods.rl import d4rl
    from tests.methods.bfq_synth import episodes_data

    data = episodes_data(np.random.default_rng(0), (30, 30), o=11, a=3)
    data["rewards"][:] = 1e30
    p = d4rl.write(tmp_path / "big.hdf5", data, attrs={"env": "Hopper-v5"})
    r = runner.invoke(
        app, ["bfq", "train", "-r", str(TINY), "--dataset", str(p), "--algo", "td3bc,bc", "--steps", "4", "-q"]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = _recs(r)
    res = {x["algo"]: x for x in recs if x["kind"] == "result"}
    assert res["td3bc"]["diverged"] is True and res["td3bc"]["diverged_step"] == 1
    assert res["td3bc"]["normalized_score_final"] is None and res["bc"]["normalized_score_final"] is not None
    summ = recs[-1]
    assert summ["best_algo"] == "bc" and summ["tied_with_best_algo"] == ["bc"] and summ["diverged"] == ["td3bc"]
    assert "training diverged at step 1 (critic_loss non-finite)" in r.stderr


def test_make_dataset_resumes_a_stopped_sac_run(made, tmp_path, monkeypatch):
    """make-dataset stopped inside its SAC run (after 200 of 300 steps) and run again with --resume
    gives the datasets of the uninterrupted run."""
    from icml26.methods.rl import d4rl, offline_make

    out, _ = made
    orig = offline_make.dsac_aid.train

    def stopping(*args, **kw):
        yield from orig(*args, **{**kw, "stop_after_steps": 200})
        raise KeyboardInterrupt

    monkeypatch.setattr(offline_make.dsac_aid, "train", stopping)
    base = ["bfq", "make-dataset", "-r", str(TINY_MAKE), "-q", "--out", str(tmp_path / "d")]
    r = runner.invoke(app, base)
    assert r.exit_code != 0 and (tmp_path / "d" / "sac" / "checkpoint-sac.safetensors").is_file()
    monkeypatch.setattr(offline_make.dsac_aid, "train", orig)
    r = runner.invoke(app, [*base, "--resume"])
    assert r.exit_code == 0, (r.output, r.exception)
    for kind in ("medium", "medium-replay", "random"):
        a, _ = d4rl.read(out / f"hopper-v5-{kind}.hdf5")
        b, _ = d4rl.read(tmp_path / "d" / f"hopper-v5-{kind}.hdf5")
        assert all(np.array_equal(a[k], b[k]) for k in a), kind


def test_make_dataset_resume_with_more_sac_steps_continues_the_finished_run(made, tmp_path):
    """A finished 200-step SAC run, resumed with sac_steps=300, gives the evaluations, snapshots
    and datasets of the uninterrupted 300-step run; other changed settings are still refused."""
    import json

    from icml26.methods.rl import d4rl

    out, _ = made
    base = ["bfq", "make-dataset", "-r", str(TINY_MAKE), "-q", "--out", str(tmp_path / "d")]
    r = runner.invoke(app, [*base, "--set", "sac_steps=200"])
    assert r.exit_code == 0, (r.output, r.exception)
    r = runner.invoke(app, [*base, "--resume", "--set", "batch_size=16"])
    assert r.exit_code == 2 and "holds a SAC run made with other settings" in r.stderr, r.output
    r = runner.invoke(app, [*base, "--resume"])
    assert r.exit_code == 0, (r.output, r.exception)

    def evals(d):
        rows = [json.loads(x) for x in (d / "sac" / "records.jsonl").read_text().splitlines()]
        return rows[0]["steps"], [(x["step"], x["eval_return"]) for x in rows if x["kind"] == "step"]

    assert evals(tmp_path / "d") == evals(out) and evals(out)[0] == 300 and len(evals(out)[1]) == 3
    assert sorted(p.name for p in (tmp_path / "d" / "sac" / "snapshots").iterdir()) == sorted(
        p.name for p in (out / "sac" / "snapshots").iterdir()
    )
    for kind in ("medium", "medium-replay", "random"):
        a, _ = d4rl.read(out / f"hopper-v5-{kind}.hdf5")
        b, _ = d4rl.read(tmp_path / "d" / f"hopper-v5-{kind}.hdf5")
        assert all(np.array_equal(a[k], b[k]) for k in a), kind
