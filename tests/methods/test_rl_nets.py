"""Batched networks of the SAC-family learner: parity with separate torch.nn modules (outputs and
gradients), the variance decomposition oracle, and the LCB/UCB targets on hand-made numbers."""

import math

import pytest
import torch
from torch import nn

from icml26.methods.rl.nets import BatchedMLP, ensemble_moments, lower_bound, tanh_gaussian, upper_bound
from icml26.methods.rl.sac import Learner, LearnerSpec


def _separate(batched: BatchedMLP, g: int, norm: bool) -> nn.Sequential:
    """Member g of a BatchedMLP as a torch.nn.Sequential of Linear / GroupNorm / ReLU, same weights."""
    layers = []
    for i, lin in enumerate(batched.layers):
        m = nn.Linear(lin.weight.shape[1], lin.weight.shape[2])
        with torch.no_grad():
            m.weight.copy_(lin.weight[g].T)
            m.bias.copy_(lin.bias[g, 0])
        layers.append(m)
        if norm:
            gn = nn.GroupNorm(batched.norms[i].num_groups, lin.weight.shape[2])
            with torch.no_grad():
                gn.weight.copy_(batched.norms[i].weight[g, 0] + 0.1 * i)
                gn.bias.copy_(batched.norms[i].bias[g, 0] - 0.05)
                batched.norms[i].weight[g, 0].copy_(gn.weight)
                batched.norms[i].bias[g, 0].copy_(gn.bias)
            layers.append(gn)
        layers.append(nn.ReLU())
    m = nn.Linear(batched.out.weight.shape[1], batched.out.weight.shape[2])
    with torch.no_grad():
        m.weight.copy_(batched.out.weight[g].T)
        m.bias.copy_(batched.out.bias[g, 0])
    layers.append(m)
    return nn.Sequential(*layers)


@pytest.mark.parametrize("norm", [False, True])
def test_batched_mlp_matches_separate_modules_outputs_and_gradients(norm):
    torch.manual_seed(0)
    G, B, D = 5, 7, 6
    net = BatchedMLP(
        G, D, (32, 32), 3, activation="relu", norm_groups=16 if norm else 0, init="orthogonal" if norm else "default"
    )
    seps = [_separate(net, g, norm).double() for g in range(G)]
    net.double()  # float64: GroupNorm over 2-channel groups amplifies float32 rounding
    x = torch.randn(G, B, D, dtype=torch.float64)
    y = net(x)
    ys = torch.stack([seps[g](x[g]) for g in range(G)])
    torch.testing.assert_close(y, ys, rtol=1e-7, atol=1e-9)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    for g in range(G):
        (seps[g](x[g]) * w[g]).sum().backward()
        torch.testing.assert_close(net.layers[0].weight.grad[g], seps[g][0].weight.grad.T, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(net.out.bias.grad[g, 0], seps[g][-1].bias.grad, rtol=1e-7, atol=1e-9)
        if norm:
            torch.testing.assert_close(net.norms[1].weight.grad[g, 0], seps[g][4].weight.grad, rtol=1e-7, atol=1e-9)


def test_batched_seeds_learner_matches_separate_learners():
    """A 3-seed learner's critic loss gradient for seed k equals a 1-seed learner's with the same
    weights and batch (the ensemble dimension and the seed dimension are independent members)."""
    torch.manual_seed(1)
    spec3 = LearnerSpec(
        algo="dsac-aid", obs_dim=4, act_dim=2, seeds=3, hidden=(16, 16), norm_groups=16, init="orthogonal"
    )
    L3 = Learner(spec3, generator=torch.Generator().manual_seed(3))
    B = 9
    obs, act = torch.randn(3, B, 4), torch.rand(3, B, 2) * 2 - 1
    q3, s3 = L3.critic_forward(L3.critic, obs, act)  # (S, M, B)
    (q3.sum() + s3.sum()).backward()
    M = spec3.num_q
    for k in range(3):
        spec1 = LearnerSpec(**{**spec3.__dict__, "seeds": 1})
        L1 = Learner(spec1, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            for p1, p3 in zip(L1.critic.parameters(), L3.critic.parameters()):
                p1.copy_(p3[k * M : (k + 1) * M])
        q1, s1 = L1.critic_forward(L1.critic, obs[k : k + 1], act[k : k + 1])
        torch.testing.assert_close(q1[0], q3[k], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(s1[0], s3[k], rtol=1e-5, atol=1e-6)
        (q1.sum() + s1.sum()).backward()
        for p1, p3 in zip(L1.critic.parameters(), L3.critic.parameters()):
            torch.testing.assert_close(p1.grad, p3.grad[k * M : (k + 1) * M], rtol=1e-5, atol=1e-5)


def test_full_update_batched_equals_separate_seeds():
    """One whole update (critic, actor, behaviour actor, alpha, Polyak) of a 2-seed learner equals
    two 1-seed learners given the same weights, batch and noise (noise tensors patched in)."""
    spec2 = LearnerSpec(
        algo="dsac-aid", obs_dim=3, act_dim=2, seeds=2, hidden=(16,), norm_groups=0, huber=False, homogeneous=False
    )
    L2 = Learner(spec2, generator=torch.Generator().manual_seed(0))
    B = 6
    g = torch.Generator().manual_seed(9)
    batch = (
        torch.randn(2, B, 3, generator=g),
        torch.rand(2, B, 2, generator=g) * 2 - 1,
        torch.randn(2, B, generator=g),
        torch.randn(2, B, 3, generator=g),
        (torch.rand(2, B, generator=g) < 0.2).float(),
    )
    noises: list[torch.Tensor] = []

    def recording(orig):
        def f(*shape):
            n = orig(*shape)
            noises.append(n)
            return n

        return f

    L2._noise = recording(L2._noise)
    L2.update(*batch)
    ones = []
    for k in range(2):
        L1 = Learner(LearnerSpec(**{**spec2.__dict__, "seeds": 1}), generator=torch.Generator().manual_seed(0))
        fresh = Learner(spec2, generator=torch.Generator().manual_seed(0))  # L2's initial weights
        with torch.no_grad():
            for (n1, p1), (n2, p2) in zip(L1.named_parameters(), fresh.named_parameters()):
                M = p2.shape[0] // 2
                p1.copy_(p2[k * M : (k + 1) * M])
            for (n1, b1), (n2, b2) in zip(L1.named_buffers(), fresh.named_buffers()):
                if b2.ndim and b2.shape[0] == 2:
                    b1.copy_(b2[k : k + 1])
            for t1, t2 in ((L1.critic_target, fresh.critic_target), (L1.actor_target, fresh.actor_target)):
                for p1, p2 in zip(t1.parameters(), t2.parameters()):
                    M = p2.shape[0] // 2
                    p1.copy_(p2[k * M : (k + 1) * M])
        it = iter(noises)
        L1._noise = lambda *shape, it=it, k=k: next(it)[k : k + 1]
        L1.update(*(x[k : k + 1] for x in batch))
        ones.append(L1)
    for name, p2 in L2.named_parameters():
        M = p2.shape[0] // 2
        for k in range(2):
            p1 = dict(ones[k].named_parameters())[name]
            torch.testing.assert_close(p1, p2[k * M : (k + 1) * M], rtol=1e-5, atol=1e-6, msg=name)


def test_variance_decomposition_oracle():
    """Ensemble of Gaussians: epistemic = variance of the means (unbiased), aleatoric = mean of
    the variances; their sum is the mixture's variance (law of total variance, with the biased
    variance of the means)."""
    q = torch.tensor([[1.0, 2.0, 4.0, 7.0]])  # (B=1, M=4)
    sigma = torch.tensor([[0.5, 1.0, 1.5, 2.0]])
    mean, epi, ale = ensemble_moments(q, sigma, dim=1)
    assert mean.item() == pytest.approx(3.5)
    assert epi.item() == pytest.approx(sum((x - 3.5) ** 2 for x in (1, 2, 4, 7)) / 3)  # 7.0
    assert ale.item() == pytest.approx((0.25 + 1 + 2.25 + 4) / 4)  # 1.875
    # mixture variance by sampling: E[var] + Var_biased[mean]
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 4, (400_000,), generator=g)
    samples = q[0, idx] + sigma[0, idx] * torch.randn(400_000, generator=g)
    assert samples.var().item() == pytest.approx(ale.item() + epi.item() * 3 / 4, rel=0.01)


def test_lcb_ucb_targets_hand_made():
    q = torch.tensor([[1.0, 2.0, 4.0, 7.0]])
    sigma = torch.tensor([[0.5, 1.0, 1.5, 2.0]])
    lam, beta = 0.71, 0.1
    want = 3.5 - math.sqrt(lam**2 * 7.0 + beta**2 * 1.875)
    assert lower_bound(q, sigma, 1, lam, beta).item() == pytest.approx(want, rel=1e-6)
    assert upper_bound(q, sigma, 1, lam, beta).item() == pytest.approx(
        3.5 + math.sqrt(lam**2 * 7.0 + beta**2 * 1.875), rel=1e-6
    )
    # beta = 0: the epistemic-only bound mean - lam * std
    assert lower_bound(q, sigma, 1, lam, 0.0).item() == pytest.approx(3.5 - lam * math.sqrt(7.0), rel=1e-6)
    # per-seed beta as a tensor broadcasting over the batch
    lb = lower_bound(q.expand(2, 4), sigma.expand(2, 4), 1, lam, torch.tensor([0.0, 1.0]))
    assert lb[1].item() == pytest.approx(3.5 - math.sqrt(lam**2 * 7.0 + 1.875), rel=1e-6)


def test_tanh_gaussian_log_prob_matches_change_of_variables():
    torch.manual_seed(0)
    out = torch.randn(5, 4)
    noise = torch.randn(5, 2)
    a, logp = tanh_gaussian(out, -20, 0.5, noise=noise)
    mean, log_std = out.chunk(2, -1)
    std = log_std.clamp(-20, 0.5).exp()
    u = mean + std * noise
    want = torch.distributions.Normal(mean, std).log_prob(u).sum(-1) - torch.log(1 - torch.tanh(u) ** 2).sum(-1)
    torch.testing.assert_close(logp, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a, torch.tanh(u))


@pytest.mark.parametrize("algo", ["dsac-aid", "dsac-aid-epi", "dsac-t"])
def test_critic_targets_on_hand_made_ensemble(algo):
    """Mean target r + g(1-d)(bound' - alpha log pi') and sampled targets, on hand-made numbers:
    dsac-aid: the LCB with beta0 = 0.1; dsac-aid-epi: beta = 0; dsac-t: min Q' and the sample of
    the critic with the smaller mean."""
    M = 4 if algo != "dsac-t" else 2
    spec = LearnerSpec(
        algo=algo,
        obs_dim=2,
        act_dim=1,
        seeds=1,
        hidden=(16,),
        norm_groups=0,
        huber=False,
        homogeneous=False,
        lam=0.71,
        beta0=0.1,
    )
    L = Learner(spec, generator=torch.Generator().manual_seed(0))
    qn = torch.tensor([1.0, 2.0, 4.0, 7.0][:M]).view(1, M, 1)
    sn = torch.tensor([0.5, 1.0, 1.5, 2.0][:M]).view(1, M, 1)
    eps = torch.tensor([0.5, -1.0, 2.0, 3.0][:M]).view(1, M, 1)
    r, d, logp = torch.tensor([[1.5]]), torch.tensor([[0.0]]), torch.tensor([[0.3]])
    y, z, unc = L.targets(r, d, qn, sn, logp, eps)
    a, g = math.e, 0.99
    if algo == "dsac-t":
        want_y = 1.5 + g * (1.0 - a * 0.3)
        want_z = [1.5 + g * (1.0 + 0.5 * 0.5 - a * 0.3)] * 2  # critic 0 has the smaller mean
    else:
        beta = 0.1 if algo == "dsac-aid" else 0.0
        epi, ale = 7.0, 1.875
        want_y = 1.5 + g * (3.5 - math.sqrt(0.71**2 * epi + beta**2 * ale) - a * 0.3)
        want_z = [1.5 + g * (q + e * s - a * 0.3) for q, e, s in zip((1, 2, 4, 7), (0.5, -1, 2, 3), (0.5, 1, 1.5, 2))]
        assert unc.item() == pytest.approx(math.sqrt(epi + (beta / 0.71) ** 2 * ale), rel=1e-5)
    assert y.item() == pytest.approx(want_y, rel=1e-5)
    torch.testing.assert_close(z.flatten(), torch.tensor(want_z), rtol=1e-5, atol=1e-5)
    # a terminal transition: the target is the reward alone
    y_t, z_t, _ = L.targets(r, torch.tensor([[1.0]]), qn, sn, logp, eps)
    assert y_t.item() == pytest.approx(1.5) and torch.allclose(z_t, torch.full_like(z_t, 1.5))


# ---------------- the official formulas, recomputed (yzy-yuzhouyang/GOPS) ----------------


def test_orthogonal_init_gains_and_groupnorm_without_affine_as_gops_mlp():
    """gops/apprfunc/mlp.py (28974ab): orthogonal gain sqrt(2) on hidden layers, 1.0 on each head
    (mean / std heads separately), zero biases, GroupNorm(affine=False)."""
    net = BatchedMLP(
        3,
        7,
        (32, 48),
        4,
        norm_groups=16,
        init="orthogonal",
        norm_affine=False,
        head_chunks=2,
        generator=torch.Generator().manual_seed(0),
    )
    for lin, gain in ((net.layers[0], 2.0), (net.layers[1], 2.0)):
        for g in range(3):
            w = lin.weight[g].T  # (out, in) as nn.Linear
            gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            torch.testing.assert_close(gram, gain * torch.eye(gram.shape[0]), rtol=0, atol=1e-5)
        assert torch.count_nonzero(lin.bias) == 0
    for g in range(3):
        for c in range(2):  # each head (2 outputs of 48 inputs): orthonormal rows, gain 1
            w = net.out.weight[g].T[2 * c : 2 * c + 2]
            torch.testing.assert_close(w @ w.T, torch.eye(2), rtol=0, atol=1e-5)
    assert torch.count_nonzero(net.out.bias) == 0
    assert all(n.weight is None and n.bias is None for n in net.norms)
    assert not any("norms" in name for name, _ in net.named_parameters())
    x = torch.randn(3, 5, 7)
    h = torch.nn.functional.linear(x[1], net.layers[0].weight[1].T, net.layers[0].bias[1, 0])
    want = nn.GroupNorm(16, 32, affine=False)(h)
    torch.testing.assert_close(net.norms[0](h.unsqueeze(0).expand(3, 5, 32))[1], want, rtol=1e-5, atol=1e-5)


def _learner_and_batch(algo, **kw):
    spec = LearnerSpec(algo=algo, obs_dim=3, act_dim=2, seeds=1, hidden=(16, 16), lam=0.71, beta0=0.1, **kw)
    L = Learner(spec, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    B = 9
    batch = (
        torch.randn(1, B, 3, generator=g),
        torch.rand(1, B, 2, generator=g) * 2 - 1,
        40 * torch.randn(1, B, generator=g),  # residuals on both sides of the Huber delta 50
        torch.randn(1, B, 3, generator=g),
        torch.tensor([[0.0, 0, 1, 0, 0, 0, 1, 0, 0]]),
    )
    with torch.no_grad():  # spread sigma and the target critics so that the clamps and the 3 sbar bound act
        L.critic.out.bias[:, 0, 1].copy_(torch.linspace(-2.0, 3.0, L.critic.out.bias.shape[0]))
        L.critic_target.out.bias[:, 0, 0].copy_(torch.linspace(-60.0, 80.0, L.critic.out.bias.shape[0]))
        L.critic_target.out.bias[:, 0, 1].copy_(torch.linspace(1.0, 30.0, L.critic.out.bias.shape[0]))
    draws: list[torch.Tensor] = []
    orig = L._noise
    L._noise = lambda *shape: draws.append(orig(*shape)) or draws[-1]
    return L, batch, draws


def _ours(L, batch):
    params = list(L.critic.parameters())
    loss, _ = L.critic_loss(*batch)
    return loss.detach(), torch.autograd.grad(loss, params)


def _nets(L, batch, draws):
    """The networks' outputs the official code would see, with the same noise draws."""
    obs, act, rew, obs2, done = batch
    q, sig = L.critic_forward(L.critic, obs, act)
    with torch.no_grad():
        out = L.actor_target(obs2) if L.actor_target is not None else L.actor(obs2)
        from icml26.methods.rl.nets import tanh_gaussian as tg

        a2, logp2 = tg(out, -20.0, 0.5, noise=draws[0])
        qn, sn = L.critic_forward(L.critic_target, obs2, a2)
    eps = draws[1].clamp(-3, 3)
    return q[0], sig[0], rew[0], done[0], qn[0], sn[0], eps[0], logp2[0]


@pytest.mark.parametrize("form", ["gradient", "variance"])
def test_aid_sigma_loss_value_and_gradient_as_gops(form):
    """dsacaid.py's Huber + homogeneous critic loss, per critic i in a loop as GOPS writes it:
    gradient (1ea49ca): rq Huber(q, y) + rs sigma (sd^2 - 2 Huber(qd, zb)) / (sd + b);
    variance (640e85a): rq Huber(q, y) + rs Huber(sigma^2, (qd - zb)^2) / (2 sd^2 + b)."""
    L, batch, draws = _learner_and_batch("dsac-aid", huber=True, homogeneous=True, sigma_loss=form)
    loss, grads = _ours(L, batch)
    q, sig, r, d, qn, sn, eps, logp2 = _nets(L, batch, draws)
    alpha, gam, lam, beta, b, M = math.e, 0.99, 0.71, 0.1, 0.1, 4
    qdet = q.detach()
    u_epi = torch.var(qdet, dim=0)
    mean_u_epi = torch.mean(u_epi)
    unc = torch.sqrt(torch.clip(torch.var(qn, 0) + (beta / lam) ** 2 * torch.mean(sn**2, 0), min=1e-8))
    tq_next = torch.mean(qn, 0) - lam * unc
    total = 0.0
    for i in range(M):
        sbar = torch.mean(sig[i].detach())
        target_q = r + (1 - d) * gam * (tq_next - alpha * logp2)
        target_z = r + (1 - d) * gam * (qn[i] + eps[i] * sn[i] - alpha * logp2)
        zb = qdet[i] + torch.clamp(target_z - qdet[i], -3 * sbar, 3 * sbar)
        sd = torch.clamp(sig[i], min=0.0).detach()
        q_ratio = ((sbar**2 + mean_u_epi + b) / (sd**2 + u_epi + b)).clamp(0.1, 10)
        s_ratio = ((sbar**2 + b) / (sd**2 + b)).clamp(0.01, 100)
        hq = torch.nn.functional.huber_loss(q[i], target_q, delta=50.0, reduction="none")
        if form == "gradient":
            hz = torch.nn.functional.huber_loss(qdet[i], zb, delta=50.0, reduction="none")
            li = q_ratio * hq + s_ratio * sig[i] * (sd**2 - 2 * hz) / (sd + b)
        else:
            hs = torch.nn.functional.huber_loss(sig[i] ** 2, (qdet[i] - zb) ** 2, delta=50.0, reduction="none")
            li = q_ratio * hq + s_ratio * hs / (2 * sd**2 + b)
        total = total + torch.mean(li)
    want = torch.autograd.grad(total, list(L.critic.parameters()))
    assert loss.item() == pytest.approx(total.item(), rel=1e-5)
    for a, w in zip(grads, want):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("huber", [False, True])
def test_dsact_critic_loss_value_and_gradient_as_gops(huber):
    """gops/algorithm/dsact.py (a1b91bc): min of the two target means, the sample of the critic
    with the smaller target mean; plain: (sbar^2 + b) mean[-sg(y - q) q / (sd^2 + b) -
    ((qd - zb)^2 - sd^2) sigma / (sd^3 + b)]; Huber: ratio sbar^2 / (sd^2 + b) clamped [0.1, 10]."""
    L, batch, draws = _learner_and_batch("dsac-t", dsact_huber=huber)
    loss, grads = _ours(L, batch)
    q, sig, r, d, qn, sn, eps, logp2 = _nets(L, batch, draws)
    alpha, gam, b = math.e, 0.99, 0.1
    z1, z2 = qn[0] + eps[0] * sn[0], qn[1] + eps[1] * sn[1]
    q_next = torch.min(qn[0], qn[1])
    q_next_sample = torch.where(qn[0] < qn[1], z1, z2)
    total = 0.0
    for i in range(2):
        mean_std = torch.mean(sig[i].detach())
        target_q = r + (1 - d) * gam * (q_next - alpha * logp2)
        target_s = r + (1 - d) * gam * (q_next_sample - alpha * logp2)
        qd = q[i].detach()
        bound = qd + torch.clamp(target_s - qd, -3 * mean_std, 3 * mean_std)
        sd = torch.clamp(sig[i], min=0.0).detach()
        if huber:
            ratio = (mean_std**2 / (sd**2 + b)).clamp(0.1, 10)
            li = torch.mean(
                ratio * torch.nn.functional.huber_loss(q[i], target_q, delta=50, reduction="none")
                + ratio
                * sig[i]
                * (sd**2 - torch.nn.functional.huber_loss(qd, bound, delta=50, reduction="none"))
                / (sd + b)
            )
        else:
            li = (mean_std**2 + b) * torch.mean(
                -(target_q - q[i]).detach() / (sd**2 + b) * q[i] - ((qd - bound) ** 2 - sd**2) / (sd**3 + b) * sig[i]
            )
        total = total + li
    want = torch.autograd.grad(total, list(L.critic.parameters()))
    assert loss.item() == pytest.approx(total.item(), rel=1e-5)
    for a, w in zip(grads, want):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-6)
