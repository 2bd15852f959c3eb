"""The trained state of ``icml26 hdr-gs``: Gaussian parameters, the tone mapper and a hand-rolled
Adam whose per-Gaussian moments follow pruning and densification (``Model``); checkpoints as
safetensors with the settings in their metadata (``save_ckpt`` / ``load_ckpt``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from icml26.core.errors import InputError
from icml26.core.output import atomic_path
from icml26.methods.splatting.config import Config, config_from_dict
from icml26.methods.splatting.model import ToneMapper
from icml26.methods.splatting.ply import write_gaussians


class Model:
    """Gaussian parameters (dict of leaf tensors), the tone mapper and a hand-rolled Adam whose
    per-Gaussian moments are pruned / extended with the Gaussians."""

    KEYS = ("means", "log_scales", "quats", "logit_opacity", "log_radiance")

    def __init__(self, params: dict, tone, cfg: Config, extent: float):
        self.p = {k: params[k].detach().clone().requires_grad_(True) for k in self.KEYS}
        self.tone = tone
        self.cfg = cfg
        self.extent = extent
        self.m = {k: torch.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: torch.zeros_like(v) for k, v in self.p.items()}
        self.tm = {k: torch.zeros_like(v) for k, v in tone.named_parameters()}
        self.tv = {k: torch.zeros_like(v) for k, v in tone.named_parameters()}
        self.step_n = 0
        self.grad_acc = torch.zeros(self.n)
        self.grad_cnt = torch.zeros(self.n)  # views seeing a Gaussian since its last growth check
        self.vis_cnt = torch.zeros(self.n)  # ... since its last pruning check (GSDF's anchor_demon)

    @property
    def n(self) -> int:
        return self.p["means"].shape[0]

    def lr(self, k: str) -> float:
        c = self.cfg
        return {
            "means": c.lr_means * self.extent,
            "log_scales": c.lr_scales,
            "quats": c.lr_quats,
            "logit_opacity": c.lr_opacity,
            "log_radiance": c.lr_radiance,
        }[k]

    def step(self):
        self.step_n += 1
        b1, b2 = 0.9, 0.999
        with torch.no_grad():
            for k, t in self.p.items():
                if t.grad is None:
                    continue
                g = t.grad
                self.m[k].mul_(b1).add_(g, alpha=1 - b1)
                self.v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                mh = self.m[k] / (1 - b1**self.step_n)
                vh = self.v[k] / (1 - b2**self.step_n)
                t.sub_(self.lr(k) * mh / (vh.sqrt() + 1e-15))
                t.grad = None
            for k, t in self.tone.named_parameters():  # (torch.optim imports torch._dynamo: 10+ s)
                if t.grad is None:
                    continue
                g = t.grad
                self.tm[k].mul_(b1).add_(g, alpha=1 - b1)
                self.tv[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                t.sub_(
                    self.cfg.lr_tone
                    * (self.tm[k] / (1 - b1**self.step_n))
                    / ((self.tv[k] / (1 - b2**self.step_n)).sqrt() + 1e-8)
                )
                t.grad = None

    def select(self, keep):
        """Keep the Gaussians where ``keep`` (N,) bool is true."""
        with torch.no_grad():
            for d in (self.m, self.v):
                for k in d:
                    d[k] = d[k][keep].clone()
            self.p = {k: v.detach()[keep].clone().requires_grad_(True) for k, v in self.p.items()}
            self.grad_acc, self.grad_cnt, self.vis_cnt = self.grad_acc[keep], self.grad_cnt[keep], self.vis_cnt[keep]

    def append(self, new: dict):
        with torch.no_grad():
            for k in self.KEYS:
                self.m[k] = torch.cat([self.m[k], torch.zeros_like(new[k])])
                self.v[k] = torch.cat([self.v[k], torch.zeros_like(new[k])])
                self.p[k] = torch.cat([self.p[k].detach(), new[k]]).requires_grad_(True)
            z = torch.zeros(new["means"].shape[0])
            self.grad_acc, self.grad_cnt = torch.cat([self.grad_acc, z]), torch.cat([self.grad_cnt, z])
            self.vis_cnt = torch.cat([self.vis_cnt, z])

    def tensors(self) -> dict:
        out = {}
        for k in self.KEYS:
            out[f"p.{k}"] = self.p[k].detach().contiguous()
            out[f"m.{k}"] = self.m[k].contiguous()
            out[f"v.{k}"] = self.v[k].contiguous()
        for k, v in self.tone.state_dict().items():
            out[f"tone.{k}"] = v.detach().contiguous()
        for k in self.tm:
            out[f"tone_m.{k}"], out[f"tone_v.{k}"] = self.tm[k].contiguous(), self.tv[k].contiguous()
        out["grad_acc"], out["grad_cnt"] = self.grad_acc.contiguous(), self.grad_cnt.contiguous()
        out["vis_cnt"] = self.vis_cnt.contiguous()
        return out


def _make_tone(cfg: Config):
    return ToneMapper(cfg.tone_hidden)


def save_ckpt(path: Path, model: Model, meta: dict) -> None:
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file(model.tensors(), str(tmp), metadata={k: json.dumps(v) for k, v in meta.items()})


def load_ckpt(path: str | Path, cfg: Config | None = None) -> tuple[Model, dict]:
    """A checkpoint (safetensors) -> (Model, meta); InputError on a file that is not one of ours."""
    from safetensors import safe_open

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--ckpt {str(path)!r} does not exist")
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = {k: json.loads(v) for k, v in (f.metadata() or {}).items()}
            t = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 (safetensors raises several types)
        raise InputError(f"--ckpt {str(path)!r} is not a safetensors checkpoint ({type(e).__name__})") from None
    if "config" not in meta or "p.means" not in t:
        raise InputError(f"--ckpt {str(path)!r} is not an icml26 hdr-gs checkpoint")
    c = cfg or config_from_dict(meta["config"])
    tone = _make_tone(c)
    tone.load_state_dict({k[5:]: v for k, v in t.items() if k.startswith("tone.")})
    m = Model({k: t[f"p.{k}"] for k in Model.KEYS}, tone, c, float(meta["extent"]))
    with torch.no_grad():
        for k in Model.KEYS:
            m.m[k], m.v[k] = t[f"m.{k}"].clone(), t[f"v.{k}"].clone()
        m.grad_acc, m.grad_cnt = t["grad_acc"].clone(), t["grad_cnt"].clone()
        m.vis_cnt = t["vis_cnt"].clone() if "vis_cnt" in t else t["grad_cnt"].clone()  # older checkpoints: one counter
        for k in m.tm:
            m.tm[k], m.tv[k] = t[f"tone_m.{k}"].clone(), t[f"tone_v.{k}"].clone()
    m.step_n = int(meta.get("adam_step", 0))
    return m, meta


SH_C0 = 0.28209479177387814  # the degree-0 spherical harmonic, as 3DGS's RGB2SH


def export_ply(model: Model, path: str | Path, exposure_s: float, sh_degree: int = 3) -> Path:
    """The Gaussians as an INRIA 3DGS .ply (ply.write_gaussians): colour = the tone-mapped LDR
    colour at ``exposure_s`` (what a 3DGS viewer shows) as SH DC, f_dc = (rgb - 0.5) / C0, the
    higher bands (degree ``sh_degree``) zero; opacity logit, log scales, unit quaternions."""
    p = model.p
    with torch.no_grad():
        rgb = model.tone(p["log_radiance"] + math.log(exposure_s)).clamp(0, 1)
        q = p["quats"] / p["quats"].norm(dim=1, keepdim=True).clamp_min(1e-12)
        k = (sh_degree + 1) ** 2 - 1
        return write_gaussians(
            path,
            p["means"].numpy(),
            p["log_scales"].numpy(),
            q.numpy(),
            p["logit_opacity"].numpy(),
            ((rgb - 0.5) / SH_C0).numpy(),
            np.zeros((model.n, 3, k), np.float32),
        )
