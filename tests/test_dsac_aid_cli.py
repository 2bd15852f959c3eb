"""icml26 dsac-aid through the CLI: the tiny recipe's contract, bad env id / bad option -> exit 2
with one line before anything is written, --resume continues a stopped run."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app

pytest.importorskip("mujoco")
ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "dsac-aid" / "tiny.yaml"
runner = CliRunner()
STEP_FIELDS = {
    "kind",
    "step",
    "updates",
    "algo",
    "seed",
    "eval_return",
    "q_bias",
    "sigma_aleatoric",
    "sigma_epistemic",
    "updates_per_s",
}
RESULT_FIELDS = {
    "kind",
    "algo",
    "env",
    "final_return",
    "final_return_ci",
    "max_avg_return",
    "max_avg_return_ci",
    "seeds",
    "steps",
    "updates",
    "updates_per_s",
    "wall_s",
    "diverged",
}


def _run(args):
    return runner.invoke(app, ["dsac-aid", *args])


def test_records_follow_the_contract(tmp_path):
    out = tmp_path / "run"
    r = _run(
        [
            "-r",
            str(TINY),
            "--algo",
            "dsac-aid,sac",
            "--steps",
            "120",
            "--set",
            "eval_interval=60",
            "-q",
            "--out",
            str(out),
        ]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs[0]["kind"] == "config" and recs[0]["family"] == "sb3" and recs[0]["lam"] == 0.71
    assert recs[0]["effective"]["sac"]["delay_update"] == 1 and recs[0]["effective"]["dsac-aid"]["delay_update"] == 2
    assert recs[0]["warmup_actions"] == "uniform" and recs[0]["sigma_loss"] == "gradient"
    steps = [x for x in recs if x["kind"] == "step"]
    results = [x for x in recs if x["kind"] == "result"]
    assert steps and all(set(x) == STEP_FIELDS for x in steps)
    assert {x["algo"] for x in steps} == {"dsac-aid", "sac"} and {x["seed"] for x in steps} == {0, 1}
    assert all(x["sigma_aleatoric"] is None for x in steps if x["algo"] == "sac")
    assert all(x["sigma_aleatoric"] > 0 for x in steps if x["algo"] == "dsac-aid")
    assert len(results) == 2 and all(set(x) == RESULT_FIELDS for x in results)
    assert all(x["steps"] == 120 and x["seeds"] == 2 for x in results)
    assert all(x["diverged"] is False and x["updates"] > 0 for x in results)
    summ = recs[-1]
    assert summ["kind"] == "summary" and summ["diverged"] == []
    # two seeds of 120 steps: the 95% intervals overlap, so no method is named best
    lo_hi = {x["algo"]: x["final_return_ci"] for x in results}
    if lo_hi["sac"][0] <= lo_hi["dsac-aid"][1] and lo_hi["dsac-aid"][0] <= lo_hi["sac"][1]:
        assert summ["best_algo"] is None and set(summ["tied_with_best_algo"]) == {"sac", "dsac-aid"}
    assert (
        (out / "returns.png").is_file()
        and (out / "q_bias.png").is_file()
        and (out / "checkpoint-sac.safetensors").is_file()
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--env", "Hopperr-v5"], "--env 'Hopperr-v5'"),
        (["--env", "dmc:cheetah-fly"], "no such dm_control task"),
        (["--env", "CartPole-v1"], "continuous (Box) action space"),
        (["--algo", "td3"], "algo 'td3'"),
        (["--set", "vector_env=threads"], "vector_env"),
        (["--set", "env_steps_per_update=3"], "multiple of num_envs"),
        (["--set", "no_such=1"], "valid keys"),
        (["--set", "lam=abc"], "lam"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, needle):
    out = tmp_path / "run"
    r = _run(["-r", str(TINY), *args, "-q", "--out", str(out)])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists()


def test_resume_after_interruption_matches_uninterrupted(tmp_path, monkeypatch):
    from icml26.methods.rl import dsac_aid as m

    a, b = tmp_path / "a", tmp_path / "b"
    base = ["-r", str(TINY), "--algo", "dsac-t", "--steps", "200", "-q"]
    r = _run([*base, "--out", str(a)])
    assert r.exit_code == 0, r.output
    orig = m.train

    def stopping(*args, **kw):  # an interruption after the first checkpoint (as Ctrl-C would)
        for rec in orig(*args, **{**kw, "stop_after_steps": 100}):
            yield rec
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "train", stopping)
    r = _run([*base, "--out", str(b)])
    assert r.exit_code != 0 and (b / "interrupted.json").is_file()
    monkeypatch.setattr(m, "train", orig)
    r = _run([*base, "--out", str(b)])
    assert r.exit_code == 2 and "--resume" in r.stderr
    r = _run([*base, "--out", str(b), "--resume"])
    assert r.exit_code == 0, r.output
    strip = lambda p: [
        {k: v for k, v in json.loads(x).items() if k not in ("updates_per_s", "wall_s")}  # noqa: E731
        for x in (p / "records.jsonl").read_text().splitlines()
    ]
    assert strip(a) == strip(b)
    assert not (b / "interrupted.json").exists()


def test_set_help_shows_the_effective_default_of_the_family():
    r = _run(["--env", "Hopper-v5", "--set", "help"])
    assert r.exit_code == 0, r.output
    rows = {ln.split()[0]: ln.split("=", 1)[-1] for ln in r.stdout.splitlines() if ln.startswith("  ") and "=" in ln}
    for key in ("num_envs", "warmup_steps", "reward_scale", "hidden", "lam", "sigma_loss", "norm_groups"):
        assert key in rows and "None" not in rows[key], (key, rows.get(key))
    assert "sac 1" in rows["delay_update"]
    assert "sac 2" in rows["log_std_max"] and "dsac-t 0.5" in rows["log_std_max"]
    assert "sac sequential" in rows["update_order"] and "dsac-aid simultaneous" in rows["update_order"]
    assert "100" in rows["warmup_steps"] and "sb3" in rows["family"]
    r = _run(["--env", "Hopper-v5", "--set", "family=mujoco", "--set", "help"])
    rows = {ln.split()[0]: ln.split("=", 1)[-1] for ln in r.stdout.splitlines() if ln.startswith("  ") and "=" in ln}
    assert "10000" in rows["warmup_steps"].replace("_", "").replace(",", "") and "50" in rows["reward_scale"]


def _interrupted(monkeypatch, args: list[str]) -> None:
    """Run the CLI with ``args`` and interrupt it after 100 environment steps (as Ctrl-C would)."""
    from icml26.methods.rl import dsac_aid as m

    orig = m.train

    def stopping(*a, **kw):
        yield from orig(*a, **{**kw, "stop_after_steps": 100})
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "train", stopping)
    assert _run(args).exit_code != 0
    monkeypatch.setattr(m, "train", orig)


def _records_after_config(folder) -> list[dict]:
    """The run's records after its config record, without the timing fields."""
    return [
        {k: v for k, v in json.loads(x).items() if k not in ("updates_per_s", "wall_s")}
        for x in (folder / "records.jsonl").read_text().splitlines()[1:]
    ]


def test_resume_of_a_run_made_under_the_earlier_defaults_keeps_its_settings(tmp_path, monkeypatch):
    """A run recorded before the sb3 family and the new settings existed (GOPS data regime, config
    record without warmup_actions / sigma_loss / norm_affine / dsact_huber / effective) continues
    under its own settings with a bare --resume and ends as the uninterrupted run."""
    legacy = ["--set", "family=mujoco", "--set", "norm_affine=true", "--set", "sigma_loss=variance"]
    legacy += ["--set", "warmup_actions=policy", "--set", "tanh_epsilon=0"]
    base = ["-r", str(TINY), "--algo", "dsac-aid", "--steps", "200", "-q"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert _run([*base, *legacy, "--out", str(a)]).exit_code == 0
    _interrupted(monkeypatch, [*base, *legacy, "--out", str(b)])
    lines = (b / "records.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    for k in (
        "warmup_actions",
        "sigma_loss",
        "norm_affine",
        "dsact_huber",
        "log_std_max",
        "update_order",
        "tanh_epsilon",
        "effective",
    ):
        head.pop(k)  # as the earlier version recorded it
    (b / "records.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    r = _run([*base, "--out", str(b), "--resume"])  # no --set: the run's own settings
    assert r.exit_code == 0, r.output
    assert _records_after_config(a) == _records_after_config(b)


def test_resume_of_an_sb3_sac_run_recorded_before_log_std_max_keeps_its_bound(tmp_path, monkeypatch):
    """An sb3-family SAC run recorded before log_std_max and update_order existed (no such fields,
    neither in ``effective``) ran with the bound 0.5 and GOPS's update order: a bare --resume
    continues so and ends as an uninterrupted run with those values set, not at SAC's new
    defaults (2, sequential)."""
    base = ["-r", str(TINY), "--algo", "sac", "--steps", "200", "-q"]
    a, b = tmp_path / "a", tmp_path / "b"
    old = ["--set", "log_std_max=0.5", "--set", "update_order=simultaneous", "--set", "tanh_epsilon=0"]
    assert _run([*base, *old, "--out", str(a)]).exit_code == 0
    _interrupted(monkeypatch, [*base, "--out", str(b)])
    lines = (b / "records.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    assert head["effective"]["sac"]["log_std_max"] == 2.0
    assert head["effective"]["sac"]["update_order"] == "sequential"
    for k in ("log_std_max", "update_order"):
        head.pop(k)
        head["effective"]["sac"].pop(k)  # as the earlier version recorded it
    head.pop("tanh_epsilon")
    (b / "records.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    ck = b / "checkpoint-sac.safetensors"
    ck.unlink()  # the earlier version's checkpoint: made again from the start at the recorded bound
    r = _run([*base, "--out", str(b), "--resume"])
    assert r.exit_code == 0, r.output
    assert _records_after_config(a) == _records_after_config(b)


@pytest.mark.slow  # ~1 CPU-minute
def test_sac_learns_inverted_pendulum_at_the_default_settings(tmp_path):
    """No recipe, no --set but the run length and evaluation: SAC at the sb3 defaults balances
    InvertedPendulum-v5 within 2000 environment steps (the earlier GOPS defaults: 10k warm-up
    steps and one update per 20 steps, so no update by then and a return near 10)."""
    r = _run(
        ["--env", "InvertedPendulum-v5", "--algo", "sac", "--steps", "2000", "--seeds", "2"]
        + ["--set", "eval_interval=1000", "--set", "eval_episodes=5", "-q", "--out", str(tmp_path / "ip")]
    )
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    res = next(x for x in recs if x["kind"] == "result")
    assert res["final_return"] >= 50.0, res  # a random or untrained policy falls within ~10 steps
    assert res["updates"] >= 1800  # one update per environment step after 100 random ones
