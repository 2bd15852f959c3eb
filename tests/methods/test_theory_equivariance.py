"""equivariance: group actions, the latent-action fit, signed-permutation projection, training."""

import numpy as np
import pytest
import torch

from icml26.core.errors import InputError
from icml26.methods.theory import equivariance as eq


def test_image_actions_are_the_flips_and_rotations():
    x = torch.arange(16.0).reshape(1, 16)
    img = x.reshape(4, 4)
    assert torch.equal(eq.image_action("hflip", 4)(x).reshape(4, 4), img.flip(1))
    assert torch.equal(eq.image_action("vflip", 4)(x).reshape(4, 4), img.flip(0))
    assert torch.equal(eq.image_action("rot90", 4)(x).reshape(4, 4), torch.rot90(img))
    assert eq.image_action("hflip", 4).involution and not eq.image_action("rot90", 4).involution
    with pytest.raises(InputError):
        eq.parse_group("hflip", 10)
    with pytest.raises(InputError):
        eq.parse_group("shear", 16)


def test_perm_group_from_file(tmp_path):
    p = np.random.default_rng(0).permutation(12)
    np.save(tmp_path / "p.npy", p)
    a = eq.parse_group(f"perm:{tmp_path / 'p.npy'}", 12)
    x = torch.arange(12.0)
    assert torch.equal(a(x), x[torch.as_tensor(p)])
    (tmp_path / "bad.txt").write_text("0 1 1 3")
    with pytest.raises(InputError, match="permutation"):
        eq.parse_group(f"perm:{tmp_path / 'bad.txt'}", 4)


def test_nearest_signed_permutation():
    rng = np.random.default_rng(1)
    perm = rng.permutation(6)
    sgn = rng.choice([-1.0, 1.0], 6)
    p = np.zeros((6, 6))
    p[np.arange(6), perm] = sgn
    noisy = p + 0.05 * rng.standard_normal((6, 6))
    assert np.array_equal(eq.nearest_signed_permutation(noisy), p)


@pytest.mark.parametrize("task,act", [("classifier", "tanh"), ("autoencoder", "gelu")])
def test_tied_net_is_found_exactly_layerwise_equivariant(task, act):
    a = eq.image_action("hflip", 8)
    net = eq.build_net(task, act, 64, (16, 32, 32), "tied", a, 0)
    rows = eq.layer_equivariance(net, a, 1200, 0, out_rho="same" if task == "autoencoder" else "trivial")
    for r in rows:
        assert r["rel_equivariance_error"] < 1e-6 and r["perm_equivariance_error"] < 1e-6
        assert r["perm_projection_error"] < 1e-6  # A_i is the half-swap permutation
    assert rows[0]["end_to_end_error"] < 1e-9
    # the found action on f_1 is the swap of the two halves
    net2 = net.double()
    y = torch.randn(5, 64, dtype=torch.float64)
    f, _ = net2.features(y)
    fg, _ = net2.features(a(y))
    assert torch.allclose(fg[0], torch.cat([f[0][:, 8:], f[0][:, :8]], 1), atol=1e-12)


def test_lstsq_fit_recovers_a_planted_linear_action():
    # one hidden layer, identity activation is not offered: plant f_1(g y) = A f_1(y) with
    # a linear first layer composed with tanh of a permutation-structured weight
    a = eq.image_action("hflip", 6)
    net = eq.LayerMLP([36, 10, 3], ["tanh"])
    with torch.no_grad():
        w = torch.randn(5, 36)
        wm = w[:, torch.as_tensor(np.argsort(a.perm))]
        net.layers[0].weight.copy_(torch.cat([w, -wm]))  # f(gy) = signed swap of f(y) (tanh is odd)
        net.layers[0].bias.zero_()
    r = eq.layer_equivariance(net, a, 1000, 0)[0]
    assert r["rel_equivariance_error"] < 1e-6 and r["perm_projection_error"] < 1e-6
    rand = eq.layer_equivariance(eq.LayerMLP([36, 10, 3], ["tanh"]), a, 1000, 0)[0]
    assert rand["rel_equivariance_error"] > 0.3 and rand["perm_projection_error"] > 0.5


def test_measurement_is_deterministic_per_seed():
    a = eq.image_action("vflip", 8)
    net = eq.build_net("classifier", "gelu", 64, (8, 16), "random-init", a, 3)
    r1 = eq.layer_equivariance(net, a, 400, 5)
    r2 = eq.layer_equivariance(net, a, 400, 5)
    r3 = eq.layer_equivariance(net, a, 400, 6)
    assert r1 == r2 and r1 != r3


def _small_run():
    cfg = eq.Config(
        task=("classifier",),
        act=("tanh",),
        group=("hflip",),
        models=("equivariant-loss", "no-flip-loss"),
        seeds=1,
        widths=(16, 32, 32),
        epochs=4,
        equiv_weight=10.0,
        train_examples=2000,
        batch_size=64,
        n_noise=600,
    )
    return list(eq.run(cfg, seed=0))


@pytest.mark.slow
def test_run_is_deterministic():
    from tests.conftest import need_debian

    need_debian("dataset-fashion-mnist")
    a, b = _small_run(), _small_run()
    assert [r.get("rel_equivariance_error") for r in a] == [r.get("rel_equivariance_error") for r in b]


def test_the_flip_loss_lowers_the_end_to_end_error_on_fashion_mnist():
    from tests.conftest import need_debian

    need_debian("dataset-fashion-mnist")
    recs = _small_run()
    res = {(r["model"], r["layer"]): r for r in recs if r["kind"] == "result"}
    assert res[("equivariant-loss", 1)]["end_to_end_error"] < 0.6 * res[("no-flip-loss", 1)]["end_to_end_error"]
    assert res[("no-flip-loss", 1)]["test_accuracy"] > 0.55  # 10 classes: chance is 0.1
    assert res[("equivariant-loss", 1)]["test_accuracy"] > 0.2
    assert recs[-1]["kind"] == "summary"
