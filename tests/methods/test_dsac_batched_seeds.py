"""Batched seeds: a multi-seed learner with the MuJoCo family's settings (GroupNorm, orthogonal
init, Huber + homogeneous loss, fused Adam, 4 critics) gives each seed the numbers a separate
one-seed learner gets over several updates (with the same initial weights, batches and noise),
and the GroupNorm layer equals torch.nn.GroupNorm."""

import pytest
import torch

from icml26.methods.rl import dsac_aid as m
from icml26.methods.rl.nets import BatchedGroupNorm
from icml26.methods.rl.sac import Learner, LearnerSpec


def _slice(t: torch.Tensor, k: int, S: int) -> torch.Tensor:
    """Seed k's part of a batched tensor whose leading dimension is S * X (or a scalar)."""
    if t.ndim == 0:
        return t
    X = t.shape[0] // S
    return t[k * X : (k + 1) * X]


def _spec(seeds: int, algo: str) -> LearnerSpec:
    # the GOPS MuJoCo family (GroupNorm without affine, orthogonal init, Huber) at 8 channels per group
    cfg = m.resolve_family(
        m.Config(env="Hopper-v5", family="mujoco", seeds=seeds, hidden=(32, 32), norm_groups=4, num_q=4)
    )
    assert (cfg.norm_groups, cfg.init, cfg.huber, cfg.norm_affine) == (4, "orthogonal", True, False)
    spec = m.learner_spec(cfg, algo, 5, 2)
    assert spec.fused_adam
    return spec


@pytest.mark.parametrize("algo", ["dsac-aid", "dsac-t", "sac"])
def test_batched_seeds_equal_separate_learners_over_updates(algo):
    S, B, U = 3, 12, 5  # 5 updates: critic steps every update, actors / alpha / Polyak at 0, 2, 4
    LS = Learner(_spec(S, algo), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # beta and the EMAs differ per seed so that a mixed-up seed shows
        LS.beta.copy_(torch.tensor([0.1, 0.3, 0.0]) if algo == "dsac-aid" else LS.beta)
        LS.log_alpha.copy_(torch.tensor([1.0, 0.5, -0.2]))
    init = {k: v.clone() for k, v in LS.state_dict().items()}
    singles = []
    for k in range(S):
        L1 = Learner(_spec(1, algo), generator=torch.Generator().manual_seed(100 + k))
        L1.load_state_dict({n: _slice(v, k, S).clone() for n, v in init.items()})
        singles.append(L1)
    g = torch.Generator().manual_seed(7)
    noises: list[torch.Tensor] = []
    orig = LS._noise

    def recording(*shape):
        n = orig(*shape)
        noises.append(n)
        return n

    LS._noise = recording
    for u in range(U):
        batch = (
            torch.randn(S, B, 5, generator=g),
            torch.rand(S, B, 2, generator=g) * 2 - 1,
            50 * torch.randn(S, B, generator=g),
            torch.randn(S, B, 5, generator=g),
            (torch.rand(S, B, generator=g) < 0.2).float(),
        )
        noises.clear()
        LS.update(*batch)
        for k, L1 in enumerate(singles):
            it = iter(list(noises))
            L1._noise = lambda *shape, it=it, k=k: next(it)[k : k + 1]
            L1.update(*(x[k : k + 1] for x in batch))
    moved = 0
    for name, v in LS.state_dict().items():
        if v.dtype.is_floating_point and not torch.equal(v, init[name]):
            moved += 1
        for k, L1 in enumerate(singles):
            torch.testing.assert_close(
                L1.state_dict()[name], _slice(v, k, S), rtol=2e-5, atol=2e-5, msg=f"{name}, seed {k}"
            )
    assert moved >= 10  # the updates changed the weights (the comparison is not of untouched copies)
    for name, opt in LS._opts().items():  # Adam moments too
        for k, L1 in enumerate(singles):
            o1 = L1._opts()[name]
            for pS, p1 in zip(opt.param_groups[0]["params"], o1.param_groups[0]["params"]):
                torch.testing.assert_close(
                    o1.state[p1]["exp_avg_sq"], _slice(opt.state[pS]["exp_avg_sq"], k, S), rtol=2e-3, atol=1e-5
                )


def test_batched_group_norm_equals_torch_group_norm():
    torch.manual_seed(0)
    G, B, C, ng = 3, 9, 32, 16
    bn = BatchedGroupNorm(G, ng, C).double()
    with torch.no_grad():
        bn.weight.normal_()
        bn.bias.normal_()
    x = (3 * torch.randn(G, B, C, dtype=torch.float64) + 1).requires_grad_(True)
    y = bn(x)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    for g in range(G):
        ref = torch.nn.GroupNorm(ng, C).double()
        with torch.no_grad():
            ref.weight.copy_(bn.weight[g, 0])
            ref.bias.copy_(bn.bias[g, 0])
        xg = x.detach()[g].clone().requires_grad_(True)
        yg = ref(xg)
        torch.testing.assert_close(y[g], yg, rtol=1e-10, atol=1e-10)
        (yg * w[g]).sum().backward()
        torch.testing.assert_close(x.grad[g], xg.grad, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(bn.weight.grad[g, 0], ref.weight.grad, rtol=1e-9, atol=1e-10)
