"""The CPU experiment of ``icml26 geo-fusion train``: what SGF buys over no geometry and passive
fusion on the rendered VSI-style benchmark (docs/geo-fusion.md).

Everything here is RECON (no pretrained VLM or VGGT ships offline):
1. Semantic encoder (frozen after training here): a per-pixel colour MLP + 4-layer stride-16 CNN trained on the
   training scenes' frames to tell which object classes each 16x16 patch holds (multi-label,
   from the instance pass; BCE with positive weights = negative/positive ratio); 2x2 patches merged into one
   visual token (32x32 px).
2. Geometry tokens, the stand-in for VGGT's per-patch tokens: for every visual token, statistics
   of the points back-projected from the exact depth and pose (in frame-0 camera coordinates,
   metric, or scaled to unit median depth with ``geometry_scale: relative``, VGGT-like) and the
   frame's camera centre / axis; Fourier features, then a frozen random MLP (fixed seed).
3. The language side: a small LLaMA (transformers ``LlamaModel``, trained here) reads the visual
   tokens of ``frames`` uniformly sampled views, then the question tokens (task + the classes it
   names, with role embeddings); heads on the last token: log-value regression for numeric
   tasks, option logits for multiple choice. Predictions are written as text and scored by
   :mod:`icml26.methods.spatial.scoring`.
4. Variants: ``none`` (no geometry), ``passive`` (geometry tokens added to the visual tokens at
   the input, VG-LLM's "add"), ``sgf`` (attach_sgf, frame-strict, gated), ``sgf-nogate``,
   ``sgf-global`` (not frame-strict). Trained: the LM, the geometry merger, the visual projector,
   the fusion and the heads; frozen: both encoders.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from icml26.core import diverge
from icml26.core.data import renders as R
from icml26.core.errors import InputError
from icml26.core.output import atomic_write_text, to_json
from icml26.core.progress import progress
from icml26.core.verdict import seed_interval, verdict
from icml26.methods.spatial import bench as B
from icml26.methods.spatial import scoring as S
from icml26.methods.spatial.config import VARIANTS, Config  # noqa: F401
from icml26.methods.spatial.sgf import attach_sgf

DIR_OPTIONS = {"object_rel_direction_easy": 2, "object_rel_direction_medium": 3, "object_rel_direction_hard": 4}
NUMERIC = S.NA_QUESTION_TYPES
TASK_IDS = {t: i for i, t in enumerate(S.TASKS)}
CLASS_IDS = {c: i for i, c in enumerate(B.CLASSES)}
PATCH = 16
MAX_REFS = 6


# --------------------------------------------------------------------------- data


@dataclass
class SceneData:
    name: str
    rgb: np.ndarray  # (F, H, W, 3) uint8
    patch_labels: np.ndarray  # (F, gh, gw, C) float multi-hot
    geometry: np.ndarray  # (F, T, 18) raw geometry statistics per visual token


def _frame_indices(n: int, f: int) -> np.ndarray:
    return np.unique(np.round(np.linspace(0, n - 1, f)).astype(int)) if n >= f else np.arange(n)


def load_scene(bench_dir: Path, name: str, frames: int, scale: str) -> SceneData:
    rs = R.read_scene(bench_dir / "scenes" / name)
    idx = _frame_indices(len(rs), frames)
    if len(idx) < frames:
        raise InputError(f"scene {name}: {len(rs)} views, fewer than frames={frames}")
    h, w = rs.cameras[0].height, rs.cameras[0].width
    if h % (2 * PATCH) or w % (2 * PATCH):
        raise InputError(f"scene {name}: {w}x{h} images; width and height must be multiples of {2 * PATCH}")
    cls_of = {o["id"]: CLASS_IDS[o["class"]] for o in rs.scene["objects"]}
    gh, gw = h // PATCH, w // PATCH
    rgb, labels, geo = [], [], []
    w2c0 = np.linalg.inv(rs.cameras[idx[0]].c2w)
    depths = [rs.depth(int(i)) for i in idx]
    med = float(np.median(np.concatenate([d[np.isfinite(d)] for d in depths]))) if scale == "relative" else 1.0
    for i, d in zip(idx, depths):
        cam = rs.cameras[int(i)]
        rgb.append(rs.rgb(int(i)))
        inst = rs.instances(int(i))
        lab = np.zeros((gh, gw, len(B.CLASSES)), np.float32)
        for oid, c in cls_of.items():
            m = (inst == oid).reshape(gh, PATCH, gw, PATCH).sum((1, 3))
            lab[..., c] = np.maximum(lab[..., c], (m >= 8).astype(np.float32))
        labels.append(lab)
        P = R.backproject(np.where(np.isfinite(d), d, 32.0), cam, stride=4)  # (H/4, W/4, 3) world
        P = (P @ w2c0[:3, :3].T + w2c0[:3, 3]) / med  # frame-0 camera coordinates
        th, tw = h // (2 * PATCH), w // (2 * PATCH)
        s = 2 * PATCH // 4
        blk = P.reshape(th, s, tw, s, 3).transpose(0, 2, 1, 3, 4).reshape(th * tw, s * s, 3)
        c0 = w2c0 @ cam.c2w
        cam_feat = np.concatenate([c0[:3, 3] / med, c0[:3, 2]])
        geo.append(
            np.concatenate(
                [blk.mean(1), blk.std(1), blk.min(1), blk.max(1), np.broadcast_to(cam_feat, (th * tw, 6))], 1
            ).astype(np.float32)
        )
    return SceneData(name, np.stack(rgb), np.stack(labels), np.stack(geo))


def load_split(bench_dir: str | Path, cfg: Config) -> tuple[list[dict], dict[str, SceneData]]:
    d = Path(bench_dir)
    qs = [q for q in B.read_questions(d) if q["task"] in TASK_IDS]
    scenes = {n: load_scene(d, n, cfg.frames, cfg.geometry_scale) for n in sorted({q["scene"] for q in qs})}
    return qs, scenes


# --------------------------------------------------------------------------- frozen encoders


class PatchCNN(nn.Module):
    """Stride-16 CNN: (B, 3, H, W) in [0, 1] -> (B, 32, H/16, W/16) features, + a class head."""

    def __init__(self, classes: int = len(B.CLASSES), width: int = 32):
        super().__init__()
        layers, c = (
            [nn.Conv2d(3, width, 1), nn.GELU(), nn.Conv2d(width, width, 1), nn.GELU()],
            width,
        )  # per-pixel colour
        for _ in range(4):
            layers += [nn.Conv2d(c, width, 3, stride=2, padding=1), nn.GELU()]
            c = width
        self.body = nn.Sequential(*layers, nn.Conv2d(width, width, 1))
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        return self.body(x)


def train_semantic_encoder(scenes: dict[str, SceneData], steps: int, seed: int) -> tuple[PatchCNN, float]:
    """Train the patch-class CNN on the training scenes' frames; returns it (frozen) and its patch F1."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = torch.from_numpy(np.concatenate([s.rgb for s in scenes.values()])).permute(0, 3, 1, 2).float() / 255.0
    y = torch.from_numpy(np.concatenate([s.patch_labels for s in scenes.values()])).permute(0, 3, 1, 2)
    net = PatchCNN()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    pos = y.mean((0, 2, 3))
    pos_weight = ((1 - pos) / pos.clamp(min=1e-3)).clamp(max=50)[None, :, None, None]  # rare classes: recall matters
    for _ in range(steps):
        b = torch.randint(0, len(x), (min(32, len(x)),), generator=g)
        loss = nn.functional.binary_cross_entropy_with_logits(net.head(net(x[b])), y[b], pos_weight=pos_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval().requires_grad_(False)
    with torch.no_grad():
        pred = torch.cat([net.head(net(x[i : i + 64])) for i in range(0, len(x), 64)]) > 0
    tp = (pred & (y > 0)).sum().item()
    f1 = 2 * tp / max(1, pred.sum().item() + (y > 0).sum().item())
    return net, f1


def fourier(x: torch.Tensor, bands: int = 4) -> torch.Tensor:
    f = torch.cat([x * (2.0**k) * math.pi / 4 for k in range(bands)], -1)
    return torch.cat([x, torch.sin(f), torch.cos(f)], -1)


def geometry_encoder(seed: int = 12345, dim: int = 128) -> nn.Module:
    """Frozen random MLP over Fourier features of the 18 geometry statistics (the VGGT stand-in)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(18 * 9, dim), nn.GELU(), nn.Linear(dim, dim))
    return net.eval().requires_grad_(False)


def encode_scenes(
    scenes: dict[str, SceneData], cnn: PatchCNN, geo_net: nn.Module
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (semantic tokens (F*T, 128), geometry tokens (F*T, 128)) from the frozen encoders."""
    out = {}
    with torch.no_grad():
        for n, s in scenes.items():
            x = torch.from_numpy(s.rgb).permute(0, 3, 1, 2).float() / 255.0
            f = cnn(x)  # (F, 32, gh, gw)
            F_, c, gh, gw = f.shape
            f = (
                f.view(F_, c, gh // 2, 2, gw // 2, 2)
                .permute(0, 2, 4, 1, 3, 5)
                .reshape(F_ * (gh // 2) * (gw // 2), c * 4)
            )
            geo = geo_net(fourier(torch.from_numpy(s.geometry).reshape(-1, 18)))
            out[n] = (f, geo)
    return out


# --------------------------------------------------------------------------- model


class SpatialQA(nn.Module):
    def __init__(self, cfg: Config, variant: str, tokens_per_frame: int):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        d = cfg.hidden_size
        self.variant, self.F, self.T = variant, cfg.frames, tokens_per_frame
        lc = LlamaConfig(
            hidden_size=d,
            intermediate_size=cfg.mlp_ratio * d,
            num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.heads,
            vocab_size=8,
            max_position_embeddings=512,
        )
        self.lm = LlamaModel(lc)
        self.vis_proj = nn.Linear(128, d)
        self.geo_merger = nn.Sequential(nn.Linear(128, d), nn.GELU(), nn.Linear(d, d)) if variant != "none" else None
        self.frame_emb = nn.Embedding(cfg.frames, d)
        self.slot_emb = nn.Embedding(tokens_per_frame, d)
        self.task_emb = nn.Embedding(len(S.TASKS), d)
        self.class_emb = nn.Embedding(len(B.CLASSES), d)
        self.role_emb = nn.Embedding(MAX_REFS, d)
        self.num_head = nn.Linear(d, len(NUMERIC))
        self.dir_head = nn.ModuleDict({t: nn.Linear(d, k) for t, k in DIR_OPTIONS.items()})
        self.cls_head = nn.Linear(d, len(B.CLASSES))  # rel_distance: option class logits
        self.time_head = nn.Linear(d, len(B.CLASSES))  # appearance order: first-appearance time per class
        self.att = None
        if variant.startswith("sgf"):
            self.att = attach_sgf(self.lm, gate=variant != "sgf-nogate", frame_strict=variant != "sgf-global")
            self.sgf = self.att.modules  # registered here so that they train and save with the model
        self.route_head = nn.Linear(d, 2 * len(B.ROUTE_TURNS))  # route_planning: logits of each of the 2 turns

    def forward(self, sem: torch.Tensor, geo: torch.Tensor, task: torch.Tensor, refs: torch.Tensor) -> torch.Tensor:
        """sem, geo: (B, F*T, 128); task (B,); refs (B, MAX_REFS) class ids or -1. Returns (B, d)."""
        Bn, N, _ = sem.shape
        fid = torch.arange(self.F).repeat_interleave(self.T)
        slot = torch.arange(self.T).repeat(self.F)
        vis = self.vis_proj(sem) + self.frame_emb(fid) + self.slot_emb(slot)
        g = self.geo_merger(geo) if self.geo_merger is not None else None
        if self.variant == "passive":
            vis = vis + g
        valid = refs >= 0
        qtok = self.class_emb(refs.clamp(min=0)) + self.role_emb.weight[None]
        qtok = qtok * valid[..., None]
        seq = torch.cat([vis, qtok, self.task_emb(task)[:, None]], 1)  # (B, N + MAX_REFS + 1, d)
        if self.att is not None:
            mask = torch.zeros(seq.shape[1], dtype=torch.bool)
            mask[:N] = True
            self.att.set_geometry(g, fid, mask)
        h = self.lm(inputs_embeds=seq).last_hidden_state[:, -1]
        if self.att is not None:
            self.att.clear()
        return h


def _batch(qs: list[dict], feats: dict) -> tuple:
    sem = torch.stack([feats[q["scene"]][0] for q in qs])
    geo = torch.stack([feats[q["scene"]][1] for q in qs])
    task = torch.tensor([TASK_IDS[q["task"]] for q in qs])
    refs = torch.full((len(qs), MAX_REFS), -1, dtype=torch.long)
    for i, q in enumerate(qs):
        r = [CLASS_IDS[c] for c in q.get("objects", [])][:MAX_REFS]
        refs[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return sem, geo, task, refs


def _option_classes(q: dict) -> list[str]:
    return [o.split(". ", 1)[1] for o in q["options"]]


def _route_turns(option: str) -> list[int]:
    """Indices in ``bench.ROUTE_TURNS`` of an option's turns ("turn left, turn back" -> [0, 2])."""
    return [B.ROUTE_TURNS.index(w) for w in option.split(", ")]


def batch_loss(model: SpatialQA, h: torch.Tensor, qs: list[dict]) -> torch.Tensor:
    """Mean per-question loss, grouped by task (vectorized): smooth-L1 on log values (numeric),
    cross-entropy over the options (multiple choice), pairwise logistic on the true order
    (appearance order), cross-entropy on each turn of the true route (route planning)."""
    total = h.new_zeros(())
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(qs):
        groups.setdefault(q["task"], []).append(i)
    for t, idx in groups.items():
        ix = torch.tensor(idx)
        sub = [qs[i] for i in idx]
        if t in NUMERIC:
            y = torch.tensor([math.log(max(float(q["answer"]), 1e-3)) for q in sub])
            p = model.num_head(h[ix])[:, NUMERIC.index(t)]
            total = total + nn.functional.smooth_l1_loss(p, y, beta=0.5, reduction="sum")
        elif t in DIR_OPTIONS:
            gold = torch.tensor([ord(q["answer"]) - 65 for q in sub])
            total = total + nn.functional.cross_entropy(model.dir_head[t](h[ix]), gold, reduction="sum")
        elif t == "object_rel_distance":
            opts = torch.tensor([[CLASS_IDS[c] for c in _option_classes(q)] for q in sub])
            logits = model.cls_head(h[ix]).gather(1, opts)
            gold = torch.tensor([ord(q["answer"]) - 65 for q in sub])
            total = total + nn.functional.cross_entropy(logits, gold, reduction="sum")
        elif t == "obj_appearance_order":
            order = torch.tensor(
                [[CLASS_IDS[c] for c in _option_classes(q)[ord(q["answer"]) - 65].split(", ")] for q in sub]
            )
            tt = model.time_head(h[ix]).gather(1, order)  # (n, 4) predicted times in the true order
            a, b = torch.triu_indices(order.shape[1], order.shape[1], 1)
            total = total + nn.functional.softplus(tt[:, a] - tt[:, b]).mean(1).sum()
        elif t == "route_planning":
            gold = torch.tensor([_route_turns(_option_classes(q)[ord(q["answer"]) - 65]) for q in sub])  # (n, 2)
            logits = model.route_head(h[ix]).view(len(sub), 2, len(B.ROUTE_TURNS))
            total = (
                total
                + nn.functional.cross_entropy(logits.reshape(-1, len(B.ROUTE_TURNS)), gold.reshape(-1), reduction="sum")
                / 2
            )
    return total / len(qs)


def predict(model: SpatialQA, h: torch.Tensor, qs: list[dict]) -> list[str]:
    """Text predictions: a number for numeric tasks, an option letter for multiple choice."""
    num, cls, tim = model.num_head(h), model.cls_head(h), model.time_head(h)
    preds = []
    for i, q in enumerate(qs):
        t = q["task"]
        if t in NUMERIC:
            preds.append(S.fmt_number(math.exp(float(num[i, NUMERIC.index(t)]))))
        elif t in DIR_OPTIONS:
            preds.append(chr(65 + int(model.dir_head[t](h[i]).argmax())))
        elif t == "object_rel_distance":
            opts = torch.tensor([CLASS_IDS[c] for c in _option_classes(q)])
            preds.append(chr(65 + int(cls[i, opts].argmax())))
        elif t == "obj_appearance_order":
            scores = []
            for o in _option_classes(q):
                oid = [CLASS_IDS[c] for c in o.split(", ")]
                scores.append(
                    sum(float(tim[i, oid[b]] > tim[i, oid[a]]) for a in range(len(oid)) for b in range(a + 1, len(oid)))
                )
            preds.append(chr(65 + int(np.argmax(scores))))
        elif t == "route_planning":  # the option whose turns have the highest summed log-probability
            lp = torch.log_softmax(model.route_head(h[i]).detach().view(2, len(B.ROUTE_TURNS)), -1)
            scores = [float(lp[0, a] + lp[1, b]) for a, b in (_route_turns(o) for o in _option_classes(q))]
            preds.append(chr(65 + int(np.argmax(scores))))
        else:
            raise ValueError(f"no head for task {t!r}")
    return preds


def _evaluate(model: "SpatialQA", test_qs: list[dict], test_feats: dict) -> tuple[list[dict], list[dict], dict]:
    """Predict every test question (eval mode, no gradients); rows, score records, summary."""
    was_training = model.training
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(test_qs), 64):
            qs = test_qs[i : i + 64]
            preds += predict(model, model(*_batch(qs, test_feats)), qs)
    model.train(was_training)
    rows = [
        {
            "id": q["id"],
            "task": q["task"],
            "question_type": q["question_type"],
            "answer": q["answer"],
            **({"options": q["options"]} if "options" in q else {}),
            "prediction": p,
        }
        for q, p in zip(test_qs, preds)
    ]
    records, summary = S.score(rows)
    return rows, records, summary


def train_eval(
    cfg: Config,
    variant: str,
    seed: int,
    train: tuple,
    test: tuple,
    *,
    curve_every: int = 25,
    eval_every: int = 0,
    bar=None,
) -> dict:
    """Train one variant with one seed; returns per-task scores on the test questions, the
    predictions, params_trained, timings and the training-loss curve (``loss_curve``: mean batch
    loss over each ``curve_every`` steps, as [step, loss]). ``eval_every`` > 0 also scores the
    test questions every that many steps (``eval_curve``: [step, overall]); use it with held-out
    training scenes only (choosing settings on the evaluation scenes would leak them). ``bar``: a
    core.progress bar advanced per step. A non-finite loss raises ``diverge.Diverged``."""
    train_qs, train_feats = train
    test_qs, test_feats = test
    torch.manual_seed(seed)
    T = next(iter(train_feats.values()))[0].shape[0] // cfg.frames
    model = SpatialQA(cfg, variant, T)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * s / cfg.steps))
    )
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    model.train()
    curve, eval_curve, window = [], [], []
    eval_s = 0.0
    for step in range(1, cfg.steps + 1):
        qs = [train_qs[j] for j in rng.integers(0, len(train_qs), cfg.batch_size)]
        h = model(*_batch(qs, train_feats))
        loss = batch_loss(model, h, qs)
        diverge.check(step, loss=loss)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        window.append(float(loss.detach()))
        if bar is not None:
            bar.advance(1, variant=variant, seed=seed, loss=window[-1])
        if step % curve_every == 0 or step == cfg.steps:
            curve.append([step, sum(window) / len(window)])
            window = []
        if eval_every and (step % eval_every == 0 or step == cfg.steps):
            te = time.perf_counter()
            eval_curve.append([step, _evaluate(model, test_qs, test_feats)[2]["overall"]])
            eval_s += time.perf_counter() - te
    train_s = time.perf_counter() - t0 - eval_s
    rows, records, summary = _evaluate(model, test_qs, test_feats)
    gammas = [float(torch.tanh(m.gamma.detach())) for m in model.sgf.values()] if model.att is not None else []
    if model.att is not None:
        model.att.detach()
    return {
        "variant": variant,
        "seed": seed,
        "scores": {r["task"]: r["score"] for r in records},
        "overall": summary["overall"],
        "params_trained": n_params,
        "train_s": train_s,
        "final_loss": float(loss.detach()),
        "tanh_gamma": gammas,
        "loss_curve": curve,
        **({"eval_curve": eval_curve} if eval_every else {}),
        "predictions": rows,
    }


def load_splits(cfg: Config, bench: str | Path, train_bench: str | Path) -> tuple[tuple, tuple]:
    """Both splits' (questions, scenes), every scene file read: an InputError here names the file,
    so the command calls this before its first record."""
    train, test = load_split(train_bench, cfg), load_split(bench, cfg)
    if not train[0] or not test[0]:
        raise InputError("no questions in --train-bench or --bench")
    return train, test


def prepare(
    cfg: Config, bench: str | Path, train_bench: str | Path, seed: int, splits: tuple | None = None
) -> tuple[tuple, tuple, dict]:
    """Load both splits (or take ``load_splits``' result), train the semantic encoder on the
    training scenes, encode everything."""
    torch.set_num_threads(cfg.threads)
    (train_qs, train_sc), (test_qs, test_sc) = splits or load_splits(cfg, bench, train_bench)
    overlap = sorted(set(train_sc) & set(test_sc)) if Path(train_bench).resolve() == Path(bench).resolve() else []
    if overlap:
        raise InputError(
            "--train-bench and --bench are the same folder: train on disjoint scenes (make-bench --first-index)"
        )
    t0 = time.perf_counter()
    cnn, f1 = train_semantic_encoder(train_sc, cfg.encoder_steps, seed)
    geo_net = geometry_encoder()
    info = {
        "encoder_patch_f1_train": f1,
        "encoder_s": time.perf_counter() - t0,
        "train_questions": len(train_qs),
        "test_questions": len(test_qs),
        "train_scenes": len(train_sc),
        "test_scenes": len(test_sc),
    }
    return (train_qs, encode_scenes(train_sc, cnn, geo_net)), (test_qs, encode_scenes(test_sc, cnn, geo_net)), info


def ci95(values: list[float]) -> list[float] | None:
    """Student-t 95% interval of the mean over seeds; None for one seed (never zero width)."""
    return seed_interval(values)


def aggregate(runs: list[dict]) -> Iterator[dict]:
    """One result per (variant, task) and one per variant with task overall (means over seeds)."""
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["variant"], []).append(r)
    for variant in VARIANTS:
        rs = by.get(variant)
        if not rs:
            continue
        bad = [r for r in rs if r.get("diverged")]
        if bad:  # a diverged seed: the variant is reported as diverged, without figures
            yield {
                "kind": "result",
                "variant": variant,
                "task": "overall",
                "score": None,
                "score_ci": None,
                "seeds": len(rs),
                "diverged": True,
                "diverged_step": bad[0]["diverged_step"],
                "diverged_what": bad[0]["diverged_what"],
                "diverged_seed": bad[0]["seed"],
            }
            continue
        tasks = [t for t in list(S.TASKS) + [S.DIRECTION_TASK] if t not in S.DIRECTION_SPLITS and t in rs[0]["scores"]]
        for t in tasks + list(S.DIRECTION_SPLITS):
            if t not in rs[0]["scores"]:
                continue
            vals = [r["scores"][t] for r in rs]
            yield {
                "kind": "result",
                "variant": variant,
                "task": t,
                "score": float(np.mean(vals)),
                "score_ci": ci95(vals),
                "params_trained": rs[0]["params_trained"],
                "seeds": len(rs),
                "per_seed": vals,
            }
        vals = [r["overall"] for r in rs]
        yield {
            "kind": "result",
            "variant": variant,
            "task": "overall",
            "score": float(np.mean(vals)),
            "score_ci": ci95(vals),
            "params_trained": rs[0]["params_trained"],
            "seeds": len(rs),
            "per_seed": vals,
            "train_s": float(np.mean([r["train_s"] for r in rs])),
            "diverged": False,
        }


def run(
    cfg: Config,
    *,
    bench: str | Path,
    train_bench: str | Path,
    seed: int = 0,
    out: str | Path | None = None,
    previous: dict | None = None,
    splits: tuple | None = None,
) -> Iterator[dict]:
    """``train``: prepare, then every (variant, seed) run (a ``step`` record each), then the
    aggregated results and the summary. ``previous``: {(variant, seed): run} already done;
    ``splits``: ``load_splits``' result, when the caller read the scenes already."""

    train, test, info = prepare(cfg, bench, train_bench, seed, splits)
    yield {"kind": "step", "stage": "encoders", **info}
    runs = []
    with progress(len(cfg.variants) * cfg.seeds * cfg.steps, "geo-fusion training steps") as bar:
        for variant in cfg.variants:
            for k in range(cfg.seeds):
                s = seed + k
                r = (previous or {}).get((variant, s))
                if r is None:
                    try:
                        r = train_eval(cfg, variant, s, train, test, bar=bar)
                    except diverge.Diverged as exc:
                        diverge.warn(exc, f"geo-fusion {variant} seed {s}")
                        r = {"variant": variant, "seed": s, **diverge.diverged_fields(exc)}
                else:
                    bar.advance(cfg.steps)
                runs.append(r)
                yield from _after_run(r, variant, s, out)
    results = list(aggregate(runs))
    yield from results

    rows = [r for r in results if r["task"] == "overall"]
    overall = {r["variant"]: r["score"] for r in rows if r["score"] is not None}
    best = verdict(rows, "score", "variant", lower=False, ci_key="score_ci", metric="variant")
    diverged = [r["variant"] for r in rows if r.get("diverged")]
    yield {"kind": "summary", "overall": overall, **best, "diverged": diverged, **info}


def _after_run(r: dict, variant: str, s: int, out) -> Iterator[dict]:
    """The predictions file and the step record of one (variant, seed) run."""
    if r.get("diverged"):
        yield {"kind": "step", **r}
        return
    if out is not None:
        atomic_write_text(
            Path(out) / f"predictions-{variant}-seed{s}.jsonl", "".join(to_json(p) + "\n" for p in r["predictions"])
        )
    yield {
        "kind": "step",
        "variant": variant,
        "seed": s,
        "overall": r["overall"],
        "train_s": r["train_s"],
        "final_loss": r["final_loss"],
        "tanh_gamma": r["tanh_gamma"],
    }
