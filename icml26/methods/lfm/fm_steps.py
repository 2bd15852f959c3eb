"""Flow-matching batches and losses of train-lfm: one step's (x1, t, x0, y) from the step's
generator, the FM loss (``flow.fm_loss_per_sample``) plus, for a coarse model, the seam loss
against the fine model's ODE states at t_max (``seam_states``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from icml26.methods.lfm.artifacts import model_velocity
from icml26.methods.lfm.config import T_EPS, Config
from icml26.methods.lfm.flow import euler, fm_loss_per_sample
from icml26.methods.lfm.loop import step_generator
from icml26.methods.lfm.nets import DiT


def _fm_batch_fn(
    cfg: Config,
    lat: Tensor,
    lab: Tensor | None,
    kept: np.ndarray,
    *,
    seed: int,
    stage: str,
    num_classes: int,
    seam: Tensor | None = None,
    seam_target: Tensor | None = None,
):
    kept_t = torch.from_numpy(np.asarray(kept)).long()
    B = cfg.batch_size
    t_max = cfg.t_max if stage == "fm" else 1.0

    def batch(step):
        g = step_generator(seed, stage, step)
        j = kept_t[torch.randint(len(kept_t), (B,), generator=g)]
        t = T_EPS + (t_max - T_EPS) * torch.rand(B, generator=g) if t_max < 1.0 else torch.rand(B, generator=g)
        x0 = torch.randn((B, *lat.shape[1:]), generator=g)
        out = {"x1": lat[j], "t": t, "x0": x0, "y": None}
        if num_classes and lab is not None:
            y = lab[j].clone()
            drop = torch.rand(B, generator=g) < cfg.label_dropout
            y[drop] = num_classes  # null class: unconditional branch for guidance
            out["y"] = y
        if seam is not None:
            out["xs"], out["vs"] = seam[j], seam_target[j]
        return out

    return batch


def _fm_loss(cfg: Config, t_seam: float | None):
    def loss(net, b):
        l = fm_loss_per_sample(net, b["x1"], b["t"], b["x0"], b["y"]).mean()
        if t_seam is not None and "xs" in b:
            ts = torch.full((b["xs"].shape[0],), t_seam, device=b["xs"].device)
            l = l + cfg.seam_weight * (net(b["xs"], ts, b["y"]) - b["vs"]).pow(2).flatten(1).mean(1).mean()
        return l

    return loss


@torch.no_grad()
def seam_states(
    fine: DiT, lat: Tensor, lab: Tensor | None, t_split: float, steps_per_unit: int
) -> tuple[Tensor, Tensor]:
    """Invert data latents with the fine model's ODE from t = 1 back to t_split (Euler,
    round((1 - t_split) * steps_per_unit) steps); return (x_seam, v_fine(x_seam, t_split))."""
    n_steps = max(1, round((1.0 - t_split) * steps_per_unit))
    xs, vs = [], []
    for s in range(0, len(lat), 512):
        x1 = lat[s : s + 512]
        y = None if lab is None else lab[s : s + 512]
        v = model_velocity(fine, y)
        x, _ = euler(v, x1, n_steps, 1.0, t_split)
        xs.append(x)
        vs.append(v(x, torch.full((x.shape[0],), t_split)))
    return torch.cat(xs), torch.cat(vs)
