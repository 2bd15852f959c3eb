"""BFQ and the offline-RL harness: flow-matching target (closed form), the composition loss, one
network call per one-step action, D4RL normalisation arithmetic, dataset readers on files made
here, determinism per seed."""

import math

import numpy as np
import pytest
import torch

from icml26.core.errors import InputError
from icml26.methods.rl import bfq, d4rl, offline, offline_data
from tests.methods.bfq_synth import episodes_data, write_minari

pytest.importorskip("h5py")


SMALL = {k: (32, 32) for k in ("hidden", "fql_hidden", "dql_hidden", "iql_hidden", "td3bc_hidden")}


def _cfg(**kw):
    base = dict(SMALL, batch_size=32, steps=20, seeds=2, eval_interval=10, timing_s=0.01, ema_start=5)
    base.update(kw)
    return offline.Config(**base)


def test_boundary_loss_learns_the_closed_form_marginal_velocity():
    """1-D Gaussian data a ~ N(mu, s^2), eps ~ N(0, 1), a_t = (1-t) a + t eps: the flow-matching
    minimiser of L_bnd is E[eps - a | a_t = x] = -mu + (t - (1-t) s^2) / Var(a_t) (x - (1-t) mu)."""
    torch.manual_seed(0)
    mu, s = 0.3, 0.2
    ag = bfq.BFQ(_cfg(hidden=(64, 64), activation="relu"), 1, 1, 1, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(ag.flow.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    B = 256
    for _ in range(600):
        a = mu + s * torch.randn(1, B, 1, generator=g)
        eps = torch.randn(1, B, 1, generator=g)
        tm = bfq.sample_times(g, 1, B, 1e-3, "cpu")
        loss = bfq.boundary_loss(ag.velocity(torch.zeros(1, B, 1)), a, eps, tm["t_b"], tm["d"]).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    errs = []
    with torch.no_grad():
        for t in (0.25, 0.5, 0.75, 0.95):
            m_t, v_t = (1 - t) * mu, (1 - t) ** 2 * s**2 + t**2
            x = m_t + math.sqrt(v_t) * torch.linspace(-1.5, 1.5, 7).view(1, 7, 1)  # within 1.5 sd of a_t's mean
            tt = torch.full((1, 7, 1), t)
            pred = ag.velocity(torch.zeros(1, 7, 1))(x, tt - 5e-4, tt)
            exact = -mu + (t - (1 - t) * s**2) / v_t * (x - m_t)
            errs.append((pred - exact).abs().mean().item())
    assert max(errs) < 0.12, errs  # mean abs error per t (velocities range over about +-1.5 here)


def test_composition_loss_zero_for_an_exact_straight_flow_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    S, B = 2, 64
    a0 = torch.tensor([0.4, -0.2])
    x = torch.randn(S, B, 2, generator=g)
    tm = bfq.sample_times(g, S, B, 1e-3, "cpu")
    straight = lambda x, r, t: (x - a0) / t
    assert bfq.composition_loss(straight, x, tm["r"], tm["m"], tm["t"]).abs().max().item() < 1e-10
    const = lambda x, r, t: torch.ones_like(x) * 0.7
    assert bfq.composition_loss(const, x, tm["r"], tm["m"], tm["t"]).abs().max().item() < 1e-10
    bent = lambda x, r, t: x * t**2
    lc = bfq.composition_loss(bent, x, tm["r"], tm["m"], tm["t"])
    assert lc.shape == (S,) and (lc > 1e-4).all()
    # the identity at r = t and pi(a_t, 0, 1) on the straight flow lands on a0
    one = torch.ones(S, B, 1)
    assert torch.allclose(bfq.policy_operator(bent, x, one * 0.3, one * 0.3), x)
    assert torch.allclose(bfq.policy_operator(straight, x, 0 * one, one), a0.expand(S, B, 2), atol=1e-6)


def _count_calls(module):
    n = [0]
    module.register_forward_hook(lambda *a: n.__setitem__(0, n[0] + 1))
    return n


def test_one_step_sampling_uses_exactly_one_network_call():
    obs = torch.randn(2, 5, 4)
    ag = bfq.BFQ(_cfg(), 4, 3, 2)
    n = _count_calls(ag.flow)
    a = ag.act(obs)
    assert n[0] == 1 and a.shape == (2, 5, 3) and a.abs().max() <= 1
    ag.act(obs, deterministic=False)
    assert n[0] == 2 and ag.nfe == 1
    from icml26.methods.rl.offline_baselines import FQL, DiffusionQL

    f = FQL(_cfg(), 4, 3, 2)
    nf, no = _count_calls(f.flow), _count_calls(f.onestep)
    f.act(obs)
    assert (nf[0], no[0]) == (0, 1)
    d = DiffusionQL(_cfg(dql_steps=7), 4, 3, 2)
    nd = _count_calls(d.model)
    d.act(obs)
    assert nd[0] == 7 == d.nfe


def test_d4rl_normalisation_arithmetic():
    lo, hi = offline_data.D4RL_REF["hopper"]
    assert (lo, hi) == (-20.272305, 3234.3)
    assert offline.normalized_score(hi, lo, hi) == pytest.approx(100.0)
    assert offline.normalized_score(lo, lo, hi) == pytest.approx(0.0)
    assert offline.normalized_score(1000.0, lo, hi) == pytest.approx(
        31.34889, abs=1e-4
    )  # 100 * 1020.272305 / 3254.572305
    lo, hi = offline_data.D4RL_REF["halfcheetah"]
    assert offline.normalized_score(4000.0, lo, hi) == pytest.approx(100 * (4000 + 280.178953) / (12135.0 + 280.178953))
    assert offline_data.family("Walker2d-v5") == "walker2d" and offline_data.family("walker2d-medium-v2") == "walker2d"
    assert offline_data.family("Ant-v5") is None


def test_d4rl_reader_and_rebuilt_next_observations(tmp_path):
    rng = np.random.default_rng(0)
    data = episodes_data(rng, (4, 5))
    p = d4rl.write(tmp_path / "x.hdf5", data, attrs={"env": "Hopper-v5"})
    ds = offline_data.load(p)
    assert (
        np.allclose(ds.fields["observations"].numpy(), data["observations"]) and ds.env == "Hopper-v5" and ds.size == 9
    )
    assert np.allclose(ds.info["obs_mean"], data["observations"].mean(0), atol=1e-5)
    assert ds.info["return_range"] == pytest.approx(
        abs(data["rewards"][:4].sum() - data["rewards"][4:].sum()), rel=1e-5
    )
    # without next_observations: rebuilt within each episode, the cut (timeout) end dropped, the terminal end kept
    nn_ = {k: v for k, v in data.items() if k != "next_observations"}
    p2 = d4rl.write(tmp_path / "y.hdf5", nn_)
    ds2 = offline_data.load(p2)
    assert ds2.size == 8 and ds2.env is None
    assert np.allclose(ds2.fields["next_observations"][:3].numpy(), data["observations"][1:4])
    assert np.allclose(ds2.fields["next_observations"][4:8].numpy(), data["observations"][5:9])
    assert ds2.fields["terminals"][3] == 1.0


def test_minari_reader_matches_the_d4rl_fields(tmp_path):
    rng = np.random.default_rng(1)
    data = episodes_data(rng, (4, 6))
    write_minari(tmp_path / "m", data, (4, 6))
    got, attrs = offline_data.read_minari(tmp_path / "m")
    for k in data:
        assert np.allclose(got[k], data[k]), k
    assert attrs["env"] == "Hopper-v5" and attrs["dataset_id"] == "test/hopper-v0"
    ds = offline_data.load(tmp_path / "m")
    assert ds.size == 10 and ds.env == "Hopper-v5" and ds.name == "m"


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda d: d.pop("terminals"), "missing field 'terminals'"),
        (lambda d: d["rewards"].__setitem__(2, np.nan), "row 2 holds NaN in 'rewards'"),
        (lambda d: d.__setitem__("actions", d["actions"][:-1]), "has 8 rows but rewards has 9"),
        (lambda d: d["actions"].__setitem__(0, 3.0), "[-1, 1]"),
    ],
)
def test_bad_datasets_raise_input_error(tmp_path, edit, needle):
    import h5py

    data = episodes_data(np.random.default_rng(2), (4, 5))
    edit(data)
    p = tmp_path / "bad.hdf5"
    with h5py.File(p, "w") as f:  # written raw: d4rl.write would refuse it
        for k, v in data.items():
            f.create_dataset(k, data=v)
    with pytest.raises(InputError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        offline_data.load(p)


def test_score_reference_prefers_the_dataset_then_d4rl(tmp_path):
    data = episodes_data(np.random.default_rng(3), (4, 5))
    a = offline_data.load(
        d4rl.write(tmp_path / "a.hdf5", data, attrs={"env": "Hopper-v5", "ref_min_return": 1.0, "ref_max_return": 9.0})
    )
    assert offline_data.score_reference(a, "Hopper-v5") == {
        "score_reference": "dataset",
        "ref_min_return": 1.0,
        "ref_max_return": 9.0,
    }
    b = offline_data.load(d4rl.write(tmp_path / "b.hdf5", data))
    assert offline_data.score_reference(b, "Hopper-v5")["score_reference"] == "d4rl"
    assert offline_data.score_reference(b, None)["score_reference"] is None


def _strip(recs):
    drop = {"train_hz", "actions_per_s_b1", "actions_per_s_b256"}
    return [{k: v for k, v in r.items() if k not in drop} for r in recs]


@pytest.mark.parametrize("algo", offline.ALGOS)
def test_same_seed_same_records_and_losses_finite(tmp_path, algo):
    data = episodes_data(np.random.default_rng(4), (40, 40), o=4, a=2)
    p = d4rl.write(tmp_path / "d.hdf5", data)
    cfg = _cfg(dataset=str(p), algo=(algo,), steps=12, eval_interval=6)
    r1 = list(offline.run(cfg, seed=3))
    r2 = list(offline.run(cfg, seed=3))
    r3 = list(offline.run(cfg, seed=4))
    assert _strip(r1) == _strip(r2)
    steps = [r for r in r1 if r["kind"] == "step"]
    assert len(steps) == 4 and {r["seed"] for r in steps} == {3, 4}
    assert all(math.isfinite(r["actor_loss"]) for r in steps)
    assert all((r["critic_loss"] is None) == (algo == "bc") for r in steps)
    assert [r["actor_loss"] for r in steps] != [r["actor_loss"] for r in r3 if r["kind"] == "step"]
    res = next(r for r in r1 if r["kind"] == "result")
    assert res["normalized_score_final"] is None and res["evaluation"].startswith("skipped")
    assert res["actions_per_s_b1"] > 0 and res["train_hz"] > 0 and res["nfe"] == (5 if algo == "diffusion-ql" else 1)


def test_bfq_bernoulli_selects_one_term_per_seed(monkeypatch):
    """lam = 1: only L_bnd is computed; lam = 0: only L_comp (the paper: one term per update)."""
    calls = {"bnd": 0, "comp": 0}
    ob, oc = bfq.boundary_loss, bfq.composition_loss
    monkeypatch.setattr(bfq, "boundary_loss", lambda *a: (calls.__setitem__("bnd", calls["bnd"] + 1), ob(*a))[1])
    monkeypatch.setattr(bfq, "composition_loss", lambda *a: (calls.__setitem__("comp", calls["comp"] + 1), oc(*a))[1])
    g = torch.Generator().manual_seed(0)
    b = {
        "observations": torch.randn(2, 16, 4),
        "next_observations": torch.randn(2, 16, 4),
        "actions": torch.rand(2, 16, 3) * 2 - 1,
        "rewards": torch.randn(2, 16),
        "terminals": torch.zeros(2, 16),
    }
    for lam, want in ((1.0, (3, 0)), (0.0, (0, 3))):
        calls.update(bnd=0, comp=0)
        ag = bfq.BFQ(_cfg(bfq_lam=lam), 4, 3, 2, generator=g)
        for _ in range(3):
            out = ag.update(b)
        assert (calls["bnd"], calls["comp"]) == want and out["actor_loss"].shape == (2,)


def _bandit_one_step_spread(**kw):
    """BFQ on a bandit (terminal rewards = sum of the action, so the critic's best action is the
    bound +1) whose behaviour actions are N(0, 0.3^2): the spread (std) and the share at the
    bounds of the stochastic one-step actions after 300 updates."""
    g = torch.Generator().manual_seed(0)
    ag = bfq.BFQ(_cfg(hidden=(64, 64), batch_size=128, ema_start=0, **kw), 4, 2, 2, generator=g)
    dg = torch.Generator().manual_seed(1)
    obs = torch.randn(4096, 4, generator=dg)
    act = (0.3 * torch.randn(4096, 2, generator=dg)).clamp(-1, 1)
    fields = {
        "observations": obs,
        "next_observations": obs,
        "actions": act,
        "rewards": act.sum(-1),
        "terminals": torch.ones(4096),
    }
    for _ in range(300):
        idx = torch.randint(0, 4096, (2, 128), generator=dg)
        ag.update({k: v[idx] for k, v in fields.items()})
    with torch.no_grad():
        a = ag.act(obs[:512].expand(2, 512, 4), deterministic=False)
    return a.std().item(), (a.abs() > 0.99).float().mean().item()


def test_bfq_one_step_map_stays_tied_to_the_behaviour_under_the_q_term():
    """The Q term acts on pi(eps, 0, 1); the behaviour term must reach that same map. With DDPM's
    1000 t features and no L_comp rows at (r, t) = (0, 1), the one-step map collapsed onto the
    bound (std 0.009, 99.7% of actions at +-1, also at eta = 0.1), as BFQ's Hopper runs did; with
    the defaults it keeps part of the behaviour's spread (0.3) while moving towards the bound."""
    std, sat = _bandit_one_step_spread()
    assert std > 0.1 and sat < 0.8, (std, sat)


@pytest.mark.slow
def test_bfq_former_time_features_collapse_the_one_step_map_on_the_bandit():
    """The same bandit with the former settings (1000 t features, no one-step rows in L_comp) and
    the same eta = 0.1: the one-step map collapses onto the bound."""
    std0, sat0 = _bandit_one_step_spread(bfq_time_scale=1000.0, bfq_onestep_frac=0.0)
    assert std0 < 0.05 and sat0 > 0.95, (std0, sat0)


def test_bfq_time_features_put_the_one_step_query_near_training_times():
    """r = 0 (the one-step query) must look like the small r that L_comp trains on (sorted
    uniforms: P(r < 0.02) ~ 6%): the features of r = 0.02 within 10% of the distance to r = 0.5."""
    cfg = offline.Config()
    e = lambda r: bfq.time_embedding(torch.tensor([[r]]), cfg.bfq_time_embed, cfg.bfq_time_scale)
    near, far = (e(0.02) - e(0.0)).norm().item(), (e(0.5) - e(0.0)).norm().item()
    assert near < 0.1 * far, (near, far)
    e1000 = lambda r: bfq.time_embedding(torch.tensor([[r]]), cfg.bfq_time_embed, 1000.0)
    assert (e1000(0.02) - e1000(0.0)).norm() > 0.5 * (
        e1000(0.5) - e1000(0.0)
    ).norm()  # the former scale: no nearer than r = 0.5


def test_sample_times_puts_the_one_step_rows_at_r0_t1():
    g = torch.Generator().manual_seed(0)
    tm = bfq.sample_times(g, 2, 64, 1e-3, "cpu", onestep_frac=0.25)
    assert (tm["r"][:, :16] == 0).all() and (tm["t"][:, :16] == 1).all()
    assert (
        (tm["r"][:, 16:] > 0).all()
        and (tm["t"][:, 16:] < 1).all()
        and (tm["r"] < tm["m"]).all()
        and (tm["m"] < tm["t"]).all()
    )
    assert offline.Config().bfq_onestep_frac == 0.25


# ---------------- the reader on files made the way D4RL ships them ----------------


def _qlearning_dataset(d):
    """d4rl.qlearning_dataset (Farama-Foundation/D4RL d4rl/__init__.py) with timeouts, written out
    independently: rows 0..N-2, a timeout row skipped, next observation = the following row."""
    rows = {k: [] for k in ("observations", "next_observations", "actions", "rewards", "terminals")}
    for i in range(len(d["rewards"]) - 1):
        if d["timeouts"][i]:
            continue
        for k, v in (
            ("observations", d["observations"][i]),
            ("next_observations", d["observations"][i + 1]),
            ("actions", d["actions"][i]),
            ("rewards", d["rewards"][i]),
            ("terminals", d["terminals"][i]),
        ):
            rows[k].append(v)
    return {k: np.asarray(v, dtype=np.float32) for k, v in rows.items()}


def _record(path, **kw):
    return offline_data.load(path, **kw).record()


def test_timeouts_only_file_keeps_every_episode(tmp_path):
    """Every episode ends by timeout (as in every HalfCheetah file): 3 episodes, each losing its
    last row (no successor), the boundaries kept; the same transitions as qlearning_dataset."""
    from tests.methods.bfq_synth import write_d4rl_file

    d = write_d4rl_file(tmp_path / "t.hdf5", (5, 7, 6), ("timeout",) * 3)
    rec = _record(tmp_path / "t.hdf5")
    rets = [d["rewards"][0:4].sum(), d["rewards"][5:11].sum(), d["rewards"][12:17].sum()]
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_ends"]) == (15, 3, 3)
    assert rec["boundaries"] == "terminals and timeouts"
    assert rec["return_min"] == pytest.approx(min(rets), rel=1e-5) and rec["return_max"] == pytest.approx(
        max(rets), rel=1e-5
    )
    assert rec["return_mean"] == pytest.approx(np.mean(rets), rel=1e-5)
    ds = offline_data.load(tmp_path / "t.hdf5")
    assert ds.info["return_range"] == pytest.approx(max(rets) - min(rets), rel=1e-5)
    ref = _qlearning_dataset(d)
    for k, v in ref.items():
        assert np.allclose(ds.fields[k].numpy(), v), k


def test_terminals_only_file_and_mixed_file_match_qlearning_dataset(tmp_path):
    from tests.methods.bfq_synth import write_d4rl_file

    d = write_d4rl_file(tmp_path / "t.hdf5", (5, 7, 6), ("terminal",) * 3)
    rec = _record(tmp_path / "t.hdf5")
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_ends"]) == (18, 3, 0)
    assert rec["return_max"] == pytest.approx(
        max(d["rewards"][0:5].sum(), d["rewards"][5:12].sum(), d["rewards"][12:].sum())
    )
    d = write_d4rl_file(tmp_path / "m.hdf5", (4, 6, 3, 5), ("terminal", "timeout", "terminal", "timeout"), seed=1)
    rec = _record(tmp_path / "m.hdf5")
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_ends"]) == (16, 4, 2)
    ds = offline_data.load(tmp_path / "m.hdf5")
    for k, v in _qlearning_dataset(d).items():
        assert np.allclose(ds.fields[k].numpy(), v), k


def test_file_without_timeouts_is_cut_every_max_episode_steps(tmp_path):
    """No timeouts key (qlearning_dataset's rule): an episode also ends at max_episode_steps rows
    since the last boundary; its last row is dropped. 4 | 5 | 5 | 3 rows (terminal, then cut by
    the limit 5 twice, then the file ends): 4 + 4 + 4 + 2 transitions in 4 episodes."""
    from tests.methods.bfq_synth import write_d4rl_file

    d = write_d4rl_file(tmp_path / "n.hdf5", (4, 5, 5, 3), ("terminal", "cut", "cut", "cut"), timeouts=False)
    rec = _record(tmp_path / "n.hdf5", max_episode_steps=5)
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_ends"]) == (14, 4, 3)
    assert "every 5 steps" in rec["boundaries"]
    ds = offline_data.load(tmp_path / "n.hdf5", max_episode_steps=5)
    kept = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15]
    assert np.allclose(ds.fields["observations"].numpy(), d["observations"][kept])
    assert np.allclose(ds.fields["next_observations"].numpy(), d["observations"][[k + 1 for k in kept]])


def test_nonfinite_row_is_named_or_dropped_and_counted(tmp_path):
    import h5py

    from tests.methods.bfq_synth import write_d4rl_file

    write_d4rl_file(tmp_path / "x.hdf5", (5, 7, 6), ("timeout",) * 3)
    with h5py.File(tmp_path / "x.hdf5", "r+") as f:
        f["observations"][7, 2] = np.nan
    with pytest.raises(InputError, match=r"row 7 holds NaN in 'observations' \(1 row with NaN or inf in all\)"):
        offline_data.load(tmp_path / "x.hdf5")
    rec = _record(tmp_path / "x.hdf5", drop_nonfinite=True)  # row 7, and row 6 whose next observation it is
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_nonfinite"], rec["rows_dropped_ends"]) == (
        13,
        3,
        2,
        3,
    )


def test_truncated_minari_episode_keeps_all_transitions(tmp_path):
    data = episodes_data(np.random.default_rng(5), (4, 6), terminal_last=(False, True))
    write_minari(tmp_path / "m", data, (4, 6))
    rec = offline_data.load(tmp_path / "m").record()
    assert (rec["transitions"], rec["episodes"], rec["rows_dropped_ends"]) == (10, 2, 0)


# ---------------- divergence ----------------


def test_rewards_of_1e30_stop_the_run_as_diverged(tmp_path, capsys):
    data = episodes_data(np.random.default_rng(4), (40, 40), o=4, a=2)
    data["rewards"][:] = 1e30
    p = d4rl.write(tmp_path / "d.hdf5", data)
    recs = list(offline.run(_cfg(dataset=str(p), algo=("bfq", "bc"), steps=12, eval_interval=6), seed=0))
    res = {r["algo"]: r for r in recs if r["kind"] == "result"}
    assert res["bfq"]["diverged"] is True and res["bfq"]["diverged_step"] == 1
    assert res["bfq"]["diverged_what"] == "critic_loss" and res["bfq"]["normalized_score_final"] is None
    assert res["bc"]["diverged"] is False and res["bc"]["steps"] == 12
    assert not [r for r in recs if r["kind"] == "step" and r["algo"] == "bfq"]
    assert recs[-1]["diverged"] == ["bfq"]
    assert "bfq train bfq (seeds 0-1): training diverged at step 1" in capsys.readouterr().err


# ---------------- baselines at their official settings ----------------


def test_diffusion_ql_networks_are_the_official_ones():
    d = offline.agent_class("diffusion-ql")(offline.Config(), 11, 3, 1)
    assert d.model.mid.activation == "mish" and d.critic.net.activation == "mish"
    assert [tuple(x.weight.shape[1:]) for x in d.model.mid.layers] == [(3 + 16 + 11, 256), (256, 256), (256, 256)]
    assert [tuple(x.weight.shape[1:]) for x in (*d.model.time_mlp.mlp.layers, d.model.time_mlp.mlp.out)] == [
        (16, 32),
        (32, 16),
    ]
    assert d.nfe == 5 and d.cfg.dql_candidates == 50 and not d.normalizes
    # the time features: SinusoidalPosEmb(16) of the integer step, frequencies log(1e4) / (8 - 1)
    from icml26.methods.rl.offline_nets import dql_sinusoidal

    f = torch.exp(torch.arange(8) * -(math.log(10000) / 7))
    assert torch.allclose(dql_sinusoidal(torch.tensor([3]))[0], torch.cat([(3 * f).sin(), (3 * f).cos()]))
    # gradient-norm clip from the official per-dataset table, 1.0 elsewhere
    gn = lambda fam, kind: (
        offline.agent_class("diffusion-ql")(_cfg(), 4, 2, 1, info={"family": fam, "kind": kind}).grad_norm
    )
    assert (gn("hopper", "medium"), gn("walker2d", "medium"), gn("hopper", "medium-replay"), gn(None, None)) == (
        9.0,
        1.0,
        4.0,
        1.0,
    )


def test_diffusion_ql_acts_by_softmax_q_over_50_candidates():
    """Each state's action is one of 50 chain samples drawn with probability softmax(Q): with a
    critic whose Q is 1000 x the first action coordinate, the pick is the best of the 50."""
    d = offline.agent_class("diffusion-ql")(_cfg(), 4, 2, 2, generator=torch.Generator().manual_seed(0))
    rows = []
    d.model.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[1]))
    d.critic.q = lambda obs, act, target=False, detach=False: (1000 * act[..., 0]).unsqueeze(1).expand(-1, 2, -1)
    obs = torch.randn(2, 3, 4)
    a = d.act(obs)
    assert rows == [3 * 50] * 5 and a.shape == (2, 3, 2)
    g = d.gen.get_state()
    cands = d.sample(obs.repeat_interleave(50, dim=1)).view(2, 3, 50, 2)
    d.gen.set_state(g)
    assert (a[..., 0] >= cands[..., 0].quantile(0.9, dim=-1)).all()


def test_fql_networks_and_mean_q_backup_are_the_official_ones():
    f = offline.agent_class("fql")(offline.Config(), 11, 3, 1)
    widths = lambda m: [x.weight.shape[-1] for x in m.layers]
    assert widths(f.flow) == widths(f.onestep) == widths(f.critic.net) == [512] * 4
    assert f.critic.net.layer_norm and not f.flow.layer_norm and not f.onestep.layer_norm
    assert f.critic.net.activation == "gelu" and f.cfg.fql_q_agg == "mean" and f.cfg.fql_flow_steps == 10
    assert not f.normalizes
    # the backup: r + gamma * mean of the two target critics (the official default, not the min)
    g = _cfg(seeds=1)
    fq = offline.agent_class("fql")(g, 4, 2, 1, generator=torch.Generator().manual_seed(0))
    b = {
        "observations": torch.randn(1, 8, 4),
        "next_observations": torch.randn(1, 8, 4),
        "actions": torch.rand(1, 8, 2) * 2 - 1,
        "rewards": torch.randn(1, 8),
        "terminals": torch.zeros(1, 8),
    }
    real = fq.critic.q
    fq.critic.q = lambda o, a, target=False, detach=False: (
        torch.tensor([1.0, 3.0]).view(1, 2, 1).expand(1, 2, o.shape[1])
        if target
        else real(o, a, target=target, detach=detach)
    )
    with torch.no_grad():
        q0 = real(b["observations"], b["actions"])
    out = fq.update(b)
    want = ((q0 - (b["rewards"] + 0.99 * 2.0)[:, None]) ** 2).mean()
    assert out["critic_loss"].item() == pytest.approx(want.item(), rel=1e-5)


def test_iql_actor_lr_follows_the_cosine_schedule():
    ag = offline.agent_class("iql")(_cfg(steps=8, seeds=1), 4, 2, 1)
    b = {
        "observations": torch.randn(1, 8, 4),
        "next_observations": torch.randn(1, 8, 4),
        "actions": torch.rand(1, 8, 2) * 2 - 1,
        "rewards": torch.randn(1, 8),
        "terminals": torch.zeros(1, 8),
    }
    for _ in range(3):
        ag.update(b)
    # optax.cosine_decay_schedule(3e-4, 8) at the third actor update (count 2)
    assert ag.optimizers["actor"].param_groups[0]["lr"] == pytest.approx(3e-4 * 0.5 * (1 + math.cos(math.pi * 2 / 8)))
    assert ag.optimizers["critic"].param_groups[0]["lr"] == 3e-4
    assert [x.weight.shape[-1] for x in ag.actor.layers] == [32, 32] and not ag.normalizes
    assert [x.weight.shape[-1] for x in offline.agent_class("iql")(offline.Config(), 4, 2, 1).actor.layers] == [
        256,
        256,
    ]


def test_gradient_clip_per_seed_equals_torch_clip_on_each_seed_alone():
    from icml26.methods.rl.offline_agent import clip_grad_norm_per_seed

    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(4, 3, 5, generator=g)), torch.nn.Parameter(torch.randn(4, 1, 5, generator=g))]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g) * 3
    want = []
    for s in range(2):  # seed s owns members 2 s, 2 s + 1 (two critics)
        alone = [torch.nn.Parameter(p.detach()[2 * s : 2 * s + 2].clone()) for p in ps]
        for a, p in zip(alone, ps):
            a.grad = p.grad[2 * s : 2 * s + 2].clone()
        torch.nn.utils.clip_grad_norm_(alone, max_norm=1.0)
        want.append([a.grad for a in alone])
    clip_grad_norm_per_seed(ps, 2, 1.0)
    for s in range(2):
        for w, p in zip(want[s], ps):
            assert torch.allclose(p.grad[2 * s : 2 * s + 2], w)


def test_td3bc_normalises_observations_and_the_others_as_their_code():
    info = {"obs_mean": np.full(4, 2.0, np.float32), "obs_std": np.full(4, 4.0, np.float32)}
    norm = {a: offline.agent_class(a)(_cfg(), 4, 2, 1, info=info).normalizes for a in offline.ALGOS}
    assert norm == {"bfq": True, "fql": False, "diffusion-ql": False, "iql": False, "td3bc": True, "bc": True}
    td = offline.agent_class("td3bc")(_cfg(), 4, 2, 1, info=info)
    assert torch.allclose(td.normalize(torch.full((1, 1, 4), 6.0)), torch.ones(1, 1, 4))


def test_diffusion_ql_chain_follows_the_official_p_sample_loop():
    """The reverse chain recomputed with the official code's expressions (agents/diffusion.py:
    vp_beta_schedule, predict_start_from_noise, q_posterior, p_sample; numpy, independent of
    the agent's buffers), on a fixed noise model and the same noise draws."""
    N = 5
    d = offline.agent_class("diffusion-ql")(_cfg(dql_steps=N), 4, 2, 1)
    g = torch.Generator().manual_seed(3)
    draws = [torch.randn(1, 3, 2, generator=g) for _ in range(N)]
    it = iter(draws)
    d.noise = lambda *shape: next(it)
    d.model.forward = lambda x, i, obs: 0.3 * x + 0.1 * i[..., None].float()  # eps(x, i, s)
    got = d.sample(torch.zeros(1, 3, 4))[0].numpy()
    t = np.arange(1, N + 1)
    betas = 1 - np.exp(-0.1 / N - 0.5 * (10.0 - 0.1) * (2 * t - 1) / N**2)
    ac = np.cumprod(1 - betas)
    ac_prev = np.concatenate([[1.0], ac[:-1]])
    var = betas * (1 - ac_prev) / (1 - ac)
    x = draws[0][0].double().numpy()
    for k, i in enumerate(reversed(range(N))):
        eps = 0.3 * x + 0.1 * i
        x0 = np.clip(np.sqrt(1 / ac[i]) * x - np.sqrt(1 / ac[i] - 1) * eps, -1, 1)
        mean = (
            betas[i] * np.sqrt(ac_prev[i]) / (1 - ac[i]) * x0
            + (1 - ac_prev[i]) * np.sqrt(1 - betas[i]) / (1 - ac[i]) * x
        )
        noise = draws[k + 1][0].double().numpy() if i > 0 else 0.0
        x = mean + (i != 0) * np.exp(0.5 * np.log(np.maximum(var[i], 1e-20))) * noise
    assert np.allclose(got, np.clip(x, -1, 1), atol=1e-5)


def test_expert_is_the_best_evaluated_snapshot_not_the_final_policy():
    """D4RL's expert is the best policy trained: with the Hopper-v5 SAC run's last evaluations in
    docs/bfq.md (1013 at 115k, 907, 2781 at 125k, 2368 at 130k) the expert and the score maximum are
    the 125k snapshot, not the final policy."""
    from icml26.core.errors import InputError
    from icml26.methods.rl.offline_make import expert_policy

    evals = {115_000: 1013.0, 120_000: 907.0, 125_000: 2781.0, 130_000: 2368.0}
    assert expert_policy(evals, set(evals)) == 125_000
    assert expert_policy(evals, {120_000, 130_000}) == 130_000  # only kept policies can be rolled out
    assert expert_policy({5: 3.0, 10: 3.0}, {5, 10}) == 5  # equal returns: the earlier one
    with pytest.raises(InputError, match="keeps no evaluated policy"):
        expert_policy(evals, set())


@pytest.mark.parametrize("algo", ["bfq", "fql"])
def test_load_trained_gives_the_final_evaluation_again(tmp_path, algo):
    """A finished run's checkpoint, loaded on its own, acts as the trained agent did: evaluated on the
    final evaluation's episodes it returns the final step records' returns (BFQ acts without noise;
    FQL draws z from its generator, restored from the checkpoint)."""
    from tests.methods.bfq_synth import write_d4rl_file

    write_d4rl_file(tmp_path / "p.hdf5", (50, 50), ("timeout", "timeout"), o=3, a=1, env="Pendulum-v1")
    cfg = _cfg(dataset=str(tmp_path / "p.hdf5"), algo=(algo,), steps=12, eval_interval=6, eval_episodes=2)
    recs = list(offline.run(cfg, seed=5, out=tmp_path / "run"))
    final = [r["eval_return"] for r in recs if r["kind"] == "step" and r["step"] == 12]
    data, env_id, _ = offline.validate(cfg)
    agent, updates = offline.load_trained(cfg, algo, data, tmp_path / "run", seed=5)
    assert updates == 12 and env_id == "Pendulum-v1"
    again = offline.evaluate(agent, data, env_id, cfg, seed=5, n_eval=1)
    if algo == "bfq":
        np.testing.assert_allclose(again, final, rtol=1e-9)
    else:  # the generator moved on during training's evaluation; the weights are the trained ones
        fresh, _ = offline.load_trained(cfg, algo, data, tmp_path / "run", seed=5)
        np.testing.assert_allclose(offline.evaluate(fresh, data, env_id, cfg, seed=5, n_eval=1), again, rtol=1e-9)
        untrained = offline.agent_class(algo)(cfg, 3, 1, cfg.seeds, generator=torch.Generator().manual_seed(0))
        same_noise, _ = offline.load_trained(cfg, algo, data, tmp_path / "run", seed=5)
        untrained.load_state_tensors({**untrained.state_tensors(), "rng.torch": same_noise.gen.get_state()})
        assert not np.allclose(offline.evaluate(untrained, data, env_id, cfg, seed=5, n_eval=1), again)
    with pytest.raises(InputError, match="other settings"):
        offline.load_trained(offline.Config(**{**cfg.__dict__, "steps": 13}), algo, data, tmp_path / "run", seed=5)
    with pytest.raises(InputError, match="no checkpoint"):
        offline.load_trained(cfg, algo, data, tmp_path / "nothing", seed=5)
