"""StochasticPairing: labels kept, uniform within class (chi-square), fixed = identity, N-modality collate,
determinism per seed (the official DML rule, shared/methods/modality_pairing.md)."""

import numpy as np
import pytest
import torch
from scipy import stats

from icml26.methods.multimodal.pairing import StochasticPairing, collate

LABELS = np.array([0, 1, 2, 0, 1, 0, 2, 0, 1, 1, 0, 2, 1, 0])  # classes of sizes 6, 5, 3


def _mods(n_mod: int, labels=LABELS):
    # each modality's sample i holds (its label, i): a re-paired partner reveals where it came from
    n = len(labels)
    return {f"m{j}": torch.tensor(np.stack([labels, np.arange(n)], 1), dtype=torch.int64) for j in range(n_mod)}


@pytest.mark.parametrize("n_mod", [2, 3])
def test_repaired_samples_keep_the_label_in_every_modality(n_mod):
    ds = StochasticPairing(_mods(n_mod), LABELS, seed=3)
    moved = 0
    for epoch in range(20):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            xs, y = ds[i]
            assert y == LABELS[i]
            assert int(xs["m0"][1]) == i  # the anchor is never re-drawn
            for k, v in xs.items():
                assert int(v[0]) == y, (k, i, epoch)
                moved += int(v[1]) != i
    assert moved > 0.5 * 20 * len(LABELS) * (n_mod - 1)  # most partners change (a class of 3 keeps self 1/3)


@pytest.mark.parametrize("allow_self", [True, False])
def test_draws_are_uniform_within_the_class(allow_self):
    ds = StochasticPairing(_mods(2), LABELS, seed=0, allow_self=allow_self)
    n = 0  # class 0 = samples 0, 3, 5, 7, 10, 13
    cls = np.flatnonzero(LABELS == LABELS[n])
    cand = cls if allow_self else cls[cls != n]
    epochs = 3000
    counts = np.zeros(len(LABELS), dtype=int)
    for e in range(epochs):
        counts[ds.sources(e)[n, 1]] += 1
    assert (
        counts[np.setdiff1d(np.arange(len(LABELS)), cand)].sum() == 0
    )  # never outside the class (nor self when excluded)
    obs = counts[cand]
    p = stats.chisquare(obs, np.full(len(cand), epochs / len(cand))).pvalue
    assert p > 1e-3, (obs, p)
    # the test can fail: a draw biased to the first candidate is rejected
    biased = obs.copy()
    biased[0] += epochs // 10
    biased[1] -= epochs // 10
    assert stats.chisquare(biased, np.full(len(cand), epochs / len(cand))).pvalue < 1e-3


def test_fixed_pairing_is_the_identity():
    mods = _mods(3)
    ds = StochasticPairing(mods, LABELS, enabled=False, seed=1)
    for e in range(5):
        assert np.array_equal(ds.sources(e), np.tile(np.arange(len(LABELS))[:, None], (1, 3)))
    for i in range(len(ds)):
        xs, y = ds[i]
        assert y == LABELS[i] and all(torch.equal(xs[k], mods[k][i]) for k in mods)
    p0 = StochasticPairing(mods, LABELS, p=0.0, seed=1)  # probability 0: the identity as well
    assert np.array_equal(p0.sources(0)[:, 1], np.arange(len(LABELS)))


def test_only_the_named_modalities_are_redrawn():
    ds = StochasticPairing(_mods(3), LABELS, resample=["m2"], seed=5)
    src = ds.sources(0)
    assert np.array_equal(src[:, 0], np.arange(len(LABELS))) and np.array_equal(src[:, 1], np.arange(len(LABELS)))
    assert (src[:, 2] != np.arange(len(LABELS))).any()
    assert (src[:, 2] != src[:, 1]).any()


def test_each_modality_gets_its_own_draw():
    ds = StochasticPairing(_mods(3, np.zeros(40, dtype=int)), np.zeros(40, dtype=int), seed=2)
    src = ds.sources(0)
    assert (src[:, 1] != src[:, 2]).mean() > 0.8


@pytest.mark.parametrize("n_mod", [2, 3])
def test_collate_through_a_dataloader(n_mod):
    mods = {f"m{j}": torch.randn(len(LABELS), 1, 4, 5 + j) for j in range(n_mod)}
    ds = StochasticPairing(mods, LABELS, seed=0)
    dl = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False, collate_fn=collate)
    batches = list(dl)
    assert len(batches) == 4
    xs, y = batches[0]
    assert set(xs) == set(mods) and y.dtype == torch.int64 and y.tolist() == LABELS[:4].tolist()
    for j in range(n_mod):
        assert xs[f"m{j}"].shape == (4, 1, 4, 5 + j)
    # the vectorised batch loader gives the very same pairs
    ds2 = StochasticPairing(mods, LABELS, seed=0)
    b = ds2.batch(np.arange(4), epoch=0)
    for j in range(n_mod):
        assert torch.equal(b[f"m{j}"], xs[f"m{j}"])


def test_determinism_per_seed_and_fresh_pairs_per_epoch():
    a = StochasticPairing(_mods(2), LABELS, seed=7)
    b = StochasticPairing(_mods(2), LABELS, seed=7)
    c = StochasticPairing(_mods(2), LABELS, seed=8)
    assert np.array_equal(a.sources(3), b.sources(3))
    assert not np.array_equal(a.sources(3), c.sources(3))
    assert not np.array_equal(a.sources(3), a.sources(4))
    # loading an index twice in one epoch is a fresh draw (the official per-access rule), reproducibly
    first = [a[i][0]["m1"][1].item() for i in range(len(a))] + [a[i][0]["m1"][1].item() for i in range(len(a))]
    second = [b[i][0]["m1"][1].item() for i in range(len(b))] + [b[i][0]["m1"][1].item() for i in range(len(b))]
    assert first == second and a.epoch == 1


def test_bad_inputs():
    with pytest.raises(ValueError, match="samples"):
        StochasticPairing({"a": torch.zeros(3), "b": torch.zeros(4)}, [0, 1, 0])
    with pytest.raises(ValueError, match="unknown modality"):
        StochasticPairing({"a": torch.zeros(3), "b": torch.zeros(3)}, [0, 1, 0], resample=["c"])
    with pytest.raises(ValueError, match="at least 2 samples"):
        StochasticPairing({"a": torch.zeros(3), "b": torch.zeros(3)}, [0, 1, 0], allow_self=False)
    with pytest.raises(ValueError, match="p must be"):
        StochasticPairing({"a": torch.zeros(3), "b": torch.zeros(3)}, [0, 1, 0], p=1.5)
