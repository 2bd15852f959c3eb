"""The SAC-family learner: SAC, DSAC-T, DSAC-AID and AID's epistemic-only ablation, as flags of
one batched learner (``algo``), and the replay buffer it learns from.
Sources ([C] = official code yzy-yuzhouyang/GOPS: gops/algorithm/dsacaid.py at 1ea49ca (σ loss
default; 640e85a's form as ``sigma_loss="variance"``), gops/algorithm/dsact.py at a1b91bc):

- ``sac``: twin critics, target min(Q1', Q2') - alpha log pi at a' ~ pi(s'), 0.5 MSE per critic,
  actor on min Q, automatic alpha (Haarnoja et al. 2018, arXiv 1812.05905; as CleanRL / SB3).
- ``dsac-t`` (DSAC-T, arXiv 2310.05858, as [C] dsact.py): 2 Gaussian critics; a' ~ pi_target(s');
  mean target from min Q', sampled target from the critic with the smaller target mean, bounded to
  Q + clip(z - Q, +-3 sbar) (sbar: EMA of the batch-mean sigma); the plain loss (sbar^2 + b)
  mean[-sg(y - Q) Q / (sd^2 + b) - ((Qd - zb)^2 - sd^2) sigma / (sd^3 + b)] or, with
  ``dsact_huber``, its Huber branch (ratio sbar^2 / (sd^2 + b) in [0.1, 10]).
- ``dsac-aid`` [C]: ``num_q`` Gaussian critics; U_epi = Var_i Q_i' (unbiased), U_ale = mean_i
  sigma_i'^2; mean target from Q_lcb = mean_i Q_i' - sqrt(lam^2 U_epi + beta^2 U_ale); each critic's
  sampled target from its own Q_i', sigma_i'; rq, rs gradient ratios with the online ensemble
  variance; Huber σ loss rs sigma (sd^2 - 2 Huber(Qd - zb)) / (sd + b) (1ea49ca) or rs Huber(sigma^2,
  (Qd - zb)^2) / (2 sd^2 + b) (640e85a); actor on mean Q - lam std Q; a behaviour actor on mean Q +
  sqrt(lam^2 Var Q + beta^2 mean sigma^2) collects data; beta annealed after evaluations.
- ``dsac-aid-epi``: the same with beta = 0 throughout (no aleatoric term anywhere).
Every tensor has a leading seed dimension S (S learners, one batched forward per network via
``nets.BatchedMLP``; critics G = S * M members); losses sum over seeds and critics, Adam is
elementwise. Critics step every iteration; actors, alpha and Polyak every ``delay_update``; all
gradients of an iteration are taken before any step, as [C] does (``sequential``: the critics
step first and the actor's loss reads them, as SB3's ``SAC.train`` and CleanRL do). RECON: evaluation is synchronous
(official: asynchronous); sigma = softplus (GOPS's regularized critic adds 1e-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from icml26.methods.rl.dsac_names import ALGOS, SIGMA_LOSSES  # noqa: F401  (re-exported)
from icml26.methods.rl.nets import BatchedMLP, lower_bound, tanh_gaussian, upper_bound


@dataclass(frozen=True)
class LearnerSpec:
    """Hyper-parameters of one learner (a batch of ``seeds`` independent runs of ``algo``)."""

    algo: str
    obs_dim: int
    act_dim: int
    seeds: int = 1
    hidden: tuple[int, ...] = (256, 256, 256)
    activation: str = "relu"
    norm_groups: int = 0  # GroupNorm groups per hidden layer (0: none)
    init: str = "default"  # default | orthogonal
    lr_q: float = 3e-4
    lr_pi: float = 3e-4
    lr_alpha: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    tau_b: float = 0.005  # EMA rate of sbar, Ubar_epi, m_u
    delay_update: int = 2
    num_q: int = 4  # dsac-aid ensemble size (sac / dsac-t: 2)
    lam: float = 0.71  # lambda_l = lambda_u
    beta0: float = 0.1
    beta_lr: float = 5e-3
    huber: bool = True
    homogeneous: bool = True
    huber_delta: float = 50.0
    sigma_loss: str = "gradient"  # dsac-aid with huber: gradient (GOPS 1ea49ca) | variance (640e85a)
    dsact_huber: bool = False  # dsac-t: dsact.py's Huber branch (its MuJoCo script: False, the plain loss)
    norm_affine: bool = False  # GroupNorm with a learnable affine (GOPS: affine=False)
    bias_b: float = 0.1
    log_std_min: float = -20.0
    log_std_max: float = 0.5
    q_bias_lower_threshold: float = -1000.0
    freeze_fraction: float = 0.2
    fused_adam: bool = False  # torch's fused Adam kernel (same update up to float rounding; faster on CPU)
    sequential: bool = False  # step the critics before the actor's loss reads them (SB3, CleanRL); else as [C]
    tanh_epsilon: float = 0.0  # log(1 - tanh^2 + eps) in the log-density (SB3, CleanRL, [C]: 1e-6); 0: exact

    def __post_init__(self):
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {', '.join(ALGOS)}, got {self.algo!r}")
        if self.huber and not self.homogeneous:
            raise ValueError("huber=True needs homogeneous=True (as the official code asserts)")
        if self.sigma_loss not in SIGMA_LOSSES:
            raise ValueError(f"sigma_loss must be one of {', '.join(SIGMA_LOSSES)}, got {self.sigma_loss!r}")

    @property
    def distributional(self) -> bool:
        return self.algo != "sac"

    @property
    def aid(self) -> bool:
        return self.algo in ("dsac-aid", "dsac-aid-epi")

    @property
    def ensemble(self) -> int:
        return self.num_q if self.aid else 2


class Learner(nn.Module):
    """S batched SAC-family learners (see the module docstring). ``generator``: the source of
    every random draw (initial weights, policy noise, target noise), for exact resumption."""

    def __init__(self, spec: LearnerSpec, *, device: str = "cpu", generator: torch.Generator | None = None):
        super().__init__()
        self.spec, self.device = spec, device
        S, M, o, a = spec.seeds, spec.ensemble, spec.obs_dim, spec.act_dim
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        self.gen = g
        kw = dict(
            activation=spec.activation,
            norm_groups=spec.norm_groups,
            norm_affine=spec.norm_affine,
            init=spec.init,
            generator=g if g.device.type == "cpu" else None,
            head_chunks=2,  # (Q, sigma) / (mean, log_std): GOPS's two heads
        )
        out_q = 2 if spec.distributional else 1
        kq = {**kw, "head_chunks": out_q}
        self.critic = BatchedMLP(S * M, o + a, spec.hidden, out_q, **kq)
        self.critic_target = BatchedMLP(S * M, o + a, spec.hidden, out_q, **kq)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor = BatchedMLP(S, o, spec.hidden, 2 * a, **kw)
        self.actor_target = BatchedMLP(S, o, spec.hidden, 2 * a, **kw) if spec.distributional else None
        if self.actor_target is not None:
            self.actor_target.load_state_dict(self.actor.state_dict())
        self.behaviour = BatchedMLP(S, o, spec.hidden, 2 * a, **kw) if spec.aid else None
        if self.behaviour is not None:
            self.behaviour.load_state_dict(self.actor.state_dict())  # [C]: deepcopy of the policy
        for net in (self.critic_target, self.actor_target):
            if net is not None:
                net.requires_grad_(False)
        alpha0 = math.e if spec.distributional else 1.0  # [C] alpha = e; SAC: 1 (SB3, CleanRL)
        self.log_alpha = nn.Parameter(torch.full((S,), math.log(alpha0)))
        self.register_buffer("beta", torch.full((S,), spec.beta0 if spec.algo == "dsac-aid" else 0.0))
        self.register_buffer("beta_m", torch.zeros(S))  # Adam moments of beta (per seed)
        self.register_buffer("beta_v", torch.zeros(S))
        self.register_buffer("beta_t", torch.zeros(S))
        self.register_buffer("beta_unfrozen", torch.zeros(S))
        self.register_buffer("mean_sigma", torch.zeros(S, M))  # sbar_i
        self.register_buffer("mean_u_epi", torch.zeros(S))  # Ubar_epi
        self.register_buffer("mean_unc", torch.zeros(S))  # m_u
        self.register_buffer("ema_started", torch.zeros(()))
        self.register_buffer("iteration", torch.zeros((), dtype=torch.int64))
        self.to(device)
        fz = {"fused": True} if spec.fused_adam else {}
        self.opt_q = torch.optim.Adam(self.critic.parameters(), lr=spec.lr_q, **fz)
        self.opt_pi = torch.optim.Adam(self.actor.parameters(), lr=spec.lr_pi, **fz)
        self.opt_b = (
            torch.optim.Adam(self.behaviour.parameters(), lr=spec.lr_pi, **fz) if self.behaviour is not None else None
        )
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=spec.lr_alpha, **fz)
        self.target_entropy = -float(a)

    # ----- forward helpers -----
    def critic_forward(
        self, net: BatchedMLP, obs: Tensor, act: Tensor, detach: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """obs (S, B, o), act (S, B, a) -> (Q (S, M, B), sigma (S, M, B) or None for SAC)."""
        S, B, _ = obs.shape
        M = self.spec.ensemble
        x = torch.cat([obs, act], -1)
        x = x.unsqueeze(1).expand(S, M, B, x.shape[-1]).reshape(S * M, B, x.shape[-1])  # (S*M, B, o+a)
        out = net(x, detach).view(S, M, B, -1)
        q = out[..., 0]
        return q, (torch.nn.functional.softplus(out[..., 1]) if out.shape[-1] > 1 else None)

    def _noise(self, *shape) -> Tensor:
        return torch.randn(*shape, generator=self.gen, device=self.device)

    def policy(
        self, obs: Tensor, *, deterministic: bool = False, behaviour: bool = False, target: bool = False
    ) -> tuple[Tensor, Tensor]:
        """obs (S, N, o) -> (action (S, N, a) in [-1, 1], log_prob (S, N)) of the actor (or the
        behaviour actor, or pi_target); a sample unless ``deterministic`` (tanh(mean))."""
        net = (
            self.behaviour
            if behaviour and self.behaviour is not None
            else (self.actor_target if target and self.actor_target is not None else self.actor)
        )
        out = net(obs)
        noise = None if deterministic else self._noise(*obs.shape[:-1], self.spec.act_dim)
        return tanh_gaussian(
            out,
            self.spec.log_std_min,
            self.spec.log_std_max,
            noise=noise,
            deterministic=deterministic,
            eps=self.spec.tanh_epsilon,
        )

    def behaviour_policy(self, obs: Tensor) -> Tensor:
        """Actions that collect data: the behaviour actor for dsac-aid(-epi), else the actor."""
        return self.policy(obs, behaviour=True)[0]

    # ----- one iteration -----
    def targets(
        self, rew: Tensor, done: Tensor, qn: Tensor, sn: Tensor, logp2: Tensor, eps: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Distributional targets from the target critics at a' (before the 3 sbar bound).

        rew, done, logp2: (S, B); qn, sn, eps: (S, M, B) (eps: standard normal clipped to +-3).
        Returns (y (S, B): the mean target, z (S, M, B): each critic's sampled target, unc (S, B):
        sqrt(U_epi + (beta/lam)^2 U_ale), the LCB's uncertainty over lam; zeros for dsac-t)."""
        sp = self.spec
        alpha = self.log_alpha.detach().exp()[:, None]
        notdone = sp.gamma * (1.0 - done)
        zn = qn + eps * sn
        unc = torch.zeros_like(rew)
        if sp.aid:
            beta = self.beta[:, None] if sp.algo == "dsac-aid" else 0.0
            qnext = lower_bound(qn, sn, 1, sp.lam, beta)  # (S, B)
            znext = zn  # [C]: each critic's own sample
            if sp.lam > 0:
                unc = torch.sqrt(torch.clamp(qn.var(1) + (beta / sp.lam) ** 2 * (sn * sn).mean(1), min=1e-8))
        else:
            qnext = qn.min(1).values
            k = qn.argmin(1, keepdim=True)  # (S, 1, B): the critic with the smaller mean
            znext = zn.gather(1, k).expand_as(zn)
        y = rew + notdone * (qnext - alpha * logp2)
        z = rew[:, None] + notdone[:, None] * (znext - alpha[:, None] * logp2[:, None])
        return y, z, unc

    def critic_loss(self, obs, act, rew, obs2, done) -> tuple[Tensor, dict]:
        """The critic loss of one batch (summed over seeds and critics). rew, done: (S, B), rew
        already scaled. Updates the EMAs sbar, Ubar_epi, m_u (no gradient)."""
        sp = self.spec
        S, B, _ = obs.shape
        alpha = self.log_alpha.detach().exp()[:, None]  # (S, 1)
        q, sig = self.critic_forward(self.critic, obs, act)  # (S, M, B)
        notdone = sp.gamma * (1.0 - done)  # (S, B)
        with torch.no_grad():
            a2, logp2 = self.policy(obs2, target=True)  # SAC: pi itself (no target actor)
            qn, sn = self.critic_forward(self.critic_target, obs2, a2)
            if not sp.distributional:
                y = rew + notdone * (qn.min(1).values - alpha * logp2)
        if not sp.distributional:
            return 0.5 * ((q - y[:, None]) ** 2).mean(-1).sum(), {"q": q.detach(), "sigma": None}
        with torch.no_grad():
            eps = self._noise(*qn.shape).clamp(-3.0, 3.0)  # (S, M, B)
            y, z, unc = self.targets(rew, done, qn, sn, logp2, eps)
            qd, sd = q.detach(), sig.detach().clamp(min=0.0)
            u_epi = qd.var(1) if sp.aid else None  # (S, B) online ensemble variance
            bm = sd.mean(-1)  # (S, M)
            if float(self.ema_started) == 0.0:
                self.mean_sigma.copy_(bm)
                if sp.aid:
                    self.mean_u_epi.copy_(u_epi.mean(-1))
                    self.mean_unc.copy_(sp.lam * unc.mean(-1))
                self.ema_started.fill_(1.0)
            else:
                self.mean_sigma.lerp_(bm, sp.tau_b)
                if sp.aid:
                    self.mean_u_epi.lerp_(u_epi.mean(-1), sp.tau_b)
                    self.mean_unc.mul_(1 - sp.tau_b).add_(sp.lam * sp.tau_b * unc.mean(-1))
            sbar = self.mean_sigma[..., None]  # (S, M, 1)
            zb = qd + torch.clamp(z - qd, -3.0 * sbar, 3.0 * sbar)
            b = sp.bias_b
        if not sp.aid:
            loss = dsact_critic_loss(q, sig, y[:, None], zb, sbar, sp.dsact_huber, b)
            return loss, {"q": q.detach(), "sigma": sig.detach()}
        with torch.no_grad():
            rq = (sbar**2 + self.mean_u_epi[:, None, None] + b) / (sd**2 + u_epi[:, None] + b)
            rs = (sbar**2 + b) / ((sd**2 if sp.homogeneous else sd**3) + b)
        if sp.huber:
            hub = torch.nn.functional.huber_loss
            rq, rs = rq.clamp(0.1, 10.0), rs.clamp(0.01, 100.0)
            per = rq * hub(q, y[:, None].expand_as(q), delta=sp.huber_delta, reduction="none")
            if sp.sigma_loss == "gradient":  # GOPS 1ea49ca
                per = per + rs * sig * (sd**2 - 2 * hub(qd, zb, delta=sp.huber_delta, reduction="none")) / (sd + b)
            else:  # "variance", GOPS 640e85a
                resid = (qd - zb) ** 2
                per = per + rs * hub(sig**2, resid, delta=sp.huber_delta, reduction="none") / (2 * sd**2 + b)
            loss = per.mean(-1).sum()
        else:
            sig_term = sig * ((qd - zb) ** 2 - sd**2)
            if sp.homogeneous:
                sig_term = sig_term / (sd + b)
            loss = -(rq * q * (y[:, None] - qd) + rs * sig_term).mean(-1).sum()
        return loss, {"q": q.detach(), "sigma": sig.detach()}

    def actor_losses(self, obs) -> tuple[Tensor, Tensor | None, Tensor]:
        """(actor loss, behaviour-actor loss or None, alpha loss), each summed over seeds; the
        critics enter with their weights detached (frozen, as [C])."""
        sp = self.spec
        alpha = self.log_alpha.detach().exp()[:, None]
        a_new, logp = self.policy(obs)
        qa, _ = self.critic_forward(self.critic, obs, a_new, detach=True)
        if sp.aid:
            obj = qa.mean(1) - sp.lam * torch.sqrt(torch.clamp(qa.var(1), min=1e-8))
        else:
            obj = qa.min(1).values
        loss_pi = (alpha * logp - obj).mean(-1).sum()
        loss_b = None
        if self.behaviour is not None:
            a_b, logp_b = self.policy(obs, behaviour=True)
            qb, sb = self.critic_forward(self.critic, obs, a_b, detach=True)
            beta = self.beta[:, None] if sp.algo == "dsac-aid" else 0.0
            loss_b = (alpha * logp_b - upper_bound(qb, sb, 1, sp.lam, beta)).mean(-1).sum()
        loss_alpha = -(self.log_alpha * (logp.detach() + self.target_entropy).mean(-1)).sum()
        return loss_pi, loss_b, loss_alpha

    def update(self, obs, act, rew, obs2, done) -> Tensor:
        """One iteration on a batch: obs (S, B, o), act (S, B, a), rew (S, B) scaled, obs2, done
        (S, B) = terminated (1.0) or not. Returns the critic loss (detached, for divergence checks)."""
        sp = self.spec
        it = int(self.iteration)
        delayed = it % sp.delay_update == 0
        loss_q, _ = self.critic_loss(obs, act, rew, obs2, done)
        self.opt_q.zero_grad(set_to_none=True)
        loss_q.backward()
        if sp.sequential:  # SB3's SAC.train: the actor's loss reads the critics after their step
            self.opt_q.step()
        if delayed:
            loss_pi, loss_b, loss_alpha = self.actor_losses(obs)
            self.opt_pi.zero_grad(set_to_none=True)
            self.opt_alpha.zero_grad(set_to_none=True)
            total = loss_pi + loss_alpha + (loss_b if loss_b is not None else 0.0)
            if self.opt_b is not None:
                self.opt_b.zero_grad(set_to_none=True)
            total.backward()
        if not sp.sequential:
            self.opt_q.step()
        if delayed:
            self.opt_pi.step()
            if self.opt_b is not None:
                self.opt_b.step()
            self.opt_alpha.step()
            with torch.no_grad():
                torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), sp.tau)
                if self.actor_target is not None:
                    torch._foreach_lerp_(list(self.actor_target.parameters()), list(self.actor.parameters()), sp.tau)
        self.iteration += 1
        return loss_q.detach()

    @torch.no_grad()
    def anneal_beta(self, bias: Tensor) -> None:
        """beta's update after an evaluation, per seed, as GOPS's off_serial_dsacaid_trainer.py and
        dsacaid.py (640e85a / 1ea49ca) do it. bias (S,): the evaluator's B (``dsac_aid.official_bias``),
        scaled units; NaN (no usable episode): no update. While frozen (from the start), an
        evaluation with B > freeze_fraction * threshold unfreezes beta, and every frozen evaluation
        is an Adam step with gradient 0 (its step count advances, beta does not move); unfrozen, B > 0
        skips the step, B <= 0 takes one Adam step (lr beta_lr, betas 0.9/0.999, eps 1e-8) on
        -beta * max(B, threshold) / max(m_u, 0.1); beta >= 0."""
        sp = self.spec
        if sp.algo != "dsac-aid":
            return
        bias = bias.to(self.beta)
        ok = torch.isfinite(bias)
        frozen = ok & (self.beta_unfrozen == 0)
        step = frozen | (ok & (self.beta_unfrozen > 0) & (bias <= 0))
        grad = torch.where(
            frozen,
            torch.zeros_like(bias),
            -torch.clamp(torch.nan_to_num(bias), min=sp.q_bias_lower_threshold) / torch.clamp(self.mean_unc, min=0.1),
        )
        self.beta_unfrozen.copy_(
            torch.where(frozen & (bias > sp.freeze_fraction * sp.q_bias_lower_threshold), 1.0, self.beta_unfrozen)
        )
        t = self.beta_t + step.float()
        m = torch.where(step, 0.9 * self.beta_m + 0.1 * grad, self.beta_m)
        v = torch.where(step, 0.999 * self.beta_v + 0.001 * grad * grad, self.beta_v)
        tt = torch.clamp(t, min=1.0)
        upd = sp.beta_lr * (m / (1 - 0.9**tt)) / (torch.sqrt(v / (1 - 0.999**tt)) + 1e-8)
        self.beta.copy_(torch.where(step, torch.clamp(self.beta - upd, min=0.0), self.beta))
        self.beta_m.copy_(m), self.beta_v.copy_(v), self.beta_t.copy_(t)

    # ----- state for checkpoints -----
    def state_tensors(self) -> dict[str, Tensor]:
        """Every tensor that determines the continuation: weights, buffers, Adam states, RNG."""
        out = {f"model.{k}": v.detach().clone() for k, v in self.state_dict().items()}
        for name, opt in self._opts().items():
            sd = opt.state_dict()
            for i, st in sd["state"].items():
                for k, v in st.items():
                    out[f"opt.{name}.{i}.{k}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
        out["rng.torch"] = self.gen.get_state()
        return {k: v.contiguous().cpu() for k, v in out.items()}

    def load_state_tensors(self, t: dict[str, Tensor]) -> None:
        self.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("model.")})
        for name, opt in self._opts().items():
            sd = opt.state_dict()
            state: dict = {}
            for i in range(len(sd["param_groups"][0]["params"])):
                keys = [k for k in t if k.startswith(f"opt.{name}.{i}.")]
                if keys:
                    state[i] = {
                        k.rsplit(".", 1)[1]: t[k].to(self.device) if k.rsplit(".", 1)[1] != "step" else t[k]
                        for k in keys
                    }
            opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
        self.gen.set_state(t["rng.torch"])

    def _opts(self) -> dict:
        d = {"q": self.opt_q, "pi": self.opt_pi, "alpha": self.opt_alpha}
        if self.opt_b is not None:
            d["b"] = self.opt_b
        return d


def dsact_critic_loss(q: Tensor, sig: Tensor, y: Tensor, zb: Tensor, sbar: Tensor, huber: bool, b: float) -> Tensor:
    """DSAC-T's critic loss as yzy-yuzhouyang/GOPS gops/algorithm/dsact.py (a1b91bc) computes it,
    summed over critics and seeds, each critic's batch mean. q, sig: (S, M, B) online mean and
    sigma (with gradient); y: the mean target (min of the target critics' means), zb: the bounded
    sampled target of the critic with the smaller target mean, sbar: (S, M, 1) EMA of sigma.
    Plain (its MuJoCo script): (sbar^2 + b) * mean[-sg(y - q) q / (sd^2 + b) - ((qd - zb)^2 - sd^2)
    sigma / (sd^3 + b)]. Huber: r = sbar^2 / (sd^2 + b) clamped to [0.1, 10] on both terms,
    mean[r Huber_50(q, y) + r sigma (sd^2 - Huber_50(qd, zb)) / (sd + b)]. sd, qd: detached."""
    qd, sd = q.detach(), sig.detach().clamp(min=0.0)
    if huber:
        hub = torch.nn.functional.huber_loss
        r = (sbar**2 / (sd**2 + b)).clamp(0.1, 10.0)
        per = r * hub(q, y.expand_as(q), delta=50.0, reduction="none") + r * sig * (
            sd**2 - hub(qd, zb, delta=50.0, reduction="none")
        ) / (sd + b)
        return per.mean(-1).sum()
    per = -(y - qd) / (sd**2 + b) * q - ((qd - zb) ** 2 - sd**2) / (sd**3 + b) * sig
    return ((sbar[..., 0] ** 2 + b) * per.mean(-1)).sum()


class ReplayBuffer:
    """Transitions of S seeds x N environments, (S, capacity, ...) tensors; rewards stored in
    the environment's units (the learner scales them at sampling). ``timeouts`` marks episodes
    cut by a time limit (D4RL's field), ``terminals`` true terminations."""

    def __init__(self, seeds: int, capacity: int, obs_dim: int, act_dim: int, device: str = "cpu"):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.S, self.capacity, self.device = seeds, capacity, device
        z = lambda *s: torch.zeros(seeds, capacity, *s, device=device)  # noqa: E731
        self.data = {
            "observations": z(obs_dim),
            "actions": z(act_dim),
            "rewards": z(),
            "next_observations": z(obs_dim),
            "terminals": z(),
            "timeouts": z(),
        }
        self.ptr, self.size = 0, 0

    def add(self, **batch: Tensor) -> None:
        """Each field (S, N, ...) for N environments stepped at once."""
        n = batch["rewards"].shape[1]
        idx = (self.ptr + torch.arange(n, device=self.device)) % self.capacity
        for k, v in batch.items():
            self.data[k][:, idx] = v.to(self.data[k])
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, Tensor]:
        """(S, batch_size, ...) per field, indices uniform with replacement, one draw per seed."""
        idx = torch.randint(0, self.size, (self.S, batch_size), generator=generator, device=generator.device)
        idx = idx.to(self.device)
        s = torch.arange(self.S, device=self.device)[:, None]
        return {k: v[s, idx] for k, v in self.data.items()}

    def ordered(self, seed_index: int) -> dict[str, Tensor]:
        """Seed ``seed_index``'s transitions oldest first (CPU tensors)."""
        order = (torch.arange(self.size) + (self.ptr if self.size == self.capacity else 0)) % self.capacity
        return {k: v[seed_index].cpu()[order] for k, v in self.data.items()}

    def state_tensors(self) -> dict[str, Tensor]:
        out = {
            f"buffer.{k}": v[:, : self.size].contiguous().cpu() if self.size < self.capacity else v.contiguous().cpu()
            for k, v in self.data.items()
        }
        out["buffer.ptr_size"] = torch.tensor([self.ptr, self.size], dtype=torch.int64)
        return out

    def load_state_tensors(self, t: dict[str, Tensor]) -> None:
        self.ptr, self.size = (int(x) for x in t["buffer.ptr_size"])
        for k in self.data:
            v = t[f"buffer.{k}"]
            self.data[k][:, : v.shape[1]] = v.to(self.data[k])
