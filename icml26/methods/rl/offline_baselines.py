"""The baselines of ``icml26 bfq`` at their official settings, each an ``OfflineAgent`` (offline_agent.py).

- ``FQL`` (Park, Li, Levine 2025, arXiv 2502.02538; seohongpark/fql @ 719d044, agents/fql.py,
  utils/networks.py): flow-BC field v(s, x_t, t) (x_t = (1 - t) z + t a, target a - z), one-step
  policy mu(s, z); loss bc_flow + alpha ||mu - sg[10 Euler steps of v]||^2 - Q(s, mu) (Q: mean of
  both critics, normalize_q_loss on as the README advises); target mean-Q (``q_agg`` 'mean');
  4x512 GELU, LayerNorm in the critic only, xavier-uniform init; one Adam step on the summed
  losses; evaluation mu(s, z) with z ~ N(0, I) (``sample_actions``). No observation scaling.
- ``DiffusionQL`` (Wang, Hunt, Zhou 2023, arXiv 2208.06193; Zhendong-Wang/Diffusion-Policies-for-
  Offline-RL @ d871f5c, agents/ql_diffusion.py, diffusion.py, model.py, main.py): DDPM noise
  model (VP schedule, N steps, x0 clipped) with time_mlp (SinusoidalPosEmb(16) -> 32 -> Mish
  -> 16), 3x256 Mish actor and critics; actor bc + eta (-Q_i / mean|Q_j|) with (i, j) a random
  order, through the whole chain; gradient-norm clip per dataset (main.py table); EMA actor
  untouched until step 1000, then every 5 updates; evaluation: 50 candidates from the stochastic
  chain, one drawn by softmax(min-Q of the target critics). No observation scaling.
- ``IQL`` (Kostrikov, Nair, Levine 2022, arXiv 2110.06169; ikostrikov/implicit_q_learning @
  09d7002, learner.py, critic.py, actor.py, policy.py): expectile V on the target critics' min,
  Q on r + gamma V(s'), AWR actor exp(beta A) clipped at 100 with a tanh mean and a state-free
  log std in [-5, 2], cosine decay of the actor's lr to 0; 2x256 ReLU, orthogonal(sqrt 2) init;
  locomotion rewards x 1000 / (max - min episode return). No observation scaling.
- ``TD3BC`` (Fujimoto & Gu 2021, arXiv 2106.06860; sfujim/TD3_BC @ 8791ad7): TD3, target
  smoothing 0.2 / 0.5, actor every 2 updates with -lambda Q1 + ||pi - a||^2, lambda = 2.5 /
  mean|Q1|; 2x256 ReLU; observations normalised.
- ``BC``: deterministic tanh policy on BFQ's networks, squared error to the dataset action.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from icml26.methods.rl.offline_agent import OfflineAgent
from icml26.methods.rl.offline_config import dql_grad_norm
from icml26.methods.rl.offline_nets import DQLTimeMLP


class FQL(OfflineAgent):
    name = "fql"
    nfe = 1
    obs_norm = False

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        net = {"hidden": c.fql_hidden, "activation": "gelu", "init": "xavier"}
        self.flow = self.mlp(S, o + a + 1, a, **net)  # v(s, x_t, t)
        self.onestep = self.mlp(S, o + a, a, **net)  # mu(s, z)
        self.critic = self.double_q(**net, layer_norm=True)
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
        """mu(s, z), z ~ N(0, I): the official ``sample_actions`` draws z at evaluation too."""
        return self.mu(obs, self.noise(*obs.shape[:-1], self.act_dim)).clamp(-1.0, 1.0)

    def update(self, b):
        c, S = self.cfg, self.S
        obs, act = b["observations"], b["actions"]
        B = obs.shape[1]
        with torch.no_grad():
            a2 = self.mu(b["next_observations"], self.noise(S, B, self.act_dim)).clamp(-1.0, 1.0)
            qn = self.critic.q(b["next_observations"], a2, target=True)
            y = self.td_target(b, qn.mean(1) if c.fql_q_agg == "mean" else qn.min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean((1, 2))
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
        # one loss, one step: the actor's Q term sees the critic before this update (as the JAX code)
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        (critic_loss.sum() + actor_loss.sum()).backward()
        for opt in self.optimizers.values():
            opt.step()
        self.critic.soft_update(c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "q": q.detach().mean((1, 2))}


def vp_betas(n: int) -> Tensor:
    """DQL's ``vp_beta_schedule``: beta_i = 1 - exp(-b_min / N - (b_max - b_min) (2 i - 1) / (2 N^2)),
    i = 1..N, b_min 0.1, b_max 10. Returns (N,) float32."""
    i = torch.arange(1, n + 1, dtype=torch.float64)
    b_max, b_min = 10.0, 0.1
    alpha = torch.exp(-b_min / n - 0.5 * (b_max - b_min) * (2 * i - 1) / n**2)
    return (1 - alpha).float()


class EpsNet(nn.Module):
    """Diffusion-QL's ``MLP``: eps(x, i, s) = final(mid(cat[x, time_mlp(i), s])) for G members."""

    def __init__(self, agent: OfflineAgent, G: int, o: int, a: int, hidden: tuple[int, ...], t_dim: int = 16):
        super().__init__()
        g = agent.gen if agent.gen.device.type == "cpu" else None
        self.time_mlp = DQLTimeMLP(G, t_dim, generator=g)
        self.mid = agent.mlp(G, a + t_dim + o, a, hidden=hidden, activation="mish", init="torch")

    def forward(self, x: Tensor, i: Tensor, obs: Tensor) -> Tensor:
        """x (G, B, a); i (G, B) or (G, 1) integer steps; obs (G, B, o)."""
        t = self.time_mlp(i).expand(*x.shape[:-1], -1)
        return self.mid(torch.cat([x, t, obs], -1))


class DiffusionQL(OfflineAgent):
    name = "diffusion-ql"
    obs_norm = False

    @property
    def nfe(self) -> int:
        return self.cfg.dql_steps

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        self.model = EpsNet(self, S, o, a, c.dql_hidden)
        self.model_ema = copy.deepcopy(self.model)
        self.model_ema.requires_grad_(False)
        self.critic = self.double_q(hidden=c.dql_hidden, activation="mish", init="torch")
        betas = vp_betas(c.dql_steps)
        ab = torch.cumprod(1 - betas, 0)
        ab_prev = torch.cat([torch.ones(1), ab[:-1]])
        self.register_buffer("ab", ab)
        self.register_buffer("post_c1", betas * ab_prev.sqrt() / (1 - ab))  # posterior mean coefficients
        self.register_buffer("post_c2", (1 - ab_prev) * (1 - betas).sqrt() / (1 - ab))
        self.register_buffer("post_logvar", torch.log(torch.clamp(betas * (1 - ab_prev) / (1 - ab), min=1e-20)))
        self.grad_norm = dql_grad_norm(c, self.info.get("family"), self.info.get("kind"))
        self.optimizers = {
            "actor": torch.optim.Adam(self.model.parameters(), lr=c.lr),
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=3e-4),  # fixed in ql_diffusion.py
        }

    def sample(self, obs: Tensor, *, ema: bool = False) -> Tensor:
        """The reverse chain from x_N ~ N(0, I) (N network calls), x0 clipped to [-1, 1] at each step
        (``clip_denoised``), no noise at the last step."""
        net = self.model_ema if ema else self.model
        S, B, _ = obs.shape
        x = self.noise(S, B, self.act_dim)
        for i in reversed(range(self.cfg.dql_steps)):
            eps = net(x, torch.full((S, 1), i, device=obs.device, dtype=torch.long), obs)
            x0 = ((x - (1 - self.ab[i]).sqrt() * eps) / self.ab[i].sqrt()).clamp(-1.0, 1.0)
            x = self.post_c1[i] * x0 + self.post_c2[i] * x
            if i > 0:
                x = x + (0.5 * self.post_logvar[i]).exp() * self.noise(S, B, self.act_dim)
        return x.clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """``sample_action``: ``dql_candidates`` chain samples per state, one drawn with probability
        softmax(min_j Qbar_j(s, a_k)) over the candidates k (stochastic, as the official evaluation)."""
        S, B, _ = obs.shape
        K = self.cfg.dql_candidates
        rep = obs.repeat_interleave(K, dim=1)  # (S, B K, o)
        a = self.sample(rep)
        q = self.critic.q(rep, a, target=True).min(1).values.reshape(S * B, K)
        k = torch.multinomial(torch.softmax(q, -1), 1, generator=self.gen)[:, 0]
        return a.reshape(S * B, K, -1)[torch.arange(S * B, device=obs.device), k].reshape(S, B, -1)

    def update(self, b):
        c, S = self.cfg, self.S
        obs, act = b["observations"], b["actions"]
        B = obs.shape[1]
        with torch.no_grad():
            a2 = self.sample(b["next_observations"], ema=True)
            y = self.td_target(b, self.critic.q(b["next_observations"], a2, target=True).min(1).values)
        q = self.critic.q(obs, act)
        critic_loss = ((q - y[:, None]) ** 2).mean(-1).sum(1)
        self.step("critic", critic_loss.sum(), clip=self.grad_norm)
        i = torch.randint(0, c.dql_steps, (S, B), generator=self.gen, device=self.device)
        eps = self.noise(S, B, self.act_dim)
        ab = self.ab[i][..., None]
        x_t = ab.sqrt() * act + (1 - ab).sqrt() * eps
        bc = ((self.model(x_t, i, obs) - eps) ** 2).mean((-2, -1))
        qp = self.critic.q(obs, self.sample(obs), detach=True)  # (S, 2, B)
        first = torch.rand(S, generator=self.gen, device=self.device) > 0.5  # per seed, as np.random.uniform() > 0.5
        qa = torch.where(first[:, None], qp[:, 0], qp[:, 1])
        qb = torch.where(first[:, None], qp[:, 1], qp[:, 0])
        q_loss = -qa.mean(-1) / qb.detach().abs().mean(-1).clamp(min=1e-6)
        actor_loss = bc + c.dql_eta * q_loss
        self.step("actor", actor_loss.sum(), clip=self.grad_norm)
        self.ema_update(self.model_ema, self.model, copy_before_start=False)
        self.critic.soft_update(c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "q": q.detach().mean((1, 2))}


class IQL(OfflineAgent):
    name = "iql"
    nfe = 1
    obs_norm = False

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        net = {"hidden": c.iql_hidden, "activation": "relu", "init": "orthogonal"}
        self.critic = self.double_q(**net)
        self.value = self.mlp(S, o, 1, **net)
        self.actor = self.mlp(S, o, a, **net)
        self.log_std = torch.nn.Parameter(torch.zeros(S, 1, a))
        self.optimizers = {
            "critic": torch.optim.Adam(self.critic.net.parameters(), lr=c.lr),
            "value": torch.optim.Adam(self.value.parameters(), lr=c.lr),
            "actor": torch.optim.Adam([*self.actor.parameters(), self.log_std], lr=c.lr),
        }
        rr = self.info.get("return_range")
        self.reward_scale = 1000.0 / rr if (c.iql_reward_norm and rr and rr > 0) else 1.0

    def actor_lr(self, it: int) -> float:
        """optax.cosine_decay_schedule(lr, steps) at actor update ``it``: lr (1 + cos(pi it / T)) / 2."""
        c = self.cfg
        if not c.iql_cosine_lr:
            return c.lr
        return c.lr * 0.5 * (1.0 + math.cos(math.pi * min(it, c.steps) / c.steps))

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
        for g in self.optimizers["actor"].param_groups:
            g["lr"] = self.actor_lr(int(self.updates))
        self.updates += 1
        self.step("actor", actor_loss.sum())
        self.critic.soft_update(c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "q": q.detach().mean((1, 2))}


class TD3BC(OfflineAgent):
    name = "td3bc"
    nfe = 1
    obs_norm = True

    def build(self):
        c, o, a, S = self.cfg, self.obs_dim, self.act_dim, self.S
        net = {"hidden": c.td3bc_hidden, "activation": "relu", "init": "torch"}
        self.actor = self.mlp(S, o, a, **net)
        self.actor_target = self.mlp(S, o, a, **net)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.requires_grad_(False)
        self.critic = self.double_q(**net)
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
            "q": q.detach().mean((1, 2)),
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
