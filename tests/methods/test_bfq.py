"""BFQ and the offline-RL harness: flow-matching target (closed form), the composition loss, one
network call per one-step action, D4RL normalisation arithmetic, dataset readers on files made
here, determinism per seed."""

import json
import math

import numpy as np
import pytest
import torch

from icml26.core.errors import InputError
from icml26.methods.rl import bfq, d4rl, offline, offline_data
from tests.methods.bfq_synth import episodes_data, write_minari

pytest.importorskip("h5py")


def _cfg(**kw):
    base = dict(hidden=(32, 32), batch_size=32, steps=20, seeds=2, eval_interval=10, timing_s=0.01, ema_start=5)
    base.update(kw)
    return offline.Config(**base)


def test_boundary_loss_learns_the_closed_form_marginal_velocity():
    """1-D Gaussian data a ~ N(mu, s^2), eps ~ N(0, 1), a_t = (1-t) a + t eps: the flow-matching
    minimiser of L_bnd is E[eps - a | a_t = x] = -mu + (t - (1-t) s^2) / Var(a_t) (x - (1-t) mu)."""
    torch.manual_seed(0)
    mu, s = 0.3, 0.2
    ag = bfq.BFQ(_cfg(hidden=(64, 64)), 1, 1, 1, generator=torch.Generator().manual_seed(0))
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
    straight = lambda x, r, t: (x - a0) / t  # noqa: E731  the exact flow to a point mass at a0: straight paths
    assert bfq.composition_loss(straight, x, tm["r"], tm["m"], tm["t"]).abs().max().item() < 1e-10
    const = lambda x, r, t: torch.ones_like(x) * 0.7  # noqa: E731
    assert bfq.composition_loss(const, x, tm["r"], tm["m"], tm["t"]).abs().max().item() < 1e-10
    bent = lambda x, r, t: x * t**2  # noqa: E731  a velocity that changes along the path
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
    ds = offline_data.load(p, normalize_obs=True)
    back = ds.fields["observations"] * ds.obs_std + ds.obs_mean
    assert np.allclose(back.numpy(), data["observations"], atol=1e-5) and ds.env == "Hopper-v5" and ds.size == 9
    assert ds.info["return_range"] == pytest.approx(
        abs(data["rewards"][:4].sum() - data["rewards"][4:].sum()), rel=1e-5
    )
    # without next_observations: rebuilt within each episode, the cut (timeout) end dropped, the terminal end kept
    nn_ = {k: v for k, v in data.items() if k != "next_observations"}
    p2 = d4rl.write(tmp_path / "y.hdf5", nn_)
    ds2 = offline_data.load(p2, normalize_obs=False)
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
        (lambda d: d.pop("timeouts"), "missing field 'timeouts'"),
        (lambda d: d["rewards"].__setitem__(2, np.nan), "NaN"),
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
    res = [r for r in r1 if r["kind"] == "result"][0]
    assert res["normalized_score_final"] is None and res["evaluation"].startswith("skipped")
    assert res["actions_per_s_b1"] > 0 and res["train_hz"] > 0 and res["nfe"] == (5 if algo == "diffusion-ql" else 1)


def test_bfq_bernoulli_selects_one_term_per_seed(monkeypatch):
    """lam = 1: only L_bnd is computed; lam = 0: only L_comp (bfq.md: one term per update)."""
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
    e = lambda r: bfq.time_embedding(torch.tensor([[r]]), cfg.bfq_time_embed, cfg.bfq_time_scale)  # noqa: E731
    near, far = (e(0.02) - e(0.0)).norm().item(), (e(0.5) - e(0.0)).norm().item()
    assert near < 0.1 * far, (near, far)
    e1000 = lambda r: bfq.time_embedding(torch.tensor([[r]]), cfg.bfq_time_embed, 1000.0)  # noqa: E731
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
