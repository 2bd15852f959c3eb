"""The dsac-aid harness: resume bit for bit, deterministic evaluation, the soft Monte-Carlo
return, family defaults, the D4RL-layout writer/reader round trip."""

import dataclasses
import math

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")

from icml26.core.errors import InputError  # noqa: E402
from icml26.methods.rl import d4rl  # noqa: E402
from icml26.methods.rl import dsac_aid as m  # noqa: E402
from icml26.methods.rl import dsac_config  # noqa: E402


def tiny(**kw) -> m.Config:
    base = dict(
        env="Hopper-v5",
        algo=("dsac-aid",),
        steps=160,
        seeds=2,
        num_envs=2,
        env_steps_per_update=2,
        warmup_steps=40,
        batch_size=16,
        hidden=(32, 32),
        norm_groups=4,
        eval_interval=80,
        eval_episodes=2,
        bias_horizon=20,
        checkpoint_interval=80,
    )
    base.update(kw)
    return m.resolve_family(m.Config(**base))  # sb3 family otherwise


def _final_tensors(path):
    from safetensors.torch import load_file

    t = load_file(str(path))
    t.pop("loop.times")
    return t


@pytest.mark.parametrize("algo", ["dsac-aid", pytest.param("sac", marks=pytest.mark.slow)])
def test_resume_reproduces_uninterrupted_run_bit_for_bit(tmp_path, algo):
    cfg = tiny(algo=(algo,))
    dims = m.validate(cfg)
    full = list(m.train(cfg, algo, seed=3, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path / "a"))
    (tmp_path / "b").mkdir()
    part = list(
        m.train(
            cfg, algo, seed=3, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path / "b", stop_after_steps=90
        )
    )
    assert part and all(r["kind"] == "step" for r in part) and max(r["step"] for r in part) <= 90
    rest = list(
        m.train(
            cfg,
            algo,
            seed=3,
            device="cpu",
            obs_dim=dims[0],
            act_dim=dims[1],
            out=tmp_path / "b",
            resume=True,
            previous=part,
        )
    )
    from icml26.core.output import to_json

    strip = lambda rs: [to_json({k: v for k, v in r.items() if k not in ("updates_per_s", "wall_s")}) for r in rs]  # noqa: E731
    assert strip(rest) == strip(full)
    a, b = (
        _final_tensors(tmp_path / "a" / f"checkpoint-{algo}.safetensors"),
        _final_tensors(tmp_path / "b" / f"checkpoint-{algo}.safetensors"),
    )
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # and a run with another seed differs (the comparison can fail)
    (tmp_path / "c").mkdir()
    other = list(m.train(cfg, algo, seed=4, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path / "c"))
    assert strip(other) != strip(full)


def test_resume_refuses_a_checkpoint_of_other_settings(tmp_path):
    cfg = tiny(steps=80)
    dims = m.validate(cfg)
    list(m.train(cfg, "dsac-aid", seed=0, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path))
    cfg2 = dataclasses.replace(cfg, lr_q=1e-3)
    with pytest.raises(InputError, match="other settings"):
        list(
            m.train(cfg2, "dsac-aid", seed=0, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path, resume=True)
        )


def test_evaluation_is_deterministic_and_seeds_differ():
    from icml26.methods.rl.sac import Learner

    cfg = tiny()
    o, a = m.validate(cfg)
    L = Learner(m.learner_spec(cfg, "dsac-aid", o, a), generator=torch.Generator().manual_seed(0))
    e1, e2 = m.evaluate(L, cfg, 0, "cpu"), m.evaluate(L, cfg, 0, "cpu")
    for k in e1:
        np.testing.assert_array_equal(e1[k], e2[k])
    assert np.all(np.isfinite(e1["q_bias"])) and np.all(e1["sigma_aleatoric"] > 0) and np.all(e1["sigma_epistemic"] > 0)
    assert e1["eval_return"][0] != e1["eval_return"][1]  # two seeds: two different untrained policies


def test_bias_estimator_as_the_official_evaluator_on_a_hand_made_episode():
    """GOPS evaluator_dsacaid.py (640e85a): bootstrap from q at the last state (even after a
    termination), drop the last reward, average q_t - G_t over t < min(horizon, L - 1)."""
    q = np.array([5.0, 4.0, 3.0, 2.0])  # the critic at the 4 states of the episode
    r = np.array([1.0, 2.0, 3.0, 100.0])  # the last reward never enters
    lp = np.array([0.5, -0.2, 0.1, 0.4])
    a, g = 0.3, 0.9
    G2 = 3.0 + g * (2.0 - a * 0.4)  # bootstrap: q_3 - a lp_3
    G1 = 2.0 + g * (G2 - a * 0.1)
    G0 = 1.0 + g * (G1 - a * -0.2)
    want = np.mean([5.0 - G0, 4.0 - G1, 3.0 - G2])
    assert m.official_bias(q, r, lp, a, g, horizon=200) == pytest.approx(want, rel=1e-12)
    # horizon 2: only t = 0, 1 averaged, the returns still run to the end of the episode
    assert m.official_bias(q, r, lp, a, g, horizon=2) == pytest.approx(np.mean([5.0 - G0, 4.0 - G1]), rel=1e-12)
    assert math.isnan(m.official_bias(q[:1], r[:1], lp[:1], a, g, horizon=200))  # one step: nothing to compare


def test_beta_unfreezes_one_evaluation_later_and_counts_frozen_adam_steps():
    """GOPS off_serial_dsacaid_trainer.py: the evaluation that unfreezes beta passes bias 0 (an Adam
    step with gradient 0); the next one with B <= 0 moves beta by Adam with t = 2."""
    from icml26.methods.rl.sac import Learner

    cfg = tiny()
    o, a = m.validate(cfg)
    L = Learner(m.learner_spec(cfg, "dsac-aid", o, a), generator=torch.Generator().manual_seed(0))
    L.mean_unc.fill_(2.0)
    L.anneal_beta(torch.tensor([-500.0, -100.0]))  # seed 0 stays frozen (-500 < 0.2 * -1000), seed 1 unfreezes
    assert torch.equal(L.beta, torch.full((2,), 0.1)) and L.beta_t.tolist() == [1.0, 1.0]
    L.anneal_beta(torch.tensor([-100.0, -40.0]))  # seed 0 unfreezes now; seed 1 steps
    gr = 40.0 / 2.0
    mh, vh = 0.1 * gr / (1 - 0.9**2), 0.001 * gr * gr / (1 - 0.999**2)
    assert L.beta[0].item() == pytest.approx(0.1)
    assert L.beta[1].item() == pytest.approx(0.1 - 5e-3 * mh / (math.sqrt(vh) + 1e-8), rel=1e-5)
    before = L.beta.clone()
    L.anneal_beta(torch.tensor([30.0, float("nan")]))  # B > 0: no step; NaN: no update
    assert torch.equal(L.beta, before) and L.beta_t.tolist() == [2.0, 2.0]


def test_family_defaults():
    """auto: SAC as Stable-Baselines3 runs it for gymnasium ids (sb3), GOPS's scripts for dmc;
    the GOPS families keep the official settings."""
    hop = m.resolve_family(m.Config(env="Hopper-v5"))
    assert (
        hop.family,
        hop.num_envs,
        hop.env_steps_per_update,
        hop.warmup_steps,
        hop.warmup_actions,
        hop.hidden,
        hop.reward_scale,
        hop.norm_groups,
        hop.tau,
        hop.batch_size,
        hop.lr_q,
        hop.sigma_loss,
    ) == ("sb3", 1, 1, 100, "uniform", (256, 256), 1.0, 0, 0.005, 256, 3e-4, "gradient")
    assert (m.delay_of(hop, "sac"), m.delay_of(hop, "dsac-t"), m.delay_of(hop, "dsac-aid")) == (1, 2, 2)
    mj, ant, dmc = (
        m.resolve_family(m.Config(env=e, family=f))
        for e, f in (("Hopper-v5", "mujoco"), ("Ant-v5", "ant"), ("dmc:cheetah-run", "auto"))
    )
    assert (mj.lam, mj.beta0, mj.reward_scale, mj.activation, mj.norm_groups, mj.huber, mj.lr_q) == (
        0.71,
        0.1,
        50.0,
        "relu",
        16,
        True,
        3e-4,
    )
    assert (mj.num_envs, mj.env_steps_per_update, mj.warmup_steps, mj.hidden, mj.norm_affine) == (
        4,
        20,
        10_000,
        (256, 256, 256),
        False,
    )
    assert (
        ant.lam,
        ant.beta0,
        ant.beta_lr,
        ant.reward_scale,
        ant.activation,
        ant.norm_groups,
        ant.huber,
        ant.lr_q,
        ant.lr_alpha,
    ) == (0.5, 0.03, 1.5e-4, 0.1, "gelu", 0, False, 1e-4, 3e-4)
    assert (dmc.family, dmc.lam, dmc.beta_lr, dmc.reward_scale) == ("dmc", 1e-4, 2e-3, 50.0)
    # a value set by the user wins over the family's
    assert m.resolve_family(m.Config(env="Ant-v5", lam=0.9)).lam == 0.9
    assert m.delay_of(m.resolve_family(m.Config(delay_update=3)), "sac") == 3


def test_policy_log_std_bound_per_algorithm():
    """sb3: SAC's log std clamp is SB3's / CleanRL's upper bound 2 (std up to e^2), the
    distributional learners keep GOPS's 0.5; the GOPS families give 0.5 to every learner; a
    value set by the user wins; the learner clamps there."""
    from icml26.methods.rl import dsac_config as dc

    hop = m.resolve_family(m.Config(env="Hopper-v5"))
    assert [dc.log_std_max_of(hop, a) for a in ("sac", "dsac-t", "dsac-aid")] == [2.0, 0.5, 0.5]
    assert dc.effective(hop)["sac"]["log_std_max"] == 2.0
    mj = m.resolve_family(m.Config(env="Hopper-v5", family="mujoco"))
    assert dc.log_std_max_of(mj, "sac") == 0.5
    assert dc.log_std_max_of(m.resolve_family(m.Config(log_std_max=1.0)), "sac") == 1.0
    from icml26.methods.rl.sac import Learner

    for algo, bound in (("sac", 2.0), ("dsac-t", 0.5)):
        learner = Learner(dc.learner_spec(hop, algo, 3, 1), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            for p_ in learner.actor.parameters():
                p_.zero_()
            learner.actor.out.bias[..., 1] = 5.0  # the log std head says 5: clamped to the bound
        a, logp = learner.policy(torch.zeros(learner.spec.seeds, 4000, 3))
        # mean 0, std e^bound: log pi(a) = log N(u; 0, s) - log(1 - tanh(u)^2) at u = atanh(a)
        u = torch.atanh(a.clamp(-1 + 1e-6, 1 - 1e-6))
        s_ = math.exp(bound)
        ref = -0.5 * (u / s_) ** 2 - math.log(s_) - 0.5 * math.log(2 * math.pi) - torch.log(1 - a**2 + 1e-6)
        ok = a.abs() < 0.999  # away from float saturation
        assert torch.allclose(logp[ok[..., 0]], ref[..., 0][ok[..., 0]], atol=2e-2)


# Every value each family presets, written out in full (sb3: SB3 2.9.2's SAC; the others: GOPS
# example_train/dsacaid/ at 640e85a, the sigma loss of 1ea49ca): the folded tables must give exactly these.
_SHARED = dict(sigma_loss="gradient", dsact_huber=False, norm_affine=False, lr_alpha=3e-4, tanh_epsilon=1e-6)
_GOPS_DATA = dict(
    num_envs=4,
    env_steps_per_update=20,
    warmup_steps=10_000,
    warmup_actions="policy",
    delay_update=2,
    log_std_max=0.5,
    update_order="simultaneous",
)
_GOPS_NET = dict(hidden=(256, 256, 256), activation="relu", norm_groups=16, init="orthogonal")
_GOPS_AID = dict(
    lam=0.71, beta0=0.1, beta_lr=5e-3, reward_scale=50.0, huber=True, homogeneous=True, lr_q=3e-4, lr_pi=3e-4
)
FAMILY_VALUES = {
    "sb3": dict(
        _SHARED,
        num_envs=1,
        env_steps_per_update=1,
        warmup_steps=100,
        warmup_actions="uniform",
        delay_update=None,
        hidden=(256, 256),
        activation="relu",
        norm_groups=0,
        init="default",
        lam=0.71,
        beta0=0.1,
        beta_lr=5e-3,
        reward_scale=1.0,
        huber=True,
        homogeneous=True,
        lr_q=3e-4,
        lr_pi=3e-4,
        eval_interval=5_000,
    ),
    "mujoco": dict(_SHARED, **_GOPS_DATA, **_GOPS_NET, **_GOPS_AID, eval_interval=50_000),
    "ant": dict(
        _SHARED,
        **_GOPS_DATA,
        hidden=(256, 256, 256),
        activation="gelu",
        norm_groups=0,
        init="default",
        lam=0.5,
        beta0=0.03,
        beta_lr=1.5e-4,
        reward_scale=0.1,
        huber=False,
        homogeneous=False,
        lr_q=1e-4,
        lr_pi=1e-4,
        eval_interval=50_000,
    ),
    "dmc": dict(_SHARED, **_GOPS_DATA, **_GOPS_NET, **dict(_GOPS_AID, lam=1e-4, beta_lr=2e-3), eval_interval=200_000),
}


@pytest.mark.parametrize("family", list(FAMILY_VALUES))
def test_each_family_resolves_to_its_full_table(family):
    """The config record of each family: every preset setting, and nothing left None."""
    for env in ("Hopper-v5", "dmc:cheetah-run"):
        cfg = m.resolve_family(m.Config(env=env, family=family))
        got = {k: getattr(cfg, k) for k in FAMILY_VALUES[family]}
        assert got == FAMILY_VALUES[family]
        assert set(dsac_config.PRESETS[family]) == set(FAMILY_VALUES[family])
        assert [f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) is None] == (
            ["delay_update", "log_std_max", "update_order"] if family == "sb3" else []
        ) + ["reward_noise_from"]


def test_dmc_wrapper_steps_and_ends_as_truncated():
    pytest.importorskip("dm_control")
    from icml26.methods.rl.envs import SeededEnv

    env = SeededEnv("dmc:cartpole-swingup", 1)
    o, _ = env.reset()
    assert o.dtype == np.float32 and o.shape == (5,)
    T, done = 0, False
    while not done:
        o, r, term, trunc, _ = env.step(np.zeros(1, np.float32))
        T += 1
        done = term or trunc
    assert T == 1000 and trunc and not term
    env2 = SeededEnv("dmc:cartpole-swingup", 1)
    np.testing.assert_array_equal(env2.reset()[0], SeededEnv("dmc:cartpole-swingup", 1).reset()[0])


def test_d4rl_round_trip_and_checks(tmp_path):
    rng = np.random.default_rng(0)
    n = 50
    data = {
        "observations": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "next_observations": rng.normal(size=(n, 3)).astype(np.float32),
        "terminals": np.zeros(n, bool),
        "timeouts": np.zeros(n, bool),
    }
    data["terminals"][19] = True
    data["timeouts"][n - 1] = True
    p = d4rl.write(tmp_path / "x.hdf5", data, attrs={"env": "Hopper-v5", "seed": 3})
    back, attrs = d4rl.read(p)
    for k in data:
        np.testing.assert_array_equal(back[k], data[k])
    assert attrs["env"] == "Hopper-v5" and attrs["seed"] == 3
    assert [(s.start, s.stop) for s in d4rl.episodes(back)] == [(0, 20), (20, 50)]
    bad = dict(data, rewards=data["rewards"][:-1])
    with pytest.raises(InputError, match="rows"):
        d4rl.write(tmp_path / "y.hdf5", bad)
    with pytest.raises(InputError, match="NaN"):
        d4rl.write(tmp_path / "y.hdf5", dict(data, rewards=np.full(n, np.nan, np.float32)))
    with pytest.raises(InputError, match="missing field 'timeouts'"):
        d4rl.write(tmp_path / "y.hdf5", {k: v for k, v in data.items() if k != "timeouts"})
    assert not (tmp_path / "y.hdf5").exists()


def test_run_writes_replay_buffer_as_d4rl_trajectories(tmp_path):
    cfg = tiny(steps=120, seeds=1, d4rl=True, d4rl_rollout_steps=30, eval_interval=120)
    recs = list(m.run(cfg, seed=0, out=tmp_path))
    assert recs[-1]["kind"] == "summary"
    data, attrs = d4rl.read(tmp_path / "d4rl" / "dsac-aid-seed0-replay.hdf5")
    assert len(data["rewards"]) == 120 and attrs["kind"] == "replay"
    # trajectories are contiguous: within an episode, next_observations[t] == observations[t+1]
    for s in d4rl.episodes(data):
        o, o2 = data["observations"][s], data["next_observations"][s]
        np.testing.assert_array_equal(o2[:-1], o[1:])
    ro, _ = d4rl.read(tmp_path / "d4rl" / "dsac-aid-seed0-policy.hdf5")
    assert len(ro["rewards"]) == 30 and ro["timeouts"][-1]


def test_onset_noise_is_off_before_its_step_and_redrawn_identically():
    cfg = tiny(reward_noise=2.0, reward_noise_from=100)
    a = np.array(
        [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [0.5, 0.5, -0.5], [3.0, -3.0, 0.0]]
    )  # the last is clipped to [-1, 1]
    assert np.array_equal(m.onset_noise(cfg, 0, 99, a), np.zeros(4))
    n = m.onset_noise(cfg, 0, 100, a)
    eps = np.random.default_rng(np.random.SeedSequence([0, 100, 3])).standard_normal(4)
    np.testing.assert_allclose(n, 2.0 * np.array([0.5, 1.5, 0.75, 0.5 + 2 / 3]) * eps)
    assert np.array_equal(m.onset_noise(cfg, 0, 100, a), n)  # a resumed run draws the same
    assert not np.array_equal(m.onset_noise(cfg, 1, 100, a), n) and not np.array_equal(m.onset_noise(cfg, 0, 101, a), n)
    big = m.onset_noise(cfg, 0, 500, np.zeros((20000, 3)))  # zero action: std 2 * 0.5
    assert abs(big.std() - 1.0) < 0.03 and abs(big.mean()) < 0.03
    assert np.array_equal(
        m.onset_noise(tiny(reward_noise=2.0), 0, 100, a), np.zeros(4)
    )  # no onset step: the envs add it
    with pytest.raises(ValueError, match="reward_noise_from"):
        tiny(reward_noise_from=-1)
    with pytest.raises(ValueError, match=r"reward_noise_from \(160\) must be below steps \(160\)"):
        tiny(reward_noise=2.0, reward_noise_from=160)  # after the run's end: no noise would ever be injected
    with pytest.raises(ValueError, match="reward_noise_from needs reward_noise > 0"):
        tiny(reward_noise_from=100)


@pytest.mark.slow
def test_run_with_noise_onset_resumes_bit_for_bit_and_the_noise_changes_it(tmp_path):
    cfg = tiny(steps=120, eval_interval=60, checkpoint_interval=60, reward_noise=3.0, reward_noise_from=50)
    dims = m.validate(cfg)
    run = lambda c, d, **kw: list(
        m.train(c, "dsac-aid", seed=3, device="cpu", obs_dim=dims[0], act_dim=dims[1], out=tmp_path / d, **kw)
    )  # noqa: E731
    full = run(cfg, "a")
    (tmp_path / "b").mkdir()
    part = run(cfg, "b", stop_after_steps=60)
    rest = run(cfg, "b", resume=True, previous=part)
    from icml26.core.output import to_json

    strip = lambda rs: [to_json({k: v for k, v in r.items() if k not in ("updates_per_s", "wall_s")}) for r in rs]  # noqa: E731
    assert strip(rest) == strip(full)
    a, b = (
        _final_tensors(tmp_path / "a" / "checkpoint-dsac-aid.safetensors"),
        _final_tensors(tmp_path / "b" / "checkpoint-dsac-aid.safetensors"),
    )
    for k in a:
        assert torch.equal(a[k], b[k]), k
    clean = run(dataclasses.replace(cfg, reward_noise_from=None, reward_noise=0.0), "c")
    late = _final_tensors(tmp_path / "c" / "checkpoint-dsac-aid.safetensors")
    r_noisy, r_clean = a["buffer.rewards"], late["buffer.rewards"]
    # before the onset (env step 50; 2 seeds x 2 envs, 2 steps per update, 40 warm-up steps) the stored rewards
    # are the clean ones
    assert torch.equal(r_noisy[:, :50], r_clean[:, :50])
    assert not torch.equal(r_noisy[:, 50:], r_clean[:, 50:])
    assert strip(clean) != strip(full)


def test_mujoco_warnings_go_to_python_not_a_log_file(tmp_path, monkeypatch):
    """HalfCheetah-v5's model uses the deprecated 'settotalmass': MuJoCo's warning must reach
    Python's warnings (once), and no MUJOCO_LOG.TXT may appear in the working directory."""
    import mujoco

    from icml26.methods.rl import envs

    monkeypatch.chdir(tmp_path)
    envs._MUJOCO_WARNED.clear()
    before = mujoco.get_mju_user_warning()  # dm_control, once imported, installs its own handler
    mujoco.set_mju_user_warning(None)
    try:
        with pytest.warns(RuntimeWarning, match="MuJoCo: .*settotalmass"):
            envs.make_base("HalfCheetah-v5").close()
            envs.make_base("HalfCheetah-v5").close()
    finally:
        mujoco.set_mju_user_warning(before)
    assert sum("settotalmass" in m for m in envs._MUJOCO_WARNED) == 1
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_a_non_finite_critic_loss_stops_that_method_and_the_verdict_leaves_it_out(monkeypatch):
    from icml26.methods.rl.sac import Learner

    orig = Learner.update

    def update(self, *a):
        loss = orig(self, *a)
        return loss * float("nan") if self.spec.algo == "dsac-t" and int(self.iteration) >= 5 else loss

    monkeypatch.setattr(Learner, "update", update)
    cfg = tiny(algo=("dsac-t", "sac"), steps=120, eval_interval=60)
    recs = list(m.run(cfg, seed=0))
    res = {r["algo"]: r for r in recs if r["kind"] == "result"}
    assert res["dsac-t"]["diverged"] is True and res["dsac-t"]["final_return"] is None
    assert res["dsac-t"]["diverged_what"] == "critic_loss" and res["sac"]["diverged"] is False
    assert not [
        r for r in recs if r["kind"] == "step" and r["algo"] == "dsac-t"
    ]  # it diverged before its first evaluation
    summ = recs[-1]
    assert summ["diverged"] == ["dsac-t"] and summ["tied_with_best_algo"] == ["sac"] and summ["best_algo"] == "sac"


def test_a_one_algorithm_run_names_a_leader_and_no_best_algo():
    """With one algorithm there is nothing to compare: best_algo is null, leader names it."""
    recs = list(m.run(tiny(algo=("sac",), seeds=2, steps=120, eval_interval=60), seed=0))
    summ = recs[-1]
    assert summ["kind"] == "summary" and summ["algos"] == ["sac"]
    assert summ["best_algo"] is None and summ["leader"] == "sac" and summ["tied_with_best_algo"] == ["sac"]


def _sb3_sac_actor_grads(learner, obs, act, rew, obs2, done, noises, lr_q):
    """SB3 2.9.2 ``SAC.train``'s order, recomputed independently on the learner's initial weights
    (one seed): critic loss 0.5 sum_i MSE(Q_i, y), y = r + gamma (1 - d) (min_i Qbar_i(s', a') -
    alpha log pi(a'|s')); one Adam step of the critics (first step: p - lr g / (|g| + eps)); then
    the actor loss mean(alpha log pi(a|s) - min_i Q_i(s, a)) on the stepped critics. Returns the
    actor's gradients (weights, biases; per layer) and the stepped critic weights."""
    sp = learner.spec

    def mlp(ws, bs, g, x):
        for i, (w, b) in enumerate(zip(ws, bs)):
            x = x @ w[g] + b[g][0]
            if i < len(ws) - 1:
                x = torch.relu(x)
        return x

    def params(net):
        layers = [*net.layers, net.out]
        return [l.weight.detach().clone() for l in layers], [l.bias.detach().clone() for l in layers]

    aw, ab = params(learner.actor)
    aw = [w.requires_grad_() for w in aw]
    ab = [b.requires_grad_() for b in ab]
    cw, cb = params(learner.critic)
    cw = [w.requires_grad_() for w in cw]
    cb = [b.requires_grad_() for b in cb]
    tw, tb = params(learner.critic_target)

    def pi(o, n):
        mean, log_std = mlp(aw, ab, 0, o).chunk(2, -1)
        std = log_std.clamp(-20.0, sp.log_std_max).exp()
        u = mean + std * n
        a = torch.tanh(u)
        # SB3's SquashedDiagGaussianDistribution.log_prob: epsilon 1e-6 inside the log
        lp = torch.distributions.Normal(mean, std).log_prob(u).sum(-1) - torch.log(1 - a**2 + 1e-6).sum(-1)
        return a, lp

    alpha = 1.0  # SB3 / CleanRL: ent_coef starts at exp(0)
    with torch.no_grad():
        a2, lp2 = pi(obs2[0], noises[0][0])
        qn = torch.stack([mlp(tw, tb, m, torch.cat([obs2[0], a2], -1))[:, 0] for m in range(2)]).min(0).values
        y = rew[0] + sp.gamma * (1 - done[0]) * (qn - alpha * lp2)
    q = [mlp(cw, cb, m, torch.cat([obs[0], act[0]], -1))[:, 0] for m in range(2)]
    loss_q = 0.5 * sum(((qi - y) ** 2).mean() for qi in q)
    gq = torch.autograd.grad(loss_q, [*cw, *cb])
    with torch.no_grad():
        cw2 = [w - lr_q * g / (g.abs() + 1e-8) for w, g in zip(cw, gq[: len(cw)])]
        cb2 = [b - lr_q * g / (g.abs() + 1e-8) for b, g in zip(cb, gq[len(cw) :])]
    a_pi, lp = pi(obs[0], noises[1][0])
    q_pi = torch.stack([mlp(cw2, cb2, m, torch.cat([obs[0], a_pi], -1))[:, 0] for m in range(2)]).min(0).values
    loss_pi = (alpha * lp - q_pi).mean()
    return torch.autograd.grad(loss_pi, [*aw, *ab]), cw2


@pytest.mark.parametrize("order", ["sequential", "simultaneous"])
def test_sac_update_order_as_stable_baselines3(order):
    """The sb3 family's SAC (update_order: sequential) takes the actor's gradient on the critics
    after their step, as SB3's ``SAC.train`` (and CleanRL) do: equal to the independent
    recomputation above; the GOPS order (simultaneous) reads the critics before their step, and
    differs from it."""
    from icml26.methods.rl import dsac_config as dc
    from icml26.methods.rl.sac import Learner

    cfg = m.resolve_family(m.Config(env="Hopper-v5", seeds=1, hidden=(16, 16), lr_q=0.05, update_order=None))
    if order == "simultaneous":
        cfg = dataclasses.replace(cfg, update_order="simultaneous")
    assert dc.update_order_of(cfg, "sac") == order
    spec = dc.learner_spec(cfg, "sac", 5, 2, fused_adam=False)
    learner = Learner(spec, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(4)
    B = 64
    obs, obs2 = torch.randn(1, B, 5, generator=g), torch.randn(1, B, 5, generator=g)
    act = torch.rand(1, B, 2, generator=g) * 2 - 1
    rew, done = torch.randn(1, B, generator=g), (torch.rand(1, B, generator=g) < 0.1).float()
    noises = []
    orig = learner._noise

    def recorded(*shape):
        n = orig(*shape)
        noises.append(n.clone())
        return n

    learner._noise = recorded
    before = [p.detach().clone() for p in learner.parameters()]
    learner.update(obs, act, rew, obs2, done)
    assert len(noises) == 2  # a' ~ pi(s') for the target, then a ~ pi(s) for the actor
    learner2 = Learner(spec, generator=torch.Generator().manual_seed(3))  # the same initial weights
    assert all(torch.equal(a, b) for a, b in zip(before, [p.detach() for p in learner2.parameters()]))
    ref, cw2 = _sb3_sac_actor_grads(learner2, obs, act, rew, obs2, done, noises, spec.lr_q)
    layers = [*learner.actor.layers, learner.actor.out]
    got = [l.weight.grad[0] for l in layers] + [l.bias.grad[0] for l in layers]
    close = all(
        torch.allclose(a, b[0] if b.dim() == a.dim() + 1 else b, rtol=1e-4, atol=1e-6) for a, b in zip(got, ref)
    )
    stepped = [l.weight.detach() for l in [*learner.critic.layers, learner.critic.out]]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(stepped, cw2))  # the critic step itself
    assert close == (order == "sequential")
