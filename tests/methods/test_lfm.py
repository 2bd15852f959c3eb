"""Latent flow matching (train-lfm / sample-lfm): oracles for the FM loss, the samplers, the
data-reduction scorers, the metrics, the image loaders and checkpoint resume."""

import gzip
import struct

import numpy as np
import pytest
import torch

from icml26.core.errors import InputError
from icml26.methods.lfm import flow, metrics, reduce
from icml26.methods.lfm.nets import DiT, DiTArch


# ----------------------------------------------------------------------------- FM path and loss
def test_fm_path_and_loss_closed_form():
    g = torch.Generator().manual_seed(0)
    x0, x1 = torch.randn(5, 3, 2, 2, generator=g), torch.randn(5, 3, 2, 2, generator=g)
    t = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    seen = {}

    def model(xt, tt, y):
        seen["xt"], seen["t"] = xt.clone(), tt.clone()
        return torch.zeros_like(xt)

    loss = flow.fm_loss_per_sample(model, x1, t, x0)
    for i, ti in enumerate(t.tolist()):
        assert torch.allclose(seen["xt"][i], ti * x1[i] + (1 - ti) * x0[i])
    assert torch.equal(seen["t"], t)
    assert torch.allclose(seen["xt"][0], x0[0]) and torch.allclose(seen["xt"][-1], x1[-1])
    assert torch.allclose(loss, (x1 - x0).pow(2).flatten(1).mean(1))
    exact = flow.fm_loss_per_sample(lambda xt, tt, y: x1 - x0, x1, t, x0)
    assert torch.allclose(exact, torch.zeros(5))


@pytest.mark.parametrize("t", [0.2, 0.5, 0.8])
def test_fm_loss_at_gaussian_optimum_matches_closed_form(t):
    # x1 ~ N(m, s^2), x0 ~ N(0, 1): min E||v - u||^2 = Var(u | x_t) = (s^2 + 1) - Cov(u, x_t)^2 / Var(x_t)
    m, s = 1.5, 0.5
    g = torch.Generator().manual_seed(1)
    n = 400_000
    x0 = torch.randn(n, 1, generator=g, dtype=torch.float64)
    x1 = m + s * torch.randn(n, 1, generator=g, dtype=torch.float64)
    tt = torch.full((n,), t, dtype=torch.float64)
    vstar = flow.gaussian_optimal_velocity(m, s)
    loss = flow.fm_loss_per_sample(lambda xt, t_, y: vstar(xt, t_), x1, tt, x0).mean().item()
    var_xt = t * t * s * s + (1 - t) ** 2
    cov = t * s * s - (1 - t)
    closed = s * s + 1 - cov * cov / var_xt
    assert loss == pytest.approx(closed, rel=0.01)
    worse = flow.fm_loss_per_sample(lambda xt, t_, y: vstar(xt, t_) + 0.2, x1, tt, x0).mean().item()
    assert worse == pytest.approx(closed + 0.04, rel=0.01)


# ----------------------------------------------------------------------------- samplers
def _linear_field():
    A = torch.tensor([[-0.5, 2.0], [-2.0, -0.5]], dtype=torch.float64)
    x0 = torch.tensor([[1.0, 0.0], [0.3, -0.7]], dtype=torch.float64)
    exact = x0 @ torch.linalg.matrix_exp(A).T
    return (lambda x, t: x @ A.T), x0, exact


def test_samplers_converge_at_their_order_on_a_linear_field():
    v, x0, exact = _linear_field()
    err = {}
    for method in ("euler", "heun"):
        for steps in (20, 40, 80):
            x, nfe = flow.integrate(v, x0, method=method, steps=steps)
            assert nfe == (steps if method == "euler" else 2 * steps)
            err[method, steps] = (x - exact).abs().max().item()
    for s in (20, 40):
        assert 1.7 < err["euler", s] / err["euler", 2 * s] < 2.3
        assert 3.5 < err["heun", s] / err["heun", 2 * s] < 4.5
    assert err["heun", 80] < 1e-3
    x, nfe = flow.integrate(v, x0, method="adaptive", rtol=1e-7, atol=1e-9)
    assert (x - exact).abs().max().item() < 1e-6
    assert nfe > 6


def test_heun_transports_noise_to_the_gaussian_target():
    m, s = -1.0, 0.4
    x0 = torch.randn(50_000, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x, _ = flow.heun(flow.gaussian_optimal_velocity(m, s), x0, 50)
    assert x.mean().item() == pytest.approx(m, abs=0.01)
    assert x.std().item() == pytest.approx(s, abs=0.01)


def test_coarse_to_fine_routes_by_time():
    c2f = flow.CoarseToFine(lambda x, t: torch.ones_like(x), lambda x, t: 2 * torch.ones_like(x), 0.7)
    x, nfe = flow.euler(c2f, torch.zeros(3, 2), 10)
    assert nfe == 10 and c2f.nfe_coarse == 7 and c2f.nfe_fine == 3
    assert torch.allclose(x, torch.full((3, 2), 0.7 * 1 + 0.3 * 2))
    c2f = flow.CoarseToFine(lambda x, t: torch.ones_like(x), lambda x, t: 2 * torch.ones_like(x), 0.5)
    out = c2f(torch.zeros(4, 1), torch.tensor([0.1, 0.6, 0.49, 0.9]))  # mixed rows
    assert out.flatten().tolist() == [1.0, 2.0, 1.0, 2.0]


# ----------------------------------------------------------------------------- scorers
def _blobs():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(90, 2, generator=g) * 0.3
    b = torch.randn(10, 2, generator=g) * 0.3 + torch.tensor([20.0, 0.0])
    return torch.cat([a, b])


def test_balanced_counts_follow_the_official_allocation():
    assert reduce.balanced_counts([10, 2, 30], 21) == [9, 2, 10]
    assert (
        reduce.balanced_counts([5, 5, 5, 5], 10) == [3, 3, 2, 2] or sum(reduce.balanced_counts([5, 5, 5, 5], 10)) == 10
    )
    with pytest.raises(ValueError):
        reduce.balanced_counts([1, 1], 5)


def test_cluster_scorers_on_a_toy_set():
    x = _blobs()
    bal = reduce.select_cluster(x, 0.2, 0, num_clusters=2, balanced=True, spherical=False)
    pro = reduce.select_cluster(x, 0.2, 0, num_clusters=2, balanced=False, spherical=False)
    assert len(bal) == 20 and (bal >= 90).sum() == 10  # the small cluster is kept whole
    assert (pro >= 90).sum() == 2 and (pro < 90).sum() == 18
    # kept members of the big cluster are the ones nearest its centroid
    big = x[:90]
    d = (big - big.mean(0)).norm(dim=1)
    assert set(bal[bal < 90].tolist()) <= set(torch.argsort(d)[:14].tolist())
    far = reduce.select_cluster(x, 0.2, 0, num_clusters=2, balanced=True, largest=True, spherical=False)
    assert set(far[far < 90].tolist()) <= set(torch.argsort(d, descending=True)[:14].tolist())


def _official_spherical(x: np.ndarray, k: int, seed: int, iters: int = 100):
    """cluster_features.py (briqr/explo-r-it-ing_lfm_stability, 3593fed) recomputed in numpy."""
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    idx = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:k].numpy()
    c = x[idx] / np.linalg.norm(x[idx], axis=1, keepdims=True)
    for _ in range(iters):
        lab = (x @ c.T).argmax(1)
        new = c.copy()
        for j in range(k):
            if (lab == j).any():
                m = x[lab == j].mean(0)
                new[j] = m / max(np.linalg.norm(m), 1e-12)
        shift = np.linalg.norm(new - c, axis=1).mean()
        c = new
        if shift < 1e-6:
            break
    return (x @ c.T).argmax(1), c, x


def test_cluster_scorers_run_the_official_spherical_kmeans():
    g = torch.Generator().manual_seed(5)
    dirs = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    x = torch.cat([dirs[i] + 0.15 * torch.randn(40, 3, generator=g) for i in range(3)])
    x = x * (0.5 + 5 * torch.rand(120, 1, generator=g))  # feature norms vary; the official code ignores them
    lab, cen, xn = reduce.spherical_kmeans(x, 3, seed=0)
    olab, ocen, oxn = _official_spherical(x.double().numpy(), 3, 0)
    assert np.array_equal(lab, olab) and np.allclose(cen, ocen, atol=1e-5)
    assert sorted(np.bincount(lab).tolist()) == [40, 40, 40]
    kept = reduce.select_cluster(x, 0.25, 0, num_clusters=3, balanced=True)
    want = []
    for j in range(3):  # nearest the normalised centre, Euclidean on normalised features (official)
        idx = np.flatnonzero(olab == j)
        d = np.linalg.norm(oxn[idx] - ocen[j], axis=1)
        want += idx[np.argsort(d, kind="stable")[:10]].tolist()
    assert kept.tolist() == sorted(want)
    # rescaling rows changes nothing for the official form; the euclidean variant does see norms
    again = reduce.select_cluster(x * 7.0, 0.25, 0, num_clusters=3, balanced=True)
    assert np.array_equal(kept, again)


def test_kcenter_and_random_on_a_toy_set():
    pts = torch.tensor([[0.0, 0], [0.1, 0], [10, 0], [10.1, 0], [0, 10], [0.1, 10]])
    kept = reduce.kcenter_greedy(pts, 0.5, seed=0)
    assert len(kept) == 3 and sorted(set(k // 2 for k in kept.tolist())) == [0, 1, 2]  # one per blob
    r1, r2 = reduce.select_random(100, 0.25, 5), reduce.select_random(100, 0.25, 5)
    assert len(r1) == 25 and np.array_equal(r1, r2) and len(set(r1.tolist())) == 25


def test_ema_normalised_scores_by_hand():
    raw = np.array([[2.0, 4.0], [1.0, 1.0]])
    s = reduce.ema_normalised_scores(raw, alpha=0.9)
    assert s[0] == pytest.approx((2 / (1 + 1e-8) + 4 / (1 + 1e-8)) / 2)
    ema = np.array([0.9 + 0.2, 0.9 + 0.4])
    assert s[1] == pytest.approx(np.mean(1.0 / ema))
    assert reduce.select_by_score(np.array([0.1, 3.0, 2.0, 0.5]), 0.5).tolist() == [1, 2]
    assert reduce.select_by_score(np.array([0.1, 3.0, 2.0, 0.5]), 0.5, largest=False).tolist() == [0, 3]


def test_loss_and_grad_scores_match_per_sample_autograd():
    torch.manual_seed(0)
    net = DiT(DiTArch(in_channels=2, input_size=4, patch_size=2, width=16, depth=1, heads=2, num_classes=3))
    for p in net.parameters():  # move off the zero init so every parameter has a gradient
        p.data.add_(0.05 * torch.randn_like(p))
    lat = torch.randn(3, 2, 4, 4)
    lab = torch.tensor([0, 2, 1])
    raw_l = reduce.fm_raw_scores(net, lat, lab, kind="loss", num_t=2, num_noise=2, seed=7)
    raw_g = reduce.fm_raw_scores(net, lat, lab, kind="grad", num_t=2, num_noise=2, seed=7)
    bank = torch.randn((2, 2, 4, 4), generator=torch.Generator().manual_seed(7))
    ts = reduce.score_times(2)
    for i in range(3):
        for k, tk in enumerate(ts):
            ls, gs = [], []
            for m in range(2):
                net.zero_grad()
                loss = flow.fm_loss_per_sample(net, lat[i : i + 1], tk.reshape(1), bank[m : m + 1], lab[i : i + 1])[0]
                loss.backward()
                ls.append(loss.item())
                gs.append(sum((p.grad**2).sum().item() for p in net.parameters()))
            assert raw_l[i, k] == pytest.approx(np.mean(ls), rel=1e-4)
            assert raw_g[i, k] == pytest.approx(np.mean(gs), rel=1e-3)


# ----------------------------------------------------------------------------- metrics
def test_frechet_distance_and_precision_recall():
    g = np.random.default_rng(0)
    a = g.standard_normal((20000, 3))
    b = g.standard_normal((20000, 3)) * np.array([1.0, 2.0, 0.5]) + np.array([1.0, 0.0, 0.0])
    # diagonal covariances: FD = |mu|^2 + sum (sqrt(s1) - sqrt(s2))^2 = 1 + 1 + 0.25
    assert metrics.frechet_distance(a, b) == pytest.approx(2.25, abs=0.08)
    assert metrics.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    p, r = metrics.precision_recall(a[:500], a[:500])
    assert p == 1.0 and r == 1.0
    p, r = metrics.precision_recall(a[:500], a[:500] + 100.0)
    assert p == 0.0 and r == 0.0
    m, u = metrics.paired_cosine(torch.eye(4), torch.eye(4))
    assert m == pytest.approx(1.0) and u == pytest.approx(0.0)
    # shift = K pairs samples of the same class (labels i mod K) from other noise
    e = torch.eye(2).repeat(3, 1)  # rows: class 0, 1, 0, 1, 0, 1
    assert metrics.paired_cosine(e, e, shift=2)[1] == pytest.approx(1.0)
    assert metrics.paired_cosine(e, e, shift=1)[1] == pytest.approx(0.0)
    with pytest.raises(ValueError):
        metrics.paired_cosine(e, e, shift=6)


def test_bootstrap_fid_is_paired_and_its_spread_matches_resampling():
    g = np.random.default_rng(1)
    real = g.standard_normal((2000, 4))
    # the eigen-form distance equals the sqrtm one
    f = g.standard_normal((500, 4)) * 1.5 + 0.3
    s = metrics._fid_from_stats(real.mean(0), np.cov(real, rowvar=False), f.mean(0), np.cov(f, rowvar=False))
    assert s == pytest.approx(metrics.frechet_distance(real, f), rel=1e-9)
    # paired: identical fake sets give identical replicates (ratio exactly 1 in every replicate)
    boot = metrics.bootstrap_fid(real, [f, f.copy()], n_boot=30, seed=0)
    assert boot.shape == (30, 2) and np.array_equal(boot[:, 0], boot[:, 1])
    # the bootstrap sd of the FID estimates the sd across independent fake draws of the same model
    draws = [metrics.frechet_distance(real, g.standard_normal((500, 4)) * 1.5 + 0.3) for _ in range(40)]
    sd_boot = metrics.bootstrap_fid(real, [f], n_boot=200, seed=0)[:, 0].std(ddof=1)
    assert 0.5 < sd_boot / np.std(draws, ddof=1) < 2.0


# ----------------------------------------------------------------------------- images
def _write_idx(path, arr, gz=True):
    head = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


def test_image_loaders(tmp_path):
    from PIL import Image

    from icml26.core.data.images import load_images, read_idx

    x = np.random.default_rng(0).integers(0, 256, (7, 8, 8), dtype=np.uint8)
    _write_idx(tmp_path / "a-images-idx3-ubyte.gz", x)
    _write_idx(tmp_path / "a-labels-idx1-ubyte.gz", np.arange(7) % 3)
    assert np.array_equal(read_idx(tmp_path / "a-images-idx3-ubyte.gz"), x)
    ds = load_images(tmp_path / "a-images-idx3-ubyte.gz")
    dt = load_images(tmp_path / "a-images-idx3-ubyte.gz", "test")  # one image per class held out
    assert ds.images.shape == (4, 1, 8, 8) and dt.images.shape == (3, 1, 8, 8) and ds.num_classes == 3
    assert sorted(ds.labels.tolist() + dt.labels.tolist()) == sorted([0, 1, 2, 0, 1, 2, 0])
    assert sorted(dt.labels.tolist()) == [0, 1, 2] and ds.split_source.startswith("held-out")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x01\x02\x03\x04"))
    with pytest.raises(InputError):
        read_idx(tmp_path / "bad.gz")
    np.savez(
        tmp_path / "d.npz",
        x_train=x.astype(np.float32) / 255.0,
        y_train=np.arange(7),
        x_test=x[:2],
        y_test=np.arange(2),
    )
    tr, te = load_images(tmp_path / "d.npz", "train"), load_images(tmp_path / "d.npz", "test")
    assert np.abs(tr.images.astype(int) - x[:, None]).max() <= 1 and te.images.shape == (2, 1, 8, 8)
    for cls in ("cat", "dog"):
        (tmp_path / "f" / cls).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(x[i]).save(tmp_path / "f" / cls / f"{i}.png")
    fo = load_images(tmp_path / "f", size=12)
    assert fo.images.shape == (2, 1, 12, 12) and fo.labels.tolist() == [0, 1] and fo.class_names == ("cat", "dog")
    with pytest.raises(InputError):
        load_images(tmp_path / "missing")


def test_fashion_mnist_loader():
    from conftest import need_debian

    need_debian("dataset-fashion-mnist")
    from icml26.core.data.images import load_images

    te = load_images("fashion-mnist", "test")
    assert te.images.shape == (10000, 1, 28, 28) and np.bincount(te.labels).tolist() == [1000] * 10


# ----------------------------------------------------------------------------- resume
def test_fit_resume_gives_the_same_next_steps(tmp_path):
    from icml26.methods.lfm.train import Dist, fit, step_generator

    data = torch.randn(64, 2, 4, 4, generator=torch.Generator().manual_seed(0))

    def batch(step):
        g = step_generator(3, "fm", step)
        return {
            "x1": data[torch.randint(64, (8,), generator=g)],
            "t": torch.rand(8, generator=g),
            "x0": torch.randn(8, 2, 4, 4, generator=g),
            "y": None,
        }

    def loss(net, b):
        return flow.fm_loss_per_sample(net, b["x1"], b["t"], b["x0"], b["y"]).mean()

    def make():
        torch.manual_seed(0)
        return DiT(DiTArch(in_channels=2, input_size=4, width=16, depth=1, heads=2))

    def go(steps, path, resume):
        m = make()
        recs = list(
            fit(
                stage="fm",
                model=m,
                loss_fn=loss,
                batch_fn=batch,
                steps=steps,
                lr=1e-2,
                ema_decay=0.9,
                ckpt_path=path,
                resume=resume,
                log_every=1,
                checkpoint_every=2,
                dist=Dist(),
                meta={"kind": "test"},
            )
        )
        return recs, m

    full, m_full = go(5, tmp_path / "a.safetensors", False)
    first, _ = go(2, tmp_path / "b.safetensors", False)
    rest, m_res = go(5, tmp_path / "b.safetensors", True)
    assert [r["step"] for r in rest] == [3, 4, 5]
    assert [r["loss"] for r in rest] == [r["loss"] for r in full[2:]]
    for (k, a), (_, b) in zip(m_full.state_dict().items(), m_res.state_dict().items()):
        assert torch.equal(a, b), k


# ----------------------------------------------------------------------------- coarse-model training
def test_seam_states_and_restricted_times_oracle():
    from icml26.methods.lfm.train import Config, _fm_batch_fn, seam_states

    class ConstFine(torch.nn.Module):  # v(x, t, y) = 2 everywhere
        arch = DiTArch(in_channels=1, input_size=2, num_classes=0)

        def forward(self, x, t, y=None):
            return torch.full_like(x, 2.0)

    lat = torch.randn(5, 1, 2, 2)
    xs, vs = seam_states(ConstFine(), lat, None, 0.7, 60)
    assert torch.allclose(xs, lat - 0.3 * 2.0, atol=1e-6) and torch.allclose(vs, torch.full_like(lat, 2.0))
    cfg = Config(t_max=0.7, batch_size=16, label_dropout=0.5)
    fn = _fm_batch_fn(cfg, lat, torch.tensor([0, 1, 2, 0, 1]), np.array([1, 3]), seed=0, stage="fm", num_classes=3)
    b = fn(0)
    assert b["t"].min() >= 1e-4 and b["t"].max() <= 0.7
    assert set(b["y"].tolist()) <= {1, 0, 3} and (b["y"] == 3).any()  # kept labels {1, 0} + null class 3
    assert torch.equal(fn(0)["x0"], b["x0"]) and not torch.equal(fn(1)["x0"], b["x0"])  # a function of the step only


def test_mnist_loader():
    from conftest import need_mnist

    from icml26.core.data.images import load_images

    need_mnist()
    tr, te = load_images("mnist", "train"), load_images("mnist", "test")
    assert len(tr) + len(te) == 10000 and tr.images.shape[1:] == (1, 28, 28)
    assert set(np.unique(tr.labels).tolist()) == set(range(10)) and tr.images.max() == 255


# ----------------------------------------------------------------------------- golden values
def test_golden_values():
    """tests/golden/lfm.json; regenerate: ICML26_REGEN_GOLDEN=1 pytest tests/methods/test_lfm.py -k golden"""
    import json
    import os
    from pathlib import Path

    from icml26.methods.lfm.train import Dist, fit, step_generator

    torch.manual_seed(0)
    net = DiT(DiTArch(in_channels=2, input_size=4, width=16, depth=1, heads=2, num_classes=3))
    data = torch.randn(32, 2, 4, 4, generator=torch.Generator().manual_seed(1))
    lab = torch.arange(32) % 3

    def batch(step):
        g = step_generator(0, "fm", step)
        j = torch.randint(32, (8,), generator=g)
        return {"x1": data[j], "t": torch.rand(8, generator=g), "x0": torch.randn(8, 2, 4, 4, generator=g), "y": lab[j]}

    recs = list(
        fit(
            stage="fm",
            model=net,
            loss_fn=lambda m, b: flow.fm_loss_per_sample(m, b["x1"], b["t"], b["x0"], b["y"]).mean(),
            batch_fn=batch,
            steps=4,
            lr=1e-2,
            ema_decay=0.99,
            ckpt_path=None,
            resume=False,
            log_every=1,
            checkpoint_every=100,
            dist=Dist(),
            meta={},
        )
    )
    pts = torch.randn(40, 3, generator=torch.Generator().manual_seed(2))
    got = {
        "fit_losses": [r["loss"] for r in recs],
        "kcenter_25": reduce.kcenter_greedy(pts, 0.25, seed=0).tolist(),
        "balanced_counts": reduce.balanced_counts([3, 50, 7, 40], 40),
    }
    path = Path(__file__).resolve().parents[1] / "golden" / "lfm.json"
    if os.environ.get("ICML26_REGEN_GOLDEN"):
        path.write_text(
            json.dumps(
                {"_regenerate": "ICML26_REGEN_GOLDEN=1 pytest tests/methods/test_lfm.py -k golden", **got}, indent=1
            )
        )
    want = json.loads(path.read_text())
    assert got["fit_losses"] == pytest.approx(want["fit_losses"], rel=1e-4)
    assert got["kcenter_25"] == want["kcenter_25"] and got["balanced_counts"] == want["balanced_counts"]
