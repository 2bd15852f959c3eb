"""icr: U-Net feature hooks, schedules, memorization measure and the monitor's rules
(shared/methods/icr.md)."""

import json

import numpy as np
import pytest
import torch

from icml26.core.errors import InputError
from icml26.methods.diffusion import estimator as E
from icml26.methods.diffusion import features as F
from icml26.methods.diffusion import train as T
from icml26.methods.diffusion import unet as U


def _hooks(m):
    return sum(len(x._forward_hooks) for x in m.modules())


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return U.build_unet("tiny", image_size=16).eval()


def test_hooks_are_removed_after_use_and_after_an_error(net):
    x = torch.rand(6, 1, 16, 16) * 2 - 1
    h = F.view_features(net, x, U.Schedule("edm"), 0.29, views=3, layer="mid_block", seed=0, batch_size=4)
    assert h.shape == (6, 3, 32)  # mid block of (16, 32, 32): d = 32 channels, mean over space
    assert _hooks(net) == 0
    with pytest.raises(RuntimeError):
        with F.capture(net, "down_blocks.1"):
            assert _hooks(net) == 1
            raise RuntimeError("boom")
    assert _hooks(net) == 0


def test_hook_output_is_the_mean_pooled_block_output(net):
    x = torch.rand(3, 1, 16, 16) * 2 - 1
    got = {}
    handle = net.up_blocks[0].register_forward_hook(lambda m, i, o: got.setdefault("o", o))
    with F.capture(net, "up_blocks.0") as feats:
        net(x, torch.zeros(3))
    handle.remove()
    torch.testing.assert_close(feats[0], got["o"].mean(dim=(2, 3)))


def test_same_seed_same_features_and_views_differ(net):
    x = torch.rand(5, 1, 16, 16) * 2 - 1
    a = F.view_features(net, x, U.Schedule("edm"), 0.5, views=2, layer="mid_block", seed=3)
    b = F.view_features(net, x, U.Schedule("edm"), 0.5, views=2, layer="mid_block", seed=3)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (a[:, 0] - a[:, 1]).abs().max() > 1e-4


def test_bad_layer_names_the_choices(net):
    with pytest.raises(InputError, match="mid_block"):
        F.resolve_layer(net, "no_such_block")


def test_schedules_and_levels():
    e = U.Schedule("edm")
    assert e.alpha_bar(1.0) == pytest.approx(0.5)
    with pytest.raises(InputError):
        e.check_level(-0.1)
    with pytest.raises(InputError):
        e.check_level(float("nan"))
    d = U.Schedule("ddpm", alphas_cumprod=U._ddpm_alphas(U.Path("/nonexistent")))
    assert d.num_timesteps == 1000 and d.noise_param == "t"
    for bad in (1000, -1, 2.5):
        with pytest.raises(InputError):
            d.check_level(bad)
    x0 = torch.zeros(2, 1, 4, 4)
    eps = torch.ones(2, 1, 4, 4)
    xt, t = d.perturb(x0, 500, eps)
    torch.testing.assert_close(xt, torch.full_like(xt, float(np.sqrt(1 - d.alpha_bar(500)))))
    assert t.dtype == torch.long and int(t[0]) == 500
    xi, c = e.perturb(x0, 0.3, eps)
    torch.testing.assert_close(xi, torch.full_like(xi, 0.3 / np.sqrt(0.09 + 0.25)))


def test_edm_preconditioning_with_a_zero_network():
    class Zero(torch.nn.Module):
        def forward(self, x, t):
            return type("O", (), {"sample": torch.zeros_like(x)})()

    x = torch.randn(3, 1, 4, 4)
    s = torch.tensor([0.1, 1.0, 10.0])
    d = U.edm_denoise(Zero(), x, s)
    torch.testing.assert_close(d, x * (0.25 / (s**2 + 0.25)).view(-1, 1, 1, 1))


def test_memorization_measure():
    g = torch.Generator().manual_seed(0)
    train = torch.rand(50, 1, 8, 8, generator=g) * 2 - 1
    copies = train[:10] + 0.001 * torch.randn(10, 1, 8, 8, generator=g)
    frac, ratio = T.memorization(copies, train)
    assert frac == 1.0 and (ratio < 0.05).all()
    fresh = torch.rand(20, 1, 8, 8, generator=g) * 2 - 1
    frac, ratio = T.memorization(fresh, train)
    assert frac == 0.0
    d = torch.cdist(fresh.flatten(1).double(), train.flatten(1).double()).sort(1).values
    np.testing.assert_allclose(ratio, (d[:, 0] / d[:, 1]).numpy(), rtol=1e-12)


def test_monitor_rules():
    steps = [100, 200, 300, 400, 500, 600]
    icr = [0.60, 0.50, 0.30, 0.45, 0.44, 0.52]  # a single low point at 300
    assert T.smoothed([1.0, 2.0, 3.0], 3) == [1.5, 2.0, 2.5]
    assert T.icr_min_step(steps, icr, 1) == 300
    assert T.icr_min_step(steps, icr, 3) == 400  # smoothed: [.55, .467, .417, .397, .47, .48]
    assert T.onset_step(steps, [0, 0, 0.05, 0.06, 0.5, 0.9], 0.05) == 400  # strictly above the threshold
    assert T.onset_step(steps, [0] * 6, 0.05) is None


def test_icr_of_real_pixels_rises_with_noise():
    """Real Fashion-MNIST images, 7x7 average-pooled pixels as features (d = 49), two augmented
    views: more noise = more residual = higher ICR, and heavy noise drives ICR towards 1."""
    from icml26.core.data.images import load_images

    ds = load_images("fashion-mnist", "train")
    x = F.prepare_images(ds.images[:800], 28, 1)
    g = torch.Generator().manual_seed(0)
    vals = []
    for sigma in (0.0, 0.5, 3.0):
        views = []
        for _ in range(2):
            a = F.augment(x, g) + sigma * torch.randn(x.shape, generator=g)
            views.append(torch.nn.functional.avg_pool2d(a, 4).flatten(1))
        vals.append(E.icr(torch.stack(views, 1)).icr)
    assert vals[0] < vals[1] < vals[2]
    assert vals[0] < 0.4 and vals[2] > 0.6, vals


def _save_foreign(tmp_path, cls="UNet2DModel"):
    """A diffusers folder with no icml26 metadata: read as a DDPM model."""
    m = U.build_unet("tiny", image_size=16)
    d = tmp_path / "foreign"
    m.save_pretrained(str(d), safe_serialization=True)
    if cls != "UNet2DModel":
        c = json.loads((d / "config.json").read_text())
        c["_class_name"] = cls
        (d / "config.json").write_text(json.dumps(c))
    return d


def test_model_folder_checks(tmp_path):
    d = _save_foreign(tmp_path)
    udir, conf, sched, meta = U.check_model_dir(d)
    assert sched.kind == "ddpm" and conf["in_channels"] == 1 and meta == {}
    for bad, msg in [
        (tmp_path / "missing", "does not exist"),
        (d / "config.json", "is a file"),
        (tmp_path, "no config.json"),
    ]:
        with pytest.raises(InputError, match=msg):
            U.check_model_dir(bad)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    with pytest.raises(InputError, match="not a UNet2DModel"):
        U.check_model_dir(other)
    (other / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel"}))
    (other / "diffusion_pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="pickled"):
        U.check_model_dir(other)
