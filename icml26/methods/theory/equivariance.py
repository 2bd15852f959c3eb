"""``equivariance``: is an end-to-end equivariant network layerwise equivariant?

Shahverdi, Marchetti, Bökman & Kohn, "Identifiable Equivariant Networks are Layerwise
Equivariant", ICML 2026, arXiv 2601.21645 (Thm 4.1; the measurement and table of the
experiments section as restated in third-party paper notes; docs/theory.md).

Measurement, per layer i (f_i = the representation after hidden layer i; RECON):
  1. N noise inputs y ~ N(0, 1) per coordinate in the network's input space (paper: 100k);
  2. H = f_i(y), H_g = f_i(g y);
  3. the latent action A_i = argmin ||H_g - H A_i^T||_F (least squares, no bias; fitted on one
     half of the inputs in float64, scored on the other half: RECON split);
  4. rel_equivariance_error = median ||f_i(g y) - A_i f_i(y)|| / ||f_i(y)|| (the paper's metric);
  5. perm_projection_error = ||A_i - P||_F / ||A_i||_F with P the nearest signed permutation
     (Hungarian matching; RECON extension) and perm_equivariance_error, step 4 with P;
  6. end_to_end_error = median ||f(g y) - rho_out(g) f(y)|| / ||f(y)||.
Training (RECON, the paper's schedule is not public): depth-4 MLP 784 -> 64 -> 256 -> 256 ->
{784 | 10}; Adam; flip augmentation and the soft equivariance loss in the later half of
training. Controls: ``no-flip-loss``, ``random-init`` and ``tied`` (layerwise equivariant by
construction, the zero-error control). Details: docs/theory.md, "Specification"."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch.nn import functional as F

from icml26.core import diverge
from icml26.core.data.images import load_images
from icml26.core.errors import InputError
from icml26.core.limits import check_work as _check
from icml26.core.output import atomic_path
from icml26.core.progress import progress
from icml26.methods.theory.equivariance_config import ACTS, GROUPS, MODELS, TASKS, Config  # noqa: F401
from icml26.methods.theory.equivariance_nets import (  # noqa: F401  (re-exported)
    Action,
    LayerMLP,
    TiedMLP,
    _act,
    build_net,
    image_action,
    parse_group,
    perm_action,
)
from icml26.methods.theory.spectrum import load_user_mlp

# the paper's table (median relative equivariance error, 100k noise inputs; CIFAR-10)
PAPER = {
    ("autoencoder", 1, "hflip"): {"tanh": 0.029, "gelu": 0.40},
    ("autoencoder", 2, "hflip"): {"tanh": 0.022, "gelu": 0.11},
    ("autoencoder", 1, "vflip"): {"tanh": 0.15, "gelu": 0.49},
    ("classifier", 1, "hflip"): {"tanh": 0.077, "gelu": 0.19},
    ("classifier", 2, "hflip"): {"tanh": 0.054, "gelu": 0.064},
    ("classifier", 1, "vflip"): {"tanh": 0.48, "gelu": 0.56},
}


# ----------------------------------------------------------------------------- training


def load_data(cfg: Config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, float]:
    """(x_train, y_train, x_test, y_test, mean, std): flat standardised float32 images."""
    tr, te = load_images(cfg.data, "train"), load_images(cfg.data, "test")
    if tr.labels is None and "classifier" in cfg.task:
        raise InputError(f"data {cfg.data!r}: the classifier task needs class labels")
    x = (
        torch.from_numpy(tr.images[: cfg.train_examples])
        .float()
        .div_(255)
        .reshape(min(len(tr), cfg.train_examples), -1)
    )
    xt = torch.from_numpy(te.images[:2000]).float().div_(255).reshape(min(len(te), 2000), -1)
    mu, sd = float(x.mean()), float(x.std().clamp_min(1e-6))
    y = (
        torch.from_numpy(tr.labels[: x.shape[0]])
        if tr.labels is not None
        else torch.zeros(x.shape[0], dtype=torch.long)
    )
    yt = (
        torch.from_numpy(te.labels[: xt.shape[0]])
        if te.labels is not None
        else torch.zeros(xt.shape[0], dtype=torch.long)
    )
    return (x - mu) / sd, y, (xt - mu) / sd, yt, mu, sd


def _task_loss(task: str, out: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y) if task == "classifier" else F.mse_loss(out, x)


def _rho(task: str, action: Action, out: torch.Tensor) -> torch.Tensor:
    return action(out) if task == "autoencoder" else out


def train_net(
    net: LayerMLP,
    cfg: Config,
    task: str,
    action: Action,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    soft_loss: bool,
    seed: int,
    bar=None,
) -> dict:
    """Adam on (x, y) for cfg.epochs; with ``soft_loss``: flip augmentation throughout and
    lambda ||f(M x) - rho(M) f(x)||^2 from epoch equiv_start * epochs on (RECON schedule).
    ``bar``: a core.progress bar advanced per epoch. A non-finite loss raises ``diverge.Diverged``."""
    g = torch.Generator().manual_seed(seed + 99)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    n = x.shape[0]
    start = int(round(cfg.equiv_start * cfg.epochs))
    last = {}
    step = 0
    for ep in range(cfg.epochs):
        perm = torch.randperm(n, generator=g)
        tot, cnt = 0.0, 0
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            xb, yb = x[idx], y[idx]
            if soft_loss:  # flip augmentation: half of each batch mirrored
                flip = torch.rand(xb.shape[0], generator=g) < 0.5
                xb = torch.where(flip[:, None], action(xb), xb)
            out = net(xb)
            loss = _task_loss(task, out, xb, yb)
            if soft_loss and ep >= start and cfg.equiv_weight > 0:
                xe, oe = xb, out
                if cfg.equiv_on_noise:  # the measurement probes noise inputs: ask for equivariance there too
                    xn = torch.randn(xb.shape, generator=g)
                    xe, oe = torch.cat([xb, xn]), torch.cat([out, net(xn)])
                diff = net(action(xe)) - _rho(task, action, oe)
                loss = loss + cfg.equiv_weight * (
                    diff.pow(2).sum(1).mean() if task == "classifier" else diff.pow(2).mean()
                )
            step += 1
            diverge.check(step, loss=float(loss.detach()))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * xb.shape[0]
            cnt += xb.shape[0]
        last = {"epoch": ep + 1, "loss": tot / cnt}
        if bar is not None:
            bar.advance(1, loss=last["loss"])
    return last


@torch.no_grad()
def task_quality(net: LayerMLP, task: str, xt: torch.Tensor, yt: torch.Tensor) -> dict:
    out = net(xt)
    if task == "classifier":
        return {"test_accuracy": float((out.argmax(1) == yt).float().mean()), "test_mse": None}
    return {"test_accuracy": None, "test_mse": float(F.mse_loss(out, xt))}


# ----------------------------------------------------------------------------- measurement
def nearest_signed_permutation(a: np.ndarray) -> np.ndarray:
    """The signed permutation matrix P maximising sum |A_ij| P_ij (Hungarian matching,
    scipy.optimize.linear_sum_assignment) with the signs of the matched entries. a: (d, d)."""
    from scipy.optimize import linear_sum_assignment

    r, c = linear_sum_assignment(-np.abs(a))
    p = np.zeros_like(a)
    p[r, c] = np.sign(a[r, c])
    p[r, c] = np.where(p[r, c] == 0, 1.0, p[r, c])
    return p


@torch.no_grad()
def layer_equivariance(
    net: LayerMLP, action: Action, n_noise: int, seed: int, *, out_rho: str = "trivial", chunk: int = 5000
) -> list[dict]:
    """Steps 1-6 for every hidden layer; returns one dict per layer (1-based ``layer``) with
    rel_equivariance_error, perm_projection_error, perm_equivariance_error, end_to_end_error,
    fit_dim. float64 throughout; the normal equations of the fit accumulate over chunks."""
    net = net.double()
    d_in = net.in_dim
    if int(action.perm.shape[0]) != d_in:
        raise InputError(f"group {action.name}: acts on {action.perm.shape[0]} values, the network takes {d_in}")
    g = torch.Generator().manual_seed(seed + 12345)
    n_fit = n_noise // 2
    sizes = None
    gram = cross = None
    chunks = []
    for start in range(0, n_noise, chunk):
        m = min(chunk, n_noise - start)
        chunks.append((start, m, int(torch.randint(0, 2**62, (1,), generator=g))))
    # pass 1: fit on the first half (normal equations)
    for start, m, s in chunks:
        if start >= n_fit:
            break
        m = min(m, n_fit - start)
        y = torch.randn(m, d_in, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        hs, _ = net.features(y)
        hg, _ = net.features(action(y))
        if gram is None:
            sizes = [h.shape[1] for h in hs]
            gram = [torch.zeros(d, d, dtype=torch.float64) for d in sizes]
            cross = [torch.zeros(d, d, dtype=torch.float64) for d in sizes]
        for i, (h, hgi) in enumerate(zip(hs, hg)):
            gram[i] += h.T @ h
            cross[i] += h.T @ hgi
    a_mats, p_mats = [], []
    for i in range(len(sizes)):
        reg = 1e-12 * float(torch.diagonal(gram[i]).mean()) * torch.eye(sizes[i], dtype=torch.float64)
        at = torch.linalg.solve(gram[i] + reg, cross[i])  # H A^T ~ H_g  ->  A^T = (H^T H)^-1 H^T H_g
        a = at.T.contiguous()
        a_mats.append(a)
        p_mats.append(torch.from_numpy(nearest_signed_permutation(a.numpy())))
    # pass 2: score on the second half
    errs = [[] for _ in sizes]
    perrs = [[] for _ in sizes]
    e2e = []
    for start, m, s in chunks:
        if start + m <= n_fit:
            continue
        y = torch.randn(m, d_in, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        if start < n_fit:
            y = y[n_fit - start :]
        hs, out = net.features(y)
        hg, outg = net.features(action(y))
        for i in range(len(sizes)):
            nrm = torch.linalg.vector_norm(hs[i], dim=1).clamp_min(1e-300)
            errs[i].append(torch.linalg.vector_norm(hg[i] - hs[i] @ a_mats[i].T, dim=1) / nrm)
            perrs[i].append(torch.linalg.vector_norm(hg[i] - hs[i] @ p_mats[i].T, dim=1) / nrm)
        ref = action(out) if out_rho == "same" else out
        e2e.append(torch.linalg.vector_norm(outg - ref, dim=1) / torch.linalg.vector_norm(out, dim=1).clamp_min(1e-300))
    e2e_med = float(torch.cat(e2e).median())
    rows = []
    for i in range(len(sizes)):
        a, p = a_mats[i], p_mats[i]
        rows.append(
            {
                "layer": i + 1,
                "rel_equivariance_error": float(torch.cat(errs[i]).median()),
                "perm_projection_error": float(
                    torch.linalg.matrix_norm(a - p) / torch.linalg.matrix_norm(a).clamp_min(1e-300)
                ),
                "perm_equivariance_error": float(torch.cat(perrs[i]).median()),
                "end_to_end_error": e2e_med,
                "fit_dim": sizes[i],
            }
        )
    net.float()
    return rows


# ----------------------------------------------------------------------------- user network
def load_user_net(cfg: Config) -> tuple[LayerMLP, int]:
    """The user's network: linear layers from ``cfg.model`` (natural name order, as
    jacobian-spectrum reads MLPs) with ``cfg.layer_acts`` after each hidden one. InputError
    for a bad file or a spec that does not fit."""
    ws, bs = load_user_mlp(cfg.model)
    if len(ws) < 2:
        raise InputError(f"{cfg.model!r}: need at least two linear layers (one hidden representation)")
    if len(cfg.layer_acts) != len(ws) - 1:
        raise InputError(
            f"layer_acts: {cfg.model!r} has {len(ws)} linear layers, so give {len(ws) - 1} activations (e.g. --set "
            f"layer_acts=tanh,gelu), got {len(cfg.layer_acts)}"
        )
    dims = [ws[0].shape[1]] + [w.shape[0] for w in ws]
    if cfg.out_action == "same" and dims[-1] != dims[0]:
        raise InputError(f"out_action same: the output ({dims[-1]}) must live in the input space ({dims[0]})")
    net = LayerMLP(dims, list(cfg.layer_acts))
    with torch.no_grad():
        for lin, w, b in zip(net.layers, ws, bs):
            lin.weight.copy_(w.float())
            lin.bias.copy_(b.float() if b is not None else torch.zeros(w.shape[0]))
    return net, dims[0]


def check_data(cfg: Config) -> None:
    """Before the config record: the data set loads, its images fit every group, and the tied
    control has an involution to tie to (InputError otherwise)."""
    s = load_images(cfg.data, "test")
    dim = int(np.prod(s.images.shape[1:]))
    if s.labels is None and "classifier" in cfg.task:
        raise InputError(f"data {cfg.data!r}: the classifier task needs class labels")
    for g in (*cfg.group, cfg.train_group):
        parse_group(g, dim)
    if "tied" in cfg.models and not parse_group(cfg.train_group, dim).involution:
        raise InputError(f"models: the tied control needs an involution as train_group, {cfg.train_group!r} is not one")
    if "tied" in cfg.models and any(w % 2 for w in cfg.widths):
        raise InputError(f"models: the tied control needs even widths, got {list(cfg.widths)}")


def check_work(cfg: Config) -> None:
    """Refuse (InputError) a run estimated at hours of CPU (training and noise passes, flops)."""
    dims = [784, *cfg.widths, 784]
    per_ex = 2.0 * sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    nets = len(cfg.task) * len(cfg.act) * len(cfg.models) * cfg.seeds if cfg.model is None else 1
    flops = nets * (3 * per_ex * 2 * cfg.train_examples * cfg.epochs + len(cfg.group) * 2 * per_ex * cfg.n_noise * 2)
    _check(flops, 3e13, "spend", "flops", "--seeds, n_noise, epochs, train_examples or the lists of tasks/acts/models")


# ----------------------------------------------------------------------------- run
def _paper(task: str, layer: int, group: str, act: str):
    return PAPER.get((task, layer, group), {}).get(act)


def run(cfg: Config, *, seed: int = 0, device: str = "cpu", user_net=None) -> Iterator[dict]:
    """One ``result`` per (model, task, act, group, layer), the per-layer metrics averaged over
    seeds (per-seed values in ``*_seeds``), then the ``summary``."""
    t_all = time.time()
    results: list[dict] = []
    if cfg.model is not None:
        net, dim = user_net if user_net is not None else load_user_net(cfg)
        for gname in cfg.group:
            action = parse_group(gname, dim)
            for row in layer_equivariance(net, action, cfg.n_noise, seed, out_rho=cfg.out_action):
                rec = {
                    "kind": "result",
                    "model": "user",
                    "task": "user",
                    "act": ",".join(cfg.layer_acts),
                    "group": gname,
                    **row,
                    "paper_value": None,
                    "seeds": 1,
                }
                results.append(rec)
                yield rec
        yield summarize(cfg, results, time.time() - t_all)
        return
    x, y, xt, yt, _, _ = load_data(cfg)
    dim = x.shape[1]
    train_action = parse_group(cfg.train_group, dim)
    actions = {g: parse_group(g, dim) for g in cfg.group}
    trained = sum(m != "random-init" for m in cfg.models) * len(cfg.task) * len(cfg.act) * cfg.seeds
    with progress(trained * cfg.epochs, "equivariance training epochs") as bar:
        yield from _trained_results(cfg, seed, x, y, xt, yt, dim, train_action, actions, results, bar)
    yield summarize(cfg, results, time.time() - t_all)


def _trained_results(cfg, seed, x, y, xt, yt, dim, train_action, actions, results, bar) -> Iterator[dict]:
    """Train and measure every (task, act, model) over the seeds; a seed whose loss goes
    non-finite stops that model: one result says so (``diverged``), without figures."""
    for task in cfg.task:
        for act in cfg.act:
            for model in cfg.models:
                per_seed: dict[tuple[str, int], list[dict]] = {}
                quality = []
                diverged = None
                for s in range(cfg.seeds):
                    sd = seed * 1000 + s
                    net = build_net(task, act, dim, cfg.widths, model, train_action, sd)
                    if model != "random-init":
                        try:
                            train_net(
                                net,
                                cfg,
                                task,
                                train_action,
                                x,
                                y,
                                soft_loss=model == "equivariant-loss",
                                seed=sd,
                                bar=bar,
                            )
                        except diverge.Diverged as exc:
                            diverge.warn(exc, f"equivariance {model}/{task}/{act} seed {sd}")
                            diverged = exc
                            break
                    quality.append(task_quality(net, task, xt, yt))
                    for gname, action in actions.items():
                        for row in layer_equivariance(
                            net, action, cfg.n_noise, sd, out_rho="same" if task == "autoencoder" else "trivial"
                        ):
                            per_seed.setdefault((gname, row["layer"]), []).append(row)
                if diverged is not None:
                    rec = {"kind": "result", "model": model, "task": task, "act": act, "seeds": cfg.seeds}
                    rec.update(diverge.diverged_fields(diverged))
                    results.append(rec)
                    yield rec
                    continue
                for (gname, layer), rows in per_seed.items():
                    rec = {"kind": "result", "model": model, "task": task, "act": act, "group": gname, "layer": layer}
                    for key in (
                        "rel_equivariance_error",
                        "perm_projection_error",
                        "perm_equivariance_error",
                        "end_to_end_error",
                    ):
                        vals = [r[key] for r in rows]
                        rec[key] = float(np.mean(vals))
                        rec[f"{key}_seeds"] = vals
                    rec["fit_dim"] = rows[0]["fit_dim"]
                    rec["paper_value"] = (
                        _paper(task, layer, gname, act)
                        if model == "equivariant-loss" and gname in ("hflip", "vflip") and cfg.train_group == "hflip"
                        else None
                    )
                    rec["seeds"] = len(rows)
                    acc = [q["test_accuracy"] for q in quality if q["test_accuracy"] is not None]
                    mse = [q["test_mse"] for q in quality if q["test_mse"] is not None]
                    rec["test_accuracy"] = float(np.mean(acc)) if acc else None
                    rec["test_mse"] = float(np.mean(mse)) if mse else None
                    rec["diverged"] = False
                    results.append(rec)
                    yield rec


def summarize(cfg: Config, results: list[dict], seconds: float) -> dict:
    """The paper's orderings on our equivariant-loss nets, per task: Tanh below GELU at f1
    (trained group), trained group below the reference group at f1 (per activation), and the
    tied control's largest layer error."""
    get = lambda **kw: [r for r in results if all(r.get(k) == v for k, v in kw.items())]
    out = {"kind": "summary", "n_results": len(results)}
    tg = cfg.train_group
    ref = next((g for g in cfg.group if g != tg), None)
    orders = {}
    for task in cfg.task:
        t = get(model="equivariant-loss", task=task, group=tg, layer=1, act="tanh")
        gl = get(model="equivariant-loss", task=task, group=tg, layer=1, act="gelu")
        if t and gl:
            orders[f"{task}_tanh_below_gelu_f1"] = t[0]["rel_equivariance_error"] < gl[0]["rel_equivariance_error"]
        if ref is not None:
            for act in cfg.act:
                a = get(model="equivariant-loss", task=task, group=tg, layer=1, act=act)
                b = get(model="equivariant-loss", task=task, group=ref, layer=1, act=act)
                if a and b:
                    orders[f"{task}_{act}_{tg}_below_{ref}_f1"] = (
                        a[0]["rel_equivariance_error"] < b[0]["rel_equivariance_error"]
                    )
    out.update(orders)
    out["orderings_hold"] = all(orders.values()) if orders else None
    tied = [r["rel_equivariance_error"] for r in results if r.get("model") == "tied" and r.get("group") == tg]
    out["tied_max_error"] = max(tied) if tied else None
    out["diverged"] = [f"{r['model']}/{r['task']}/{r['act']}" for r in results if r.get("diverged")]
    out["seconds"] = round(seconds, 2)
    return out


COLUMNS = (
    "model",
    "task",
    "act",
    "group",
    "layer",
    "rel_equivariance_error",
    "perm_projection_error",
    "perm_equivariance_error",
    "end_to_end_error",
    "paper_value",
)


def plot(records: list[dict], out_dir: Path) -> None:
    """``equivariance_per_layer.png``: median relative error per layer, one panel per (task,
    group), a line per (model, act)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = [r for r in records if r.get("kind") == "result" and not r.get("diverged")]  # a diverged run has no layers
    keys = sorted({(r["task"], r["group"]) for r in res})
    if not keys:
        return
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 3.8), squeeze=False, constrained_layout=True)
    for ax, (task, grp) in zip(axes[0], keys):
        lines = sorted({(r["model"], r["act"]) for r in res if r["task"] == task and r["group"] == grp})
        for j, (model, act) in enumerate(lines):
            rows = sorted(
                (r for r in res if (r["task"], r["group"], r["model"], r["act"]) == (task, grp, model, act)),
                key=lambda r: r["layer"],
            )
            ax.plot(
                [r["layer"] for r in rows],
                [max(r["rel_equivariance_error"], 1e-8) for r in rows],
                "o-" if act == "tanh" else "s--",
                label=f"{model} {act}",
                color=f"C{MODELS.index(model) if model in MODELS else 4}",
            )
            pv = [(r["layer"], r["paper_value"]) for r in rows if r.get("paper_value") is not None]
            if pv:
                ax.plot(*zip(*pv), "x", color="k", ms=8)
        ax.set_yscale("log")
        ax.set_xlabel("layer i (f_i)")
        ax.set_ylabel("median ||f(gy) - A f(y)|| / ||f(y)||")
        ax.set_title(f"{task}, {grp} (x: paper, CIFAR-10)", fontsize=9)
        ax.legend(fontsize=6)
    with atomic_path(out_dir / "equivariance_per_layer.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
