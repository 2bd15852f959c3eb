"""The training loop every train-lfm stage shares: AdamW, optional EMA, safetensors checkpoints,
exact ``--resume``, DDP slices of one global batch, divergence checks and progress.

Determinism: ``step_generator(seed, stage, step)`` draws each step's batch, times and noise, so a
resumed run and N torchrun processes compute the same run as one process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

from icml26.core import diverge
from icml26.core.dist import Dist
from icml26.core.errors import InputError
from icml26.core.progress import progress
from icml26.methods.lfm import ckpt


def step_generator(seed: int, stage: str, step: int) -> torch.Generator:
    """The generator of one training step: a function of (seed, stage, step) only."""
    code = {"vae": 1, "features": 2, "fm": 3, "proxy": 4}[stage]
    return torch.Generator().manual_seed((seed * 1_000_003 + code * 10_000_019 + step * 7919) % (2**63 - 1))


def batch_rows(seed: int, stage: str, step: int, n: int, batch: int) -> tuple[torch.Generator, Tensor]:
    """The step's generator and the ``batch`` row indices (of ``n``) it draws first."""
    g = step_generator(seed, stage, step)
    return g, torch.randint(n, (batch,), generator=g)


@dataclass(frozen=True)
class Trainer:
    """What every training stage of one run shares (processes, device, --resume, record and
    checkpoint intervals): ``Trainer.fit`` is ``fit`` with these bound, under a progress bar."""

    dist: Dist
    device: str | torch.device = "cpu"
    resume: bool = False
    log_every: int = 10**9
    checkpoint_every: int = 10**9

    def fit(
        self,
        stage: str,
        model: nn.Module,
        loss_fn: Callable[[nn.Module, dict], Tensor],
        batch_fn: Callable[[int], dict],
        *,
        steps: int,
        lr: float,
        ema_decay: float | None = None,
        weight_decay: float = 0.0,
        ckpt_path: Path | None = None,
        meta: dict | None = None,
        extra: dict[str, Tensor] | None = None,
        desc: str | None = None,
    ) -> Iterator[dict]:
        """``fit`` for one stage; ``desc``: the progress bar's label (None: no bar)."""
        kw = dict(
            stage=stage,
            model=model,
            loss_fn=loss_fn,
            batch_fn=batch_fn,
            steps=steps,
            lr=lr,
            weight_decay=weight_decay,
            ema_decay=ema_decay,
            ckpt_path=ckpt_path,
            resume=self.resume,
            log_every=self.log_every,
            checkpoint_every=self.checkpoint_every,
            dist=self.dist,
            meta=meta or {},
            extra=extra,
            device=self.device,
        )
        if desc is None:
            yield from fit(**kw)
            return
        with progress(steps, desc) as bar:
            yield from fit(**kw, bar=bar)


# ----------------------------------------------------------------------------- generic loop
def fit(
    *,
    stage: str,
    model: nn.Module,
    loss_fn: Callable[[nn.Module, dict], Tensor],
    batch_fn: Callable[[int], dict],
    steps: int,
    lr: float,
    weight_decay: float = 0.0,
    ema_decay: float | None,
    ckpt_path: Path | None,
    resume: bool,
    log_every: int,
    checkpoint_every: int,
    dist: Dist,
    meta: dict,
    extra: dict[str, Tensor] | None = None,
    bar=None,
    device: str | torch.device = "cpu",
) -> Iterator[dict]:
    """Train ``model`` for ``steps`` AdamW steps on ``device``; yield ``step`` records; checkpoint
    to ``ckpt_path`` (tensors saved from the CPU).

    batch_fn(step) -> global batch (dict of tensors with batch dim first, or None values), drawn
    on the CPU and moved to ``device``; each rank uses rows [rank*B/W, (rank+1)*B/W).
    loss_fn(net, local_batch) -> scalar mean loss. A non-finite loss or parameter raises
    ``core.diverge.Diverged`` (the caller reports the run as diverged)."""
    model.to(device)
    net = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if ema_decay is not None else None
    start, elapsed0 = 0, 0.0
    if resume and ckpt_path is not None and ckpt_path.is_file():
        tensors, m = ckpt.load(ckpt_path)
        if m.get("stage") != stage:
            raise InputError(f"--resume: {ckpt_path} is a {m.get('stage')!r} checkpoint, expected {stage!r}")
        model.load_state_dict(ckpt.sub(tensors, "model"))
        if ema is not None:
            ema = {k: v.to(device) for k, v in (ckpt.sub(tensors, "ema") or ema).items()}
        ckpt.optim_from_flat(opt, tensors, m["param_groups"])
        start, elapsed0 = int(m["step"]), float(m.get("seconds", 0.0))

    def save(step: int, seconds: float) -> None:
        if ckpt_path is None or not dist.main:
            return
        flat, groups = ckpt.optim_to_flat(opt)
        tensors = {**ckpt.prefixed(model.state_dict(), "model"), **flat, **(extra or {})}
        if ema is not None:
            tensors.update(ckpt.prefixed(ema, "ema"))
        tensors = {k: v.detach().cpu() for k, v in tensors.items()}
        ckpt.save(
            ckpt_path,
            tensors,
            {**meta, "stage": stage, "step": step, "steps": steps, "seconds": seconds, "param_groups": groups},
        )

    t0 = time.perf_counter()
    window: list[float] = []
    model.train()
    for step in range(start, steps):
        batch = batch_fn(step)
        B = next(v.shape[0] for v in batch.values() if v is not None)
        if B % dist.world:
            raise InputError(f"batch size {B} is not divisible by the {dist.world} processes")
        lo, hi = dist.rank * B // dist.world, (dist.rank + 1) * B // dist.world
        local = {
            k: (v[lo:hi] if v is not None and v.dim() > 0 and v.shape[0] == B else v).to(device)
            if v is not None
            else None
            for k, v in batch.items()
        }
        loss = loss_fn(net, local)
        diverge.check(step + 1, loss=loss.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if ema is not None:
            d = min(ema_decay, (1.0 + step) / (10.0 + step))  # warm-up so short runs still average
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    if v.dtype.is_floating_point:
                        ema[k].mul_(d).add_(v.detach(), alpha=1.0 - d)
                    else:
                        ema[k].copy_(v)
        window.append(float(loss.detach()))
        if bar is not None:
            bar.advance(1, loss=window[-1])
        last = step + 1 == steps
        if (step + 1) % log_every == 0 or last:
            diverge.check_params(step + 1, model.parameters())
            lv = dist.mean(sum(window) / len(window))
            window = []
            yield {
                "kind": "step",
                "stage": stage,
                "step": step + 1,
                "loss": lv,
                "seconds": elapsed0 + time.perf_counter() - t0,
            }
        if (step + 1) % checkpoint_every == 0 or last:
            save(step + 1, elapsed0 + time.perf_counter() - t0)
            dist.barrier()
    if start >= steps and ckpt_path is not None and not ckpt_path.is_file():
        save(steps, elapsed0)
    if ema is not None:
        model.load_state_dict(ema)
    model.eval()
