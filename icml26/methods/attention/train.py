"""``icml26 muse train``: a small LLaMA-style model (byte tokens) pretrained from scratch per method
with the same seed, data order and steps; resumable checkpoints, torchrun (DDP on gloo)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_model, save_model
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.core import diverge
from icml26.core.dist import setup
from icml26.core.output import atomic_path, atomic_write_text, previous_results
from icml26.core.progress import progress
from icml26.methods.attention import hf
from icml26.methods.attention.config import Config
from icml26.methods.attention.data import token_windows
from icml26.ops import muse as kernel


def _tiny_llama(cfg: Config, n: int, attn: str):
    lc = LlamaConfig(
        vocab_size=256,
        hidden_size=cfg.d_model,
        intermediate_size=4 * cfg.d_model,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=n,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return LlamaForCausalLM._from_config(lc, attn_implementation=attn)


def _loss(model, ids):
    logits = model(ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def _dist():
    """(rank, world) under torchrun (gloo process group, initialised once), else (0, 1)."""
    d = setup()
    return d.rank, d.world


def run_train(
    cfg: Config, *, seed: int = 0, device: str = "cpu", out: str | None = None, previous: list[dict] | None = None
) -> Iterator[dict]:
    """Pretrain one small model per method (same init seed, data order, steps); resumable from
    ``out/ckpt-<method>/`` (model.safetensors, optimizer.pt, state.json). Under torchrun every
    rank trains on its own windows and gradients are averaged (DDP on gloo); rank 0 writes."""
    rank, world = _dist()
    torch.set_num_threads(cfg.threads)
    hf.register(cfg.settings())
    n = cfg.context_tokens[0]
    train_ids = torch.tensor(sum(token_windows(None, "train", n + 1, max(64, world * 4), cfg.text), []))
    val = [torch.tensor([w]) for w in token_windows(None, "val", n + 1, cfg.val_windows, cfg.text)]
    done = previous_results(previous, "method")
    prev_steps: dict[str, list[dict]] = {}
    for r in previous or ():
        if r.get("kind") == "step":
            prev_steps.setdefault(r.get("method"), []).append(r)
    results = []
    for mth in cfg.methods:
        if (mth,) in done:
            yield from prev_steps.get(mth, [])
            results.append(done[(mth,)])
            yield done[(mth,)]
            continue
        torch.manual_seed(seed)
        model = _tiny_llama(cfg, n + 1, "sdpa" if mth == "sdpa" else "muse").to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / max(1, cfg.warmup_steps)))
        ddp = model
        if world > 1:
            ddp = torch.nn.parallel.DistributedDataParallel(model)
        ck = Path(out) / f"ckpt-{mth}" if out else None
        start, wall = 0, 0.0
        losses: list[float] = []
        if ck is not None and previous is not None and (ck / "state.json").is_file():
            st = json.loads((ck / "state.json").read_text())
            load_model(model, str(ck / "model.safetensors"))
            opt.load_state_dict(torch.load(ck / "optimizer.pt", weights_only=True))
            sched.load_state_dict(st["scheduler"])
            start, wall, losses = st["step"], st["wall_s"], st["losses"]
            for r in prev_steps.get(mth, []):
                if r["step"] <= start:
                    yield r
        g = torch.Generator().manual_seed(seed)
        offsets = torch.randint(0, train_ids.numel() - n - 1, (cfg.train_steps, world), generator=g)
        # which attention path trains (and, on first use, the C++ kernel's build) is settled before the clock starts
        path = "sdpa" if mth == "sdpa" else kernel.backend_for(torch.zeros(1, 1, 2, 1), cfg.settings(mth))
        diverged = None
        with (
            hf.settings(cfg.settings(mth), method=mth),
            progress(cfg.train_steps - start, f"muse train {mth}") as bar,
        ):
            model.train()
            for step in range(start + 1, cfg.train_steps + 1):
                t0 = time.perf_counter()
                o = int(offsets[step - 1, rank])
                ids = train_ids[o : o + n + 1].unsqueeze(0).to(device)
                loss = _loss(ddp, ids)
                try:
                    diverge.check(step, loss=loss.detach())
                except diverge.Diverged as e:
                    diverged = e
                    diverge.warn(e, f"muse train {mth}")
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                lv = loss.detach()
                if world > 1:
                    dist.all_reduce(lv)
                    lv /= world
                dt = time.perf_counter() - t0
                wall += dt
                losses.append(float(lv))
                bar.advance(1, loss=float(lv), tok_s=n * world / dt)
                if step % cfg.log_every == 0 or step == cfg.train_steps:
                    yield {
                        "kind": "step",
                        "method": mth,
                        "step": step,
                        "loss": float(lv),
                        "tokens_per_s": n * world / dt,
                        "wall_s": wall,
                    }
                if ck is not None and rank == 0 and (step % cfg.checkpoint_every == 0 or step == cfg.train_steps):
                    ck.mkdir(parents=True, exist_ok=True)
                    with atomic_path(ck / "model.safetensors") as p:
                        save_model(model, str(p))
                    with atomic_path(ck / "optimizer.pt") as p:
                        torch.save(opt.state_dict(), p)
                    atomic_write_text(
                        ck / "state.json",
                        json.dumps({"step": step, "wall_s": wall, "losses": losses, "scheduler": sched.state_dict()}),
                    )
            model.eval()
            if diverged is None:
                with torch.no_grad():
                    vl = statistics.fmean(float(_loss(model, w.to(device))) for w in val)
        if diverged is not None:
            rec = {
                "kind": "result",
                "method": mth,
                "context_tokens": n,
                "final_loss": None,
                "val_loss": None,
                "wall_s": wall,
                "steps": len(losses),
                "world_size": world,
                "attention_path": path,
                **diverge.diverged_fields(diverged),
            }
            results.append(rec)
            yield rec
            continue
        tail = losses[-max(1, len(losses) // 10) :]
        rec = {
            "kind": "result",
            "method": mth,
            "context_tokens": n,
            "final_loss": statistics.fmean(tail),
            "val_loss": vl,
            "wall_s": wall,
            "steps": cfg.train_steps,
            "world_size": world,
            "attention_path": path,
            **diverge.diverged_fields(None),
        }
        results.append(rec)
        yield rec
    summ = {"kind": "summary", "context_tokens": n, "steps": cfg.train_steps}
    by = {r["method"]: r for r in results if not r.get("diverged")}
    if "sdpa" in by and "muse" in by:
        summ["val_loss_ratio_muse_vs_sdpa"] = by["muse"]["val_loss"] / by["sdpa"]["val_loss"]
        summ["wall_ratio_muse_vs_sdpa"] = by["muse"]["wall_s"] / by["sdpa"]["wall_s"]
    yield summ
