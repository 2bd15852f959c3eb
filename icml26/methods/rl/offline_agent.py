"""The shared piece of the offline-RL methods of ``icml26 bfq``: ``OfflineAgent`` and ``DoubleQ``.

An agent holds S batched seeds of one method (networks with a leading group dimension,
offline_nets.MLP). A subclass defines ``build`` (networks, ``self.optimizers``),
``update(batch) -> {"critic_loss": (S,), "actor_loss": (S,), "q": (S,)}`` and ``act(obs (S, B, o))
-> (S, B, a)`` in [-1, 1]; ``nfe``: network calls per action. The harness calls ``train_step``
and ``policy``, which first normalise observations when the method does (``obs_norm``).
"""

from __future__ import annotations

import torch
from torch import nn

from icml26.methods.rl.offline_config import Config
from icml26.methods.rl.offline_nets import MLP


class DoubleQ(nn.Module):
    """Two critics per seed (one MLP with G = 2 S, member 2 s + j is critic j of seed s) and their
    EMA targets."""

    def __init__(self, S: int, in_features: int, make):
        super().__init__()
        self.S = S
        self.net = make(2 * S, in_features, 1)
        self.target = make(2 * S, in_features, 1)
        self.target.load_state_dict(self.net.state_dict())
        self.target.requires_grad_(False)

    def q(self, obs, act, *, target: bool = False, detach: bool = False):
        """obs (S, B, o), act (S, B, a) -> (S, 2, B). ``detach``: the weights without gradient
        (the actor's loss sees a frozen critic, differentiable in the action)."""
        S, B, _ = obs.shape
        x = torch.cat([obs, act], -1).unsqueeze(1).expand(S, 2, B, obs.shape[-1] + act.shape[-1]).reshape(2 * S, B, -1)
        return (self.target if target else self.net)(x, detach).view(S, 2, B)

    @torch.no_grad()
    def soft_update(self, tau: float) -> None:
        torch._foreach_lerp_(list(self.target.parameters()), list(self.net.parameters()), tau)


def clip_grad_norm_per_seed(params, S: int, max_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_ (2-norm, coefficient max_norm / (norm + 1e-6) capped at 1)
    applied to each seed's share of batched parameters (leading dimension a multiple of S,
    seed-major), as if each seed's network were clipped alone."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or max_norm <= 0:
        return
    sq = sum(g.reshape(S, -1).pow(2).sum(1) for g in grads)
    coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.view(S, -1).mul_(coef[:, None])


class OfflineAgent(nn.Module):
    """Base of the offline methods (see the module docstring). ``info``: what the dataset tells
    the methods (return_range, episodes, obs_mean / obs_std, family, kind)."""

    name = "agent"
    nfe = 1
    obs_norm: bool | None = None  # None: the config's normalize_obs

    def __init__(
        self,
        cfg: Config,
        obs_dim: int,
        act_dim: int,
        seeds: int,
        *,
        device: str = "cpu",
        generator=None,
        info: dict | None = None,
    ):
        super().__init__()
        self.cfg, self.obs_dim, self.act_dim, self.S, self.device = cfg, obs_dim, act_dim, seeds, device
        self.gen = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
        self.info = info or {}
        self.optimizers: dict = {}
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
        norm = cfg.normalize_obs if self.obs_norm is None else self.obs_norm
        mean, std = self.info.get("obs_mean"), self.info.get("obs_std")
        self.normalizes = bool(norm and mean is not None)
        self.register_buffer("obs_mean", torch.as_tensor(mean if self.normalizes else 0.0, dtype=torch.float32))
        self.register_buffer("obs_std", torch.as_tensor(std if self.normalizes else 1.0, dtype=torch.float32))
        self.build()
        self.to(device)

    def build(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def mlp(self, groups: int, n_in: int, n_out: int, *, hidden=None, activation=None, layer_norm=False, init="torch"):
        g = self.gen if self.gen.device.type == "cpu" else None
        return MLP(
            groups,
            n_in,
            tuple(hidden if hidden is not None else self.cfg.hidden),
            n_out,
            activation=activation or self.cfg.activation,
            layer_norm=layer_norm,
            init=init,
            generator=g,
        )

    def double_q(self, **net) -> DoubleQ:
        return DoubleQ(self.S, self.obs_dim + self.act_dim, lambda G, i, o: self.mlp(G, i, o, **net))

    def noise(self, *shape):
        return torch.randn(*shape, generator=self.gen, device=self.device)

    def normalize(self, obs):
        return (obs - self.obs_mean) / self.obs_std if self.normalizes else obs

    def train_step(self, b: dict) -> dict:
        """One update on a batch of raw dataset fields."""
        if self.normalizes:
            b = dict(
                b,
                observations=self.normalize(b["observations"]),
                next_observations=self.normalize(b["next_observations"]),
            )
        return self.update(b)

    @torch.no_grad()
    def policy(self, obs, deterministic: bool = True):
        """Actions for raw observations (S, B, o)."""
        return self.act(self.normalize(obs), deterministic=deterministic)

    def td_target(self, b: dict, q_next):
        """r + gamma (1 - terminal) q_next; timeouts do not stop bootstrapping. (S, B)."""
        return b["rewards"] + self.cfg.gamma * (1.0 - b["terminals"]) * q_next

    def step(self, name: str, loss, clip: float = 0.0) -> None:
        """Backward, per-seed gradient-norm clip when ``clip`` > 0, optimizer step."""
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            clip_grad_norm_per_seed([p for g in opt.param_groups for p in g["params"]], self.S, clip)
        opt.step()

    @torch.no_grad()
    def ema_update(self, ema, net, copy_before_start: bool = True) -> None:
        """The EMA actor: every ``ema_every`` updates, decay ``ema_decay`` from ``ema_start`` on;
        before it a copy (``copy_before_start``) or nothing (Diffusion-QL's ``step_ema``)."""
        c = self.cfg
        it = int(self.updates)
        self.updates += 1
        if it % c.ema_every:
            return
        if it < c.ema_start:
            if copy_before_start:
                ema.load_state_dict(net.state_dict())
        else:
            torch._foreach_lerp_(list(ema.parameters()), list(net.parameters()), 1.0 - c.ema_decay)

    # ----- checkpoints -----
    def state_tensors(self) -> dict:
        out = {f"model.{k}": v.detach().clone() for k, v in self.state_dict().items()}
        for name, opt in self.optimizers.items():
            for i, st in opt.state_dict()["state"].items():
                for k, v in st.items():
                    out[f"opt.{name}.{i}.{k}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
        out["rng.torch"] = self.gen.get_state()
        return {k: v.contiguous().cpu() for k, v in out.items()}

    def load_state_tensors(self, t: dict) -> None:
        self.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("model.")})
        for name, opt in self.optimizers.items():
            sd = opt.state_dict()
            state: dict = {}
            for i in range(sum(len(g["params"]) for g in sd["param_groups"])):
                keys = [k for k in t if k.startswith(f"opt.{name}.{i}.")]
                if keys:
                    state[i] = {
                        k.rsplit(".", 1)[1]: (t[k] if k.endswith(".step") else t[k].to(self.device)) for k in keys
                    }
            opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
        self.gen.set_state(t["rng.torch"])
