"""probe-syntax geometry: leave-one-out centroids, Information Imbalance, jackknife,
and the shuffled-label control, on data where the answer is known."""

import numpy as np
import pytest

from icml26.methods.probing import geometry as g


def test_loo_centroid_oracle():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(13, 5))
    labels = np.array([3, 3, 1, 1, 1, 7, 7, 7, 7, 3, 1, 7, 3])
    c = g.loo_centroids(x, labels)
    for i in range(len(x)):
        others = [j for j in range(len(x)) if labels[j] == labels[i] and j != i]
        np.testing.assert_allclose(c[i], x[others].mean(axis=0), rtol=1e-12, atol=1e-12)


def test_loo_subtraction_is_scaled_full_subtraction():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 4))
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2])
    cents, counts, idx = g.group_centroids(x, labels)
    n = counts[idx][:, None]
    np.testing.assert_allclose(x - g.loo_centroids(x, labels), n / (n - 1) * (x - cents[idx]), atol=1e-12)


def test_loo_singleton_group_rejected():
    with pytest.raises(ValueError, match="single member"):
        g.loo_centroids(np.ones((3, 2)), np.array([0, 0, 1]))


def _dist(x):
    return np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)


def _ii_bruteforce(da, db):
    n = len(da)
    vals = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        ra = {j: 1 + sum(da[i, k] < da[i, j] for k in others) for j in others}
        rb = {j: 1 + sum(db[i, k] < db[i, j] for k in others) for j in others}
        nn = [j for j in others if ra[j] == 1]
        vals.append(np.mean([rb[j] - 1 for j in nn]))
    return 2 * np.mean(vals) / (n - 2)


def test_ii_matches_bruteforce_with_ties():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 3, size=(25, 2)).astype(float)  # many tied distances
    b = rng.normal(size=(25, 3))
    da, db = _dist(a), _dist(b)
    assert g.information_imbalance(da, db) == pytest.approx(_ii_bruteforce(da, db), abs=1e-12)


def test_ii_identical_is_zero_independent_is_one():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(400, 8))
    d = g.normalized_l2(a)
    assert g.information_imbalance(d, d) == 0.0
    vals = [g.information_imbalance(d, g.normalized_l2(rng.normal(size=(400, 8)))) for _ in range(5)]
    assert np.mean(vals) == pytest.approx(1.0, abs=0.05)


def test_ii_asymmetry_subset_of_features():
    # A = (x, y) is informative about B = x, less so the other way (Glielmo et al. Fig. 1)
    rng = np.random.default_rng(4)
    xy = rng.normal(size=(500, 2))
    da, db = _dist(xy), _dist(xy[:, :1])
    fwd, bwd = g.information_imbalance(da, db), g.information_imbalance(db, da)
    assert fwd < 0.1
    assert bwd > 0.3 and bwd > 4 * fwd


def test_jackknife_ci_covers_truth():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(300, 6))
    da = g.normalized_l2(a)
    db = g.normalized_l2(rng.normal(size=(300, 6)))
    blocks = g.assign_blocks(np.arange(300) // 3, 20, rng)
    assert len(np.unique(blocks)) == 20
    theta, se, (lo, hi) = g.jackknife_ii(da, db, blocks)
    assert 0.01 < se < 0.2
    assert lo < 1.0 < hi
    theta0, se0, (lo0, hi0) = g.jackknife_ii(da, da, blocks)
    assert theta0 == 0.0 and se0 == 0.0 and lo0 == hi0 == 0.0


def test_blocks_keep_groups_whole():
    rng = np.random.default_rng(6)
    groups = np.repeat(np.arange(30), 4)
    blocks = g.assign_blocks(groups, 7, rng)
    for k in range(30):
        assert len(set(blocks[groups == k])) == 1


def _crossed(n_events=40, n_structs=5, a=1.0, b=1.0, noise=0.5, d=64, seed=0):
    """x = mu + a*s_structure + b*m_event + noise: a syntax and a meaning component."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(n_structs, d)) * a
    m = rng.normal(size=(n_events, d)) * b
    mu = rng.normal(size=d) * 3.0  # common offset (anisotropy)
    syn = np.tile(np.arange(n_structs), n_events)
    sem = np.repeat(np.arange(n_events), n_structs)
    x = mu + s[syn] + m[sem] + noise * rng.normal(size=(len(syn), d))
    return x, syn, sem


def test_centroid_subtraction_and_shuffle_control():
    x, syn, sem = _crossed()
    masks = g.partner_masks(syn, sem)
    rng = np.random.default_rng(0)
    c_syn, c_sem = g.loo_centroids(x, syn), g.loo_centroids(x, sem)
    raw = g.cosine_matrix(x)
    sim = lambda s, k: g.mean_partner_similarity(s, masks[k])
    syn_true = g.cosine_matrix(x - c_syn)
    syn_shuf = g.cosine_matrix(x - g.shuffled_assignment(c_syn, rng))
    sem_true = g.cosine_matrix(x - c_sem)
    sem_shuf = g.cosine_matrix(x - g.shuffled_assignment(c_sem, rng))
    # matched partners are more similar than unmatched ones
    assert sim(raw, "syntax") > sim(raw, "unmatched") + 0.05
    assert sim(raw, "semantic") > sim(raw, "unmatched") + 0.05
    # removing the syntactic centroid kills the syntax-twin similarity, keeps paraphrases
    assert abs(sim(syn_true, "syntax")) < 0.05
    assert sim(syn_true, "semantic") > 0.3
    assert abs(sim(sem_true, "semantic")) < 0.3  # -1/(n-1) = -0.25 floor for 5 structures
    assert sim(sem_true, "syntax") > 0.3
    # shuffled centroids do not remove the matched similarity
    assert sim(syn_shuf, "syntax") > 0.2
    assert sim(sem_shuf, "semantic") > 0.2


def test_ii_rises_after_true_centroid_not_after_shuffled():
    x, syn, sem = _crossed(n_events=60, a=1.5, b=0.7, noise=0.3, seed=1)
    rng = np.random.default_rng(1)
    # designated syntax twin: same structure, a different (random) event
    n = len(x)
    twin = np.array([rng.choice(np.flatnonzero((syn == syn[i]) & (sem != sem[i]))) for i in range(n)])
    c_syn = g.loo_centroids(x, syn)
    ii = lambda z: g.information_imbalance(g.normalized_l2(z), g.normalized_l2(z[twin]))
    before = ii(x)
    after = ii(x - c_syn)
    shuffled = ii(x - g.shuffled_assignment(c_syn, rng))
    assert before < 0.3
    assert after > 0.9
    # a wrong (shuffled) centroid scrambles neighbourhoods only partly
    assert shuffled < after - 0.2


@pytest.mark.parametrize("seed,n,nb", [(0, 120, 7), (1, 300, 20), (2, 60, 60)])
def test_fast_jackknife_equals_exact(seed, n, nb):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, 4))
    b = a + rng.normal(size=(n, 4)) * 0.7
    da, db = g.normalized_l2(a), g.normalized_l2(b)
    blocks = g.assign_blocks(np.arange(n) // 2, nb, rng)
    ids = np.unique(blocks)
    fast = g._jackknife_replicates_fast(da, db, blocks, ids, top_k=8)
    exact = g._jackknife_replicates_exact(da, db, blocks, ids)
    assert fast is not None
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-12)


def test_jackknife_with_ties_falls_back_to_exact():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 3, size=(40, 2)).astype(float)
    da, db = _dist(a), _dist(rng.normal(size=(40, 2)))
    blocks = np.arange(40) % 5
    assert g._jackknife_replicates_fast(da, db, blocks, np.unique(blocks)) is None
    theta, se, ci = g.jackknife_ii(da, db, blocks)
    assert np.isfinite(se) and ci[0] <= theta <= ci[1]


GOLDEN = __import__("pathlib").Path(__file__).resolve().parents[1] / "golden" / "probe_syntax.json"


def _golden_metrics():
    from icml26.methods.probing.syntax_semantics import layer_metrics

    x, syn, sem = _crossed(n_events=30, n_structs=4, seed=11)
    rng = np.random.default_rng(11)
    n = len(x)
    twin = np.array([rng.choice(np.flatnonzero((syn == syn[i]) & (sem != sem[i]))) for i in range(n)])
    para = np.array([rng.choice(np.flatnonzero((sem == sem[i]) & (syn != syn[i]))) for i in range(n)])
    blocks = g.assign_blocks(sem, 6, rng)
    return layer_metrics(x, syn, sem, twin, para, blocks, rng.permutation(n))


def test_layer_metrics_golden():
    import json

    want = json.loads(GOLDEN.read_text())
    got = _golden_metrics()
    assert sorted(got) == sorted(want["values"])
    for k, v in want["values"].items():
        np.testing.assert_allclose(got[k], v, rtol=0, atol=want["tolerance"], err_msg=k)


if __name__ == "__main__":  # python tests/methods/test_probe_geometry.py --golden
    import json
    import sys

    if "--golden" in sys.argv:
        vals = {k: (list(map(float, v)) if isinstance(v, list) else float(v)) for k, v in _golden_metrics().items()}
        GOLDEN.write_text(
            json.dumps(
                {
                    "command": "python tests/methods/test_probe_geometry.py --golden",
                    "what": "layer_metrics on _crossed(n_events=30, n_structs=4, seed=11)",
                    "tolerance": 1e-7,
                    "values": vals,
                },
                indent=1,
            )
            + "\n"
        )
