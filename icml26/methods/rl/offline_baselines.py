"""The baselines of ``icml26 bfq``, each a small ``OfflineAgent`` in the shared harness (offline.py).

- ``FQL`` (Park, Li, Levine 2025, arXiv 2502.02538; seohongpark/fql agents/fql.py): a flow-BC
  velocity field v(s, x_t, t) (t = 0 noise, t = 1 action, x_t = (1 - t) z + t a, target a - z)
  and a one-step policy mu(s, z) trained with ``bc_flow + alpha * ||mu(s, z) - sg[flow(s, z)]||^2
  - Q(s, mu)`` where flow(s, z) is 10 Euler steps of v; normalize_q_loss divides the Q term by
  mean |Q| (the README's advice); target actions from the current one-step policy.
- ``DiffusionQL`` (Wang, Hunt, Zhou 2023, arXiv 2208.06193; Zhendong-Wang/Diffusion-Policies-for-
  Offline-RL agents/ql_diffusion.py, diffusion.py): DDPM noise-prediction policy with N steps of the
  VP schedule, x0 clipped to [-1, 1]; actor ``bc + eta * (-Q_i(s, a) / mean|Q_j(s, a)|)`` with
  (i, j) a random order of the two critics and a = the full reverse chain (backpropagated
  through all N steps); EMA actor for the target actions. Evaluation: the chain with zero noise
  (deterministic; the official code's 50-candidate softmax(Q) pick is not used; RECON).
- ``IQL`` (Kostrikov, Nair, Levine 2022, arXiv 2110.06169; tinkoff-ai/CORL iql.py): expectile V,
  Q on r + gamma V(s'), advantage-weighted Gaussian actor (mean tanh, state-independent log std),
  exp(beta A) clipped at 100, locomotion rewards x 1000 / (max - min episode return).
- ``TD3BC`` (Fujimoto & Gu 2021, arXiv 2106.06860): TD3 with target smoothing (0.2, clip 0.5),
  delayed actor (2) ``-lambda Q1(s, pi(s)) + ||pi(s) - a||^2``, lambda = alpha / mean|Q1|.
- ``BC``: deterministic tanh policy, mean-squared error to the dataset action.

Common: ``nets.BatchedMLP`` with the harness's hidden widths (sinusoidal time inputs for the
diffusion model, the scalar t for FQL's flow as its code does); actions clipped to [-1, 1].
RECON: DQL's time-embedding MLP is replaced by its sinusoidal features concatenated (no extra MLP).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icml26.methods.rl.bfq import time_embedding
from icml26.methods.rl.offline import OfflineAgent


class FQL(OfflineAgent):
    name = "fql"
    nfe = 1

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.flow = self.mlp(S, o + a + 1, a)  # v(s, x_t, t)
        self.onestep = self.mlp(S, o + a, a)  # mu(s, z)
        self.critic = self.double_q()
        self.optimizers = {
            "actor": torch.optim.Adam([*self.flow.parameters(), *self.onestep.parameters()], lr=c.lr),
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
        }

    def mu(self, obs: Tensor, z: Tensor) -> Tensor:
        return self.onestep(torch.cat([obs, z], -1))

    @torch.no_grad()
    def flow_actions(self, obs: Tensor, z: Tensor) -> Tensor:
        """``fql_flow_steps`` Euler steps of v from z (t = 0) to t = 1, clipped to [-1, 1]."""
        K = self.cfg.fql_flow_steps
        x = z
        for i in range(K):
            t = torch.full((*x.shape[:-1], 1), i / K, device=x.device)
            x = x + self.flow(torch.cat([obs, x, t], -1)) / K
        return x.clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        z = (
            torch.zeros(*obs.shape[:-1], self.act_dim, device=obs.device)
            if deterministic
            else self.noise(*obs.shape[:-1], self.act_dim)
        )
        return self.mu(obs, z).clamp(-1.0, 1.0)

    def update(self, b):
        c, S = self.cfg, self.S
        obs, act = b["observations"], b["actions"]
        B = obs.shape[1]
        with torch.no_grad():
            a2 = self.mu(b["next_observations"], self.noise(S, B, self.act_dim)).clamp(-1.0, 1.0)
            y = self.td_target(b, self.critic.q(b["next_observations"], a2, target=True).min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)
        self.step("critic", critic_loss.sum())
        z = self.noise(S, B, self.act_dim)
        t = torch.rand(S, B, 1, generator=self.gen, device=self.device)
        x_t = (1 - t) * z + t * act
        bc_flow = ((self.flow(torch.cat([obs, x_t, t], -1)) - (act - z)) ** 2).mean((-2, -1))
        z2 = self.noise(S, B, self.act_dim)
        target = self.flow_actions(obs, z2)
        a_pi = self.mu(obs, z2)
        distill = ((a_pi - target) ** 2).mean((-2, -1))
        qp = self.critic.q(obs, a_pi.clamp(-1.0, 1.0), detach=True).mean(1)  # (S, B)
        q_loss = -qp.mean(-1)
        if c.fql_normalize_q:
            q_loss = q_loss / qp.detach().abs().mean(-1).clamp(min=1e-6)
        actor_loss = bc_flow + c.fql_alpha * distill + q_loss
        self.step("actor", actor_loss.sum())
        self.critic.soft_update(c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}


def vp_betas(n: int) -> Tensor:
    """DQL's ``vp_beta_schedule``: beta_i = 1 - exp(-b_min / N - (b_max - b_min) (2 i - 1) / (2 N^2)),
    i = 1..N, b_min 0.1, b_max 10. Returns (N,) float32."""
    i = torch.arange(1, n + 1, dtype=torch.float64)
    b_max, b_min = 10.0, 0.1
    alpha = torch.exp(-b_min / n - 0.5 * (b_max - b_min) * (2 * i - 1) / n**2)
    return (1 - alpha).float()


class DiffusionQL(OfflineAgent):
    name = "diffusion-ql"
    temb = 16

    @property
    def nfe(self) -> int:
        return self.cfg.dql_steps

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.model = self.mlp(S, a + o + self.temb, a)  # eps_theta(x_t, t, s)
        self.model_ema = self.mlp(S, a + o + self.temb, a)
        self.model_ema.load_state_dict(self.model.state_dict())
        self.model_ema.requires_grad_(False)
        self.critic = self.double_q()
        betas = vp_betas(c.dql_steps)
        ab = torch.cumprod(1 - betas, 0)
        ab_prev = torch.cat([torch.ones(1), ab[:-1]])
        self.register_buffer("betas", betas)
        self.register_buffer("ab", ab)
        self.register_buffer("post_c1", betas * ab_prev.sqrt() / (1 - ab))  # posterior mean coefficients
        self.register_buffer("post_c2", (1 - ab_prev) * (1 - betas).sqrt() / (1 - ab))
        self.register_buffer("post_logvar", torch.log(torch.clamp(betas * (1 - ab_prev) / (1 - ab), min=1e-20)))
        self.optimizers = {
            "actor": torch.optim.Adam(self.model.parameters(), lr=c.lr),
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
        }

    def eps_model(self, net, x, i: int | Tensor, obs):
        """eps_theta(x_i, i, s): ``i`` an int (the same step for the batch: its embedding is a
        constant, computed once) or an (S, B, 1) tensor of steps."""
        S, B, _ = x.shape
        if torch.is_tensor(i):
            emb = time_embedding(i.float() / 1000.0, self.temb)
        else:
            if getattr(self, "_embs", None) is None or self._embs.device != x.device:
                steps = (
                    torch.arange(self.cfg.dql_steps, device=x.device, dtype=torch.float32)[:, None, None, None] / 1000.0
                )
                self._embs = time_embedding(steps, self.temb)  # (N, 1, 1, temb)
            emb = self._embs[i].expand(S, B, -1)
        return net(torch.cat([x, obs, emb], -1))

    def sample(self, obs: Tensor, *, ema: bool = False, deterministic: bool = False) -> Tensor:
        """The reverse chain x_N -> x_0 (N = dql_steps network calls), x0-prediction clipped to
        [-1, 1] at each step (DQL ``clip_denoised``); ``deterministic``: zero noise throughout."""
        net = self.model_ema if ema else self.model
        S, B, _ = obs.shape
        x = torch.zeros(S, B, self.act_dim, device=obs.device) if deterministic else self.noise(S, B, self.act_dim)
        for i in reversed(range(self.cfg.dql_steps)):
            eps = self.eps_model(net, x, i, obs)
            x0 = ((x - (1 - self.ab[i]).sqrt() * eps) / self.ab[i].sqrt()).clamp(-1.0, 1.0)
            x = self.post_c1[i] * x0 + self.post_c2[i] * x
            if i > 0 and not deterministic:
                x = x + (0.5 * self.post_logvar[i]).exp() * self.noise(S, B, self.act_dim)
        return x.clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        return self.sample(obs, deterministic=deterministic)

    def update(self, b):
        c, S = self.cfg, self.S
        obs, act = b["observations"], b["actions"]
        B = obs.shape[1]
        with torch.no_grad():
            a2 = self.sample(b["next_observations"], ema=True)
            y = self.td_target(b, self.critic.q(b["next_observations"], a2, target=True).min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)
        self.step("critic", critic_loss.sum())
        i = torch.randint(0, c.dql_steps, (S, B, 1), generator=self.gen, device=self.device)
        eps = self.noise(S, B, self.act_dim)
        ab = self.ab[i]
        x_t = ab.sqrt() * act + (1 - ab).sqrt() * eps
        bc = ((self.eps_model(self.model, x_t, i, obs) - eps) ** 2).mean((-2, -1))
        a_pi = self.sample(obs)
        qp = self.critic.q(obs, a_pi, detach=True)  # (S, 2, B)
        first = int(torch.rand((), generator=self.gen, device=self.device) < 0.5)
        q_loss = -qp[:, first].mean(-1) / qp[:, 1 - first].detach().abs().mean(-1).clamp(min=1e-6)
        actor_loss = bc + c.dql_eta * q_loss
        self.step("actor", actor_loss.sum())
        self.critic.soft_update(c.tau)
        self.ema_update(self.model_ema, self.model)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}


class IQL(OfflineAgent):
    name = "iql"
    nfe = 1

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.critic = self.double_q()
        self.value = self.mlp(S, o, 1)
        self.actor = self.mlp(S, o, a)
        self.log_std = torch.nn.Parameter(torch.zeros(S, 1, a))
        self.optimizers = {
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
            "value": torch.optim.Adam(self.value.parameters(), lr=c.lr),
            "actor": torch.optim.Adam([*self.actor.parameters(), self.log_std], lr=c.lr),
        }
        rr = self.info.get("return_range")
        self.reward_scale = 1000.0 / rr if (c.iql_reward_norm and rr and rr > 0) else 1.0

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        mean = torch.tanh(self.actor(obs))
        if deterministic:
            return mean
        return (mean + self.log_std.clamp(-5, 2).exp() * self.noise(*mean.shape)).clamp(-1.0, 1.0)

    def update(self, b):
        c = self.cfg
        obs, act = b["observations"], b["actions"]
        with torch.no_grad():
            q_t = self.critic.q(obs, act, target=True).min(1).values  # (S, B)
        v = self.value(obs)[..., 0]
        u = q_t - v
        w = torch.where(u < 0, 1 - c.iql_expectile, c.iql_expectile)
        value_loss = (w * u**2).mean(-1)
        self.step("value", value_loss.sum())
        with torch.no_grad():
            y = (
                b["rewards"] * self.reward_scale
                + c.gamma * (1.0 - b["terminals"]) * self.value(b["next_observations"])[..., 0]
            )
            adv = q_t - self.value(obs)[..., 0]
            wexp = torch.exp(c.iql_beta * adv).clamp(max=100.0)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)
        self.step("critic", critic_loss.sum())
        mean = torch.tanh(self.actor(obs))
        ls = self.log_std.clamp(-5.0, 2.0)
        logp = (-0.5 * ((act - mean) / ls.exp()) ** 2 - ls - 0.5 * math.log(2 * math.pi)).sum(-1)  # (S, B)
        actor_loss = -(wexp * logp).mean(-1)
        self.step("actor", actor_loss.sum())
        self.critic.soft_update(c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}


class TD3BC(OfflineAgent):
    name = "td3bc"
    nfe = 1

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.actor = self.mlp(S, o, a)
        self.actor_target = self.mlp(S, o, a)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.requires_grad_(False)
        self.critic = self.double_q()
        self.optimizers = {
            "actor": torch.optim.Adam(self.actor.parameters(), lr=c.lr),
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
        }
        self.last_actor_loss = None

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        return torch.tanh(self.actor(obs))

    def update(self, b):
        c = self.cfg
        obs, act = b["observations"], b["actions"]
        with torch.no_grad():
            a2 = torch.tanh(self.actor_target(b["next_observations"]))
            a2 = (
                a2 + (self.noise(*a2.shape) * c.td3bc_policy_noise).clamp(-c.td3bc_noise_clip, c.td3bc_noise_clip)
            ).clamp(-1.0, 1.0)
            y = self.td_target(b, self.critic.q(b["next_observations"], a2, target=True).min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)
        self.step("critic", critic_loss.sum())
        it = int(self.updates)
        self.updates += 1
        if it % c.td3bc_policy_freq == 0:
            pi = torch.tanh(self.actor(obs))
            q1 = self.critic.q(obs, pi, detach=True)[:, 0]  # (S, B)
            lmbda = c.td3bc_alpha / q1.detach().abs().mean(-1).clamp(min=1e-6)
            actor_loss = -lmbda * q1.mean(-1) + ((pi - act) ** 2).mean((-2, -1))
            self.step("actor", actor_loss.sum())
            self.critic.soft_update(c.tau)
            with torch.no_grad():
                torch._foreach_lerp_(list(self.actor_target.parameters()), list(self.actor.parameters()), c.tau)
            self.last_actor_loss = actor_loss.detach()
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": self.last_actor_loss if self.last_actor_loss is not None else torch.zeros(self.S),
        }


class BC(OfflineAgent):
    name = "bc"
    nfe = 1

    def build(self):
        self.actor = self.mlp(self.S, self.obs_dim, self.act_dim)
        self.optimizers = {"actor": torch.optim.Adam(self.actor.parameters(), lr=self.cfg.lr)}

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        return torch.tanh(self.actor(obs))

    def update(self, b):
        loss = ((torch.tanh(self.actor(b["observations"])) - b["actions"]) ** 2).mean((-2, -1))
        self.step("actor", loss.sum())
        return {"critic_loss": None, "actor_loss": loss.detach()}
