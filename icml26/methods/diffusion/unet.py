"""diffusers ``UNet2DModel`` as a denoiser: presets, the EDM preconditioning and a DDPM schedule,
loading a user's U-Net folder, and the EDM Heun sampler (docs/icr.md).

Schedules (``schedule``):
  edm   x = a(x0) + sigma * eps with x0 in [-1, 1]; D(x; sigma) = c_skip x + c_out F(c_in x, c_noise),
        c_in = 1/sqrt(sigma^2 + sigma_data^2), c_skip = sigma_data^2/(sigma^2 + sigma_data^2),
        c_out = sigma sigma_data/sqrt(sigma^2 + sigma_data^2), c_noise = ln(max(sigma, 0.002))/4
        (Karras et al. 2022, Table 1; sigma = 0 is fed as the sampler's sigma_min 0.002). The noise
        parameter is ``sigma``; the VP-equivalent alpha_bar = 1/(1 + sigma^2) is reported beside it.
  ddpm  x_t = sqrt(alpha_bar_t) a(x0) + sqrt(1 - alpha_bar_t) eps, F(x_t, t) (Ho et al. 2020); the
        noise parameter is the integer timestep ``t``; alpha_bar from the folder's
        ``scheduler/scheduler_config.json`` when present (diffusers ``DDPMScheduler``), else the
        default linear schedule of 1000 steps.
Only the U-Net's forward is used (features by forward hooks, see ``features``); no model code is copied.
A run of ``icml26 icr train`` saves ``unet/`` (``save_pretrained``, safetensors) and
``icml26_icr.json`` (schedule, sigma_data, data) beside it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from icml26.core.errors import InputError
from icml26.core.output import atomic_dir, to_json

SIGMA_MIN, SIGMA_MAX, RHO = 0.002, 80.0, 7.0
META_FILE = "icml26_icr.json"

# (block_out_channels, attention at the lowest resolution) -- measured step costs in docs/icr.md
PRESETS: dict[str, dict] = {
    "tiny": {"block_out_channels": (16, 32, 32), "attention": False},
    "small": {"block_out_channels": (32, 64, 64), "attention": False},
    "base": {"block_out_channels": (32, 64, 128), "attention": True},
}


def build_unet(preset: str = "tiny", *, image_size: int = 16, in_channels: int = 1):
    """A fresh ``UNet2DModel`` of a preset (one ResNet per level, GroupNorm groups = 4 or 8)."""
    from diffusers import UNet2DModel

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    p = PRESETS[preset]
    ch = tuple(p["block_out_channels"])
    n = len(ch)
    down = tuple("AttnDownBlock2D" if (p["attention"] and i == n - 1) else "DownBlock2D" for i in range(n))
    up = tuple("AttnUpBlock2D" if (p["attention"] and i == 0) else "UpBlock2D" for i in range(n))
    return UNet2DModel(
        sample_size=image_size,
        in_channels=in_channels,
        out_channels=in_channels,
        block_out_channels=ch,
        down_block_types=down,
        up_block_types=up,
        layers_per_block=1,
        norm_num_groups=min(8, ch[0] // 4),
        attention_head_dim=ch[-1],
    )


@dataclass(frozen=True)
class Schedule:
    """kind: edm | ddpm; sigma_data (edm); alphas_cumprod (ddpm, float64 tensor (T,))."""

    kind: str = "edm"
    sigma_data: float = 0.5
    alphas_cumprod: Tensor | None = None

    @property
    def noise_param(self) -> str:
        return "sigma" if self.kind == "edm" else "t"

    @property
    def num_timesteps(self) -> int:
        return 0 if self.alphas_cumprod is None else int(self.alphas_cumprod.shape[0])

    def check_level(self, level: float) -> None:
        """InputError for a noise level this schedule does not have."""
        if not math.isfinite(level):
            raise InputError(f"noise level {level!r} is not finite")
        if self.kind == "edm":
            if level < 0:
                raise InputError(
                    f"noise level sigma = {level:g} is negative; an EDM schedule takes sigma >= 0 (e.g. 0.29)"
                )
        else:
            if level != int(level) or not 0 <= level < self.num_timesteps:
                raise InputError(
                    f"noise level t = {level:g} is not a timestep of this DDPM schedule (integers "
                    f"0..{self.num_timesteps - 1})"
                )

    def alpha_bar(self, level: float) -> float:
        if self.kind == "edm":
            return 1.0 / (1.0 + float(level) ** 2)
        return float(self.alphas_cumprod[int(level)])

    def default_grid(self) -> tuple[float, ...]:
        """The paper's sigma grid (Fig. 2/3) for EDM; ten timesteps with the same alpha_bar for DDPM."""
        sig = (0.0, 0.01, 0.02, 0.06, 0.14, 0.30, 0.59, 1.09, 1.92, 3.26)
        if self.kind == "edm":
            return sig
        ab = self.alphas_cumprod
        return tuple(sorted({int(torch.argmin((ab - 1.0 / (1.0 + s * s)).abs())) for s in sig}))

    def perturb(self, x0: Tensor, level: float, eps: Tensor) -> tuple[Tensor, Tensor]:
        """(network input, timestep tensor (B,)) of clean images x0 (B, C, H, W) in [-1, 1] at one level."""
        b = x0.shape[0]
        if self.kind == "edm":
            s = float(level)
            x = x0 + s * eps
            c_in = 1.0 / math.sqrt(s * s + self.sigma_data**2)
            return c_in * x, torch.full((b,), math.log(max(s, SIGMA_MIN)) / 4.0)
        ab = float(self.alphas_cumprod[int(level)])
        return math.sqrt(ab) * x0 + math.sqrt(1.0 - ab) * eps, torch.full((b,), int(level), dtype=torch.long)


def edm_denoise(unet, x: Tensor, sigma: Tensor, sigma_data: float = 0.5) -> Tensor:
    """D(x; sigma) of the EDM preconditioning. x (B, C, H, W); sigma (B,) > 0."""
    s = sigma.view(-1, 1, 1, 1).to(x.dtype)
    c_in = 1.0 / torch.sqrt(s * s + sigma_data**2)
    c_skip = sigma_data**2 / (s * s + sigma_data**2)
    c_out = s * sigma_data / torch.sqrt(s * s + sigma_data**2)
    c_noise = torch.log(sigma.clamp_min(SIGMA_MIN)) / 4.0
    return c_skip * x + c_out * unet(c_in * x, c_noise).sample


def edm_loss(
    unet, x0: Tensor, n: Tensor, eps: Tensor, *, p_mean: float = -1.2, p_std: float = 1.2, sigma_data: float = 0.5
) -> Tensor:
    """EDM training loss (Karras et al. 2022, Eq. 8 with lambda = 1/c_out^2): sigma = exp(P_mean + P_std n).
    x0 (B, C, H, W) in [-1, 1]; n (B,) and eps (B, C, H, W) standard normal. Returns the scalar mean."""
    sigma = torch.exp(p_mean + p_std * n)
    w = (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2
    d = edm_denoise(unet, x0 + sigma.view(-1, 1, 1, 1) * eps, sigma, sigma_data)
    return (w.view(-1, 1, 1, 1) * (d - x0) ** 2).mean()


@torch.no_grad()
def edm_sample(unet, noise: Tensor, *, steps: int = 18, sigma_data: float = 0.5) -> Tensor:
    """Deterministic EDM Heun sampler (Karras et al. 2022, Algorithm 1; rho = 7, sigma 80 -> 0.002,
    2 * steps - 1 network evaluations). noise (B, C, H, W) standard normal; returns x0 estimates in [-1, 1]."""
    i = torch.arange(steps, dtype=torch.float64)
    t = (SIGMA_MAX ** (1 / RHO) + i / (steps - 1) * (SIGMA_MIN ** (1 / RHO) - SIGMA_MAX ** (1 / RHO))) ** RHO
    t = torch.cat([t, torch.zeros(1, dtype=torch.float64)])
    x = noise.double() * t[0]
    for k in range(steps):
        tc, tn = float(t[k]), float(t[k + 1])
        b = x.shape[0]
        d = (x - edm_denoise(unet, x.float(), torch.full((b,), tc), sigma_data).double()) / tc
        xn = x + (tn - tc) * d
        if tn > 0:
            d2 = (xn - edm_denoise(unet, xn.float(), torch.full((b,), tn), sigma_data).double()) / tn
            xn = x + (tn - tc) * 0.5 * (d + d2)
        x = xn
    return x.float().clamp(-1, 1)


# ----------------------------------------------------------------------------- a user's folder
def _unet_dir(model_dir: str | Path) -> Path:
    p = Path(model_dir).expanduser()
    if not p.exists():
        raise InputError(f"--model {str(model_dir)!r} does not exist (expected a diffusers UNet2DModel folder)")
    if not p.is_dir():
        raise InputError(
            f"--model {str(model_dir)!r} is a file; expected a diffusers UNet2DModel folder (config.json + "
            "diffusion_pytorch_model.safetensors), e.g. the unet/ folder of an `icml26 icr train` run"
        )
    for cand in (p, p / "unet"):
        if (cand / "config.json").is_file():
            return cand
    raise InputError(
        f"--model {str(model_dir)!r} holds no config.json (nor unet/config.json): not a diffusers model folder"
    )


def check_model_dir(model_dir: str | Path) -> tuple[Path, dict, Schedule, dict]:
    """Validate a U-Net folder without loading weights: (unet folder, its config, schedule, icml26 metadata).

    Raises InputError (exit 2) for a missing folder, no or unreadable config.json, a model class that
    is not UNet2DModel, or no safetensors weights (pickled .bin weights are refused)."""
    d = _unet_dir(model_dir)
    try:
        conf = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"--model {str(model_dir)!r}: config.json is not readable JSON ({e})") from None
    if not isinstance(conf, dict) or conf.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise InputError(
            f"--model {str(model_dir)!r}: config.json describes "
            f"{conf.get('_class_name') if isinstance(conf, dict) else conf!r}, "
            "not a UNet2DModel"
        )
    if not any(d.glob("*.safetensors")):
        extra = " (only pickled .bin weights, which are not loaded)" if any(d.glob("*.bin")) else ""
        raise InputError(f"--model {str(model_dir)!r}: no .safetensors weights in {str(d)!r}{extra}")
    meta = {}
    for cand in (d / META_FILE, d.parent / META_FILE):
        if cand.is_file():
            try:
                meta = json.loads(cand.read_text(encoding="utf-8"))
            except ValueError:
                raise InputError(f"--model {str(model_dir)!r}: {cand.name} is not JSON") from None
            break
    if meta.get("schedule", "ddpm") == "edm":
        sched = Schedule("edm", float(meta.get("sigma_data", 0.5)))
    else:
        sched = Schedule("ddpm", alphas_cumprod=_ddpm_alphas(d.parent / "scheduler" / "scheduler_config.json"))
    return d, conf, sched, meta


def _ddpm_alphas(path: Path) -> Tensor:
    from diffusers import DDPMScheduler

    kw = {}
    if path.is_file():
        try:
            c = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise InputError(f"{str(path)!r} is not JSON") from None
        kw = {k: c[k] for k in ("num_train_timesteps", "beta_start", "beta_end", "beta_schedule") if k in c}
    return DDPMScheduler(**kw).alphas_cumprod.double()


def load_unet(unet_dir: Path):
    """UNet2DModel.from_pretrained of a checked folder (safetensors only, offline), eval mode, float32."""
    from diffusers import UNet2DModel

    try:
        m = UNet2DModel.from_pretrained(str(unet_dir), use_safetensors=True, local_files_only=True)
    except (OSError, ValueError, RuntimeError, TypeError) as e:
        raise InputError(
            f"--model {str(unet_dir)!r}: cannot load the UNet2DModel "
            f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    return m.float().eval()


def save_unet(unet, out_dir: Path, meta: dict) -> Path:
    """``save_pretrained`` (safetensors) into a temporary folder renamed to ``out_dir``, plus ``icml26_icr.json``."""
    with atomic_dir(out_dir) as tmp:
        unet.save_pretrained(str(tmp), safe_serialization=True)
        (tmp / META_FILE).write_text(to_json(meta) + "\n", encoding="utf-8")
    return out_dir
