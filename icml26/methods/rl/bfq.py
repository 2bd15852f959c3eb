"""BFQ: Bootstrapped Flow Q-learning (Nguyen et al., ICML 2026, arXiv 2606.10613; no official code).

A flow policy network F(a_t, s, emb(t), emb(r)) gives the policy operator (t = 1 noise, t = 0
action, a_t = (1 - t) a + t eps)  pi(a_t, r, t; s) = a_t - (t - r) F(a_t, s, t, r), which maps a
point of the flow at time t to time r (identity at r = t). Training, per update:

1. L_bnd: F(a_t, s, t, t - D) regressed on eps - a, D ~ U[0, D_max] (D_max = 1e-3);
2. L_comp: pi(a_t, r, t) = sg[pi(pi(a_t, m, t), r, m)] for sorted uniforms r < m < t, online
   weights under stop-gradient; a share ``bfq_onestep_frac`` of rows at (r, t) = (0, 1);
3. L_BC = (1 - lam) L_comp + lam L_bnd, one Bernoulli(lam) draw per update and seed;
4. actor loss L_BC - eta / mean|Q(s, a_D)| * mean Q(s, clip(pi(eps, 0, 1; s))): the one-step
   map pushed up the critic directly (one forward pass, no BPTT, no distillation);
5. double-Q critic with target min_j Qbar_j(s', pi_ema(eps', 0, 1; s')), EMA actor (0.995, every
   5 updates, after 1000) as Diffusion-QL; 3x256 networks (ReLU, Mish collapsed the one-step map).

RECON (not in the paper's text as read; docs/bfq.md "Method" gives the reasons): the
preconditioning form a_t - (t - r) F; t ~ U(D, 1] for L_bnd; a_t from a dataset action in
L_comp; the critic details; the actor's Q as the mean of both critics; time features of 10 t;
the one-step rows of L_comp; eta 0.1; evaluation with eps = 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from icml26.methods.rl.offline_agent import OfflineAgent
from icml26.methods.rl.offline_nets import time_embedding

__all__ = ["BFQ", "boundary_loss", "composition_loss", "policy_operator", "sample_times", "time_embedding"]

VelocityFn = Callable[[Tensor, Tensor, Tensor], Tensor]  # (x (S,B,a), r (S,B,1), t (S,B,1)) -> (S,B,a)


def policy_operator(F: VelocityFn, x: Tensor, r: Tensor, t: Tensor) -> Tensor:
    """pi(x, r, t) = x - (t - r) F(x, r, t): the point at time r of the flow through x at time t.
    x (S, B, a); r, t (S, B, 1)."""
    return x - (t - r) * F(x, r, t)


def composition_loss(F: VelocityFn, a_t: Tensor, r: Tensor, m: Tensor, t: Tensor) -> Tensor:
    """L_comp per seed: mean over batch and action dims of ||pi(a_t, r, t) - sg[pi(pi(a_t, m, t), r, m)]||^2
    (the paper's loss 1, as read). a_t (S, B, a); r <= m <= t (S, B, 1). Returns (S,). Zero for an exact
    straight flow (F constant along each path), positive for a flow that bends."""
    pred = policy_operator(F, a_t, r, t)
    with torch.no_grad():
        target = policy_operator(F, policy_operator(F, a_t, m, t), r, m)
    return ((pred - target) ** 2).mean((-2, -1))


def boundary_loss(F: VelocityFn, a: Tensor, eps: Tensor, t: Tensor, d: Tensor) -> Tensor:
    """L_bnd per seed: mean ||F(a_t, t - d, t) - (eps - a)||^2 with a_t = (1 - t) a + t eps
    (the paper's loss 2, conditional flow matching at short range d). a, eps (S, B, a); t, d (S, B, 1).
    Returns (S,)."""
    a_t = (1.0 - t) * a + t * eps
    return ((F(a_t, t - d, t) - (eps - a)) ** 2).mean((-2, -1))


def sample_times(
    gen: torch.Generator, S: int, B: int, d_max: float, device: str, onestep_frac: float = 0.0
) -> dict[str, Tensor]:
    """The times of one update: sorted (r, m, t) for L_comp; (t_b, d) with d ~ U[0, d_max],
    t_b ~ U(d, 1] for L_bnd. Each (S, B, 1). ``onestep_frac``: the first round(frac B) rows of
    L_comp get (r, t) = (0, 1), the one-step query itself, with m their middle uniform."""
    u = torch.rand(S, B, 3, generator=gen, device=device).sort(-1).values
    d = torch.rand(S, B, 1, generator=gen, device=device) * d_max
    tb = d + (1.0 - d) * (1.0 - torch.rand(S, B, 1, generator=gen, device=device))  # (d, 1]
    r, m, t = u[..., :1], u[..., 1:2], u[..., 2:]
    k = round(onestep_frac * B)
    if k:
        r = torch.cat([torch.zeros_like(r[:, :k]), r[:, k:]], 1)
        t = torch.cat([torch.ones_like(t[:, :k]), t[:, k:]], 1)
    return {"r": r, "m": m, "t": t, "t_b": tb, "d": d}


class BFQ(OfflineAgent):
    """BFQ in the shared harness (see the module docstring); ``nfe`` = 1 per action."""

    name = "bfq"
    nfe = 1

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.emb = c.bfq_time_embed
        self.flow = self.mlp(S, a + o + 2 * self.emb, a)
        self.flow_ema = self.mlp(S, a + o + 2 * self.emb, a)
        self.flow_ema.load_state_dict(self.flow.state_dict())
        self.flow_ema.requires_grad_(False)
        self.critic = self.double_q()
        self.optimizers = {
            "actor": torch.optim.Adam(self.flow.parameters(), lr=c.lr),
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
        }

    def velocity(self, obs: Tensor, ema: bool = False) -> VelocityFn:
        net = self.flow_ema if ema else self.flow
        sc = self.cfg.bfq_time_scale

        def F(x, r, t):
            return net(torch.cat([x, obs, time_embedding(t, self.emb, sc), time_embedding(r, self.emb, sc)], -1))

        return F

    def one_step(self, obs: Tensor, eps: Tensor, ema: bool = False) -> Tensor:
        """pi(eps, 0, 1; s) = eps - F(eps, s, 1, 0), clipped to [-1, 1]: ONE network call (the
        embeddings of t = 1, r = 0 are constants, computed once). obs (S, B, o), eps (S, B, a)."""
        S, B, _ = eps.shape
        if getattr(self, "_emb10", None) is None or self._emb10.device != eps.device:
            one = torch.ones(1, 1, 1, device=eps.device)
            sc = self.cfg.bfq_time_scale
            self._emb10 = torch.cat(
                [time_embedding(one, self.emb, sc), time_embedding(0 * one, self.emb, sc)], -1
            )  # (1, 1, 2 emb)
        net = self.flow_ema if ema else self.flow
        return (eps - net(torch.cat([eps, obs, self._emb10.expand(S, B, -1)], -1))).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        eps = (
            torch.zeros(*obs.shape[:-1], self.act_dim, device=obs.device)
            if deterministic
            else self.noise(*obs.shape[:-1], self.act_dim)
        )
        return self.one_step(obs, eps)

    def update(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        c = self.cfg
        obs, act, S, B = b["observations"], b["actions"], self.S, b["observations"].shape[1]
        # critic TD step (target actions from the EMA one-step map)
        with torch.no_grad():
            a2 = self.one_step(b["next_observations"], self.noise(S, B, self.act_dim), ema=True)
            y = self.td_target(b, self.critic.q(b["next_observations"], a2, target=True).min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)  # (S,)
        self.step("critic", critic_loss.sum())
        # L_BC: one Bernoulli(lam) draw per seed selects L_bnd (1) or L_comp (0)
        eps = self.noise(S, B, self.act_dim)
        tm = sample_times(self.gen, S, B, c.bfq_d_max, self.device, c.bfq_onestep_frac)
        xi = (torch.rand(S, generator=self.gen, device=self.device) < c.bfq_lam).float()
        F = self.velocity(obs)
        bc = torch.zeros(S, device=self.device)
        if bool(xi.any()):
            bc = bc + xi * boundary_loss(F, act, eps, tm["t_b"], tm["d"])
        if not bool(xi.all()):
            a_t = (1.0 - tm["t"]) * act + tm["t"] * eps
            bc = bc + (1.0 - xi) * composition_loss(F, a_t, tm["r"], tm["m"], tm["t"])
        # Q term on the one-step action, alpha = eta / mean |Q(s, a_D)| (no gradient)
        a_pi = self.one_step(obs, self.noise(S, B, self.act_dim))
        q_pi = self.critic.q(obs, a_pi, detach=True).mean(1)  # (S, B)
        alpha = c.bfq_eta / q.detach().abs().mean((1, 2)).clamp(min=1e-6)
        actor_loss = bc - alpha * q_pi.mean(-1)
        self.step("actor", actor_loss.sum())
        self.critic.soft_update(c.tau)
        self.ema_update(self.flow_ema, self.flow)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "q": q.detach().mean((1, 2))}
