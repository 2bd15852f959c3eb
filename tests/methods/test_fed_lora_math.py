"""fed-lora weight math: SVD aggregation of heterogeneous-rank adapters (exact above the summed
rank, Eckart-Young below it), the generalized/personal split, FLoRA stacking, HetLoRA padding,
the OOD weight, ROUGE-1."""

import math

import pytest
import torch

from icml26.methods.federated import lora_math as L
from icml26.methods.federated.model import rouge1_f


def _clients(ranks, d_out=20, d_in=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(r, d_in, generator=g, dtype=torch.float64),
            torch.randn(d_out, r, generator=g, dtype=torch.float64),
        )
        for r in ranks
    ]


def test_svd_aggregation_is_exact_when_the_rank_covers_the_sum():
    fac = _clients([2, 3, 4])
    w = L.normalized([2, 3, 4])
    dense = sum(wi * (B @ A) for (A, B), wi in zip(fac, w))
    assert torch.allclose(L.weighted_sum_dense(fac, w), dense, atol=1e-12)
    U, S, Vh = L.svd_of_sum(fac, w)
    for r in (9, 12):  # >= 2 + 3 + 4 (12: zero-padded slots)
        A, B = L.truncate_svd(U, S, Vh, r)
        assert A.shape == (r, 16) and B.shape == (20, r)
        assert torch.allclose(B @ A, dense, atol=1e-10)


@pytest.mark.parametrize("r", [1, 3, 5, 8])
def test_svd_aggregation_below_the_sum_is_the_optimal_truncation(r):
    fac = _clients([2, 3, 4], seed=1)
    w = [0.2, 0.3, 0.5]
    dense = sum(wi * (B @ A) for (A, B), wi in zip(fac, w))
    sv = torch.linalg.svdvals(dense)
    A, B = L.truncate_svd(*L.svd_of_sum(fac, w), r)
    err = torch.linalg.norm(dense - B @ A) ** 2
    assert math.isclose(float(err), float((sv[r:] ** 2).sum()), rel_tol=1e-9, abs_tol=1e-9)  # Eckart-Young
    # the same matrix as the dense SVD's truncation
    U, S, Vh = torch.linalg.svd(dense, full_matrices=False)
    assert torch.allclose(B @ A, (U[:, :r] * S[:r]) @ Vh[:r], atol=1e-9)
    # and better than other rank-r approximations: HetLoRA-style slot truncation, a random projection
    pad = [L.zero_pad(a, b, 4) for a, b in fac]
    Ah = sum(wi * a for (a, _), wi in zip(pad, w))[:r]
    Bh = sum(wi * b for (_, b), wi in zip(pad, w))[:, :r]
    assert err <= torch.linalg.norm(dense - Bh @ Ah) ** 2
    Q, _ = torch.linalg.qr(torch.randn(20, r, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))
    assert err <= torch.linalg.norm(dense - Q @ Q.T @ dense) ** 2 + 1e-12


def test_truncate_svd_folds_the_receivers_scaling():
    fac = _clients([3, 5])
    U, S, Vh = L.svd_of_sum(fac, [0.5, 0.5])
    A1, B1 = L.truncate_svd(U, S, Vh, 4)
    A2, B2 = L.truncate_svd(U, S, Vh, 4, scale=16 / 8)
    assert torch.allclose((16 / 8) * B2 @ A2, B1 @ A1, atol=1e-12)


def test_split_recombines_to_the_original_adapter():
    ((A, B),) = _clients([8])
    for rs in range(0, 9):
        As, Bs, Ap, Bp = L.split_adapter(A, B, rs)
        assert As.shape == (rs, 16) and Bp.shape == (20, 8 - rs)
        A2, B2 = L.merge_adapter(As, Bs, Ap, Bp)
        assert torch.equal(A2, A) and torch.equal(B2, B)
        assert torch.allclose(Bs @ As + Bp @ Ap, B @ A, atol=1e-12)
    with pytest.raises(ValueError):
        L.split_adapter(A, B, 9)


def test_flora_stacking_is_the_exact_weighted_sum():
    fac = _clients([2, 5, 3])
    w = [0.1, 0.6, 0.3]
    A, B = L.stack(fac, w)
    assert A.shape == (10, 16) and B.shape == (20, 10)
    assert torch.allclose(B @ A, L.weighted_sum_dense(fac, w), atol=1e-12)


def test_zero_pad_keeps_the_product():
    ((A, B),) = _clients([3])
    Ap, Bp = L.zero_pad(A, B, 7)
    assert Ap.shape == (7, 16) and torch.equal(Bp @ Ap, B @ A)
    with pytest.raises(ValueError):
        L.zero_pad(A, B, 2)


def test_ood_similarity_range_and_direction():
    ref = [2.0, 2.5, 3.0, 2.2]
    assert L.ood_similarity(2.0, [2.0, 2.0]) == 1.0
    vals = [L.ood_similarity(s, ref) for s in (2.4, 4.0, 8.0, 50.0)]
    assert all(0.0 <= v <= 1.0 for v in vals)
    assert vals == sorted(vals, reverse=True)  # farther from the training prompts: lower sigma
    # golden: 1 - |2 - 4| / 4 = 0.5 and 1 - |3 - 4| / 4 = 0.75 -> 0.625
    assert L.ood_similarity(4.0, [2.0, 3.0]) == pytest.approx(0.625)
    with pytest.raises(ValueError):
        L.ood_similarity(1.0, [])


def test_part_weights_modes():
    # official: w_p = sigma max(r_s, r_p) / r, w_s = 1 - w_p  (r_s 6, r_p 2: max 6 / 8)
    ws, wp = L.part_weights(0.8, 6, 2, "sigma-official")
    assert wp == pytest.approx(0.8 * 6 / 8) and ws == pytest.approx(1 - 0.8 * 6 / 8)
    ws2, wp2 = L.part_weights(0.8, 6, 2, "sigma")
    assert max(ws2, wp2) == pytest.approx(1.0) and ws2 / wp2 == pytest.approx(ws / wp)
    lo, hi = L.part_weights(0.2, 4, 4, "sigma"), L.part_weights(0.9, 4, 4, "sigma")
    assert hi[1] / hi[0] > lo[1] / lo[0]  # in-domain prompts lean on the personal slots
    assert L.part_weights(0.5, 4, 4, "fixed") == (1.0, 1.0) and L.part_weights(0.5, 4, 4, "half") == (0.5, 0.5)
    assert L.part_weights(0.9, 8, 0, "sigma") == (1.0, 0.0)


def test_prompt_score_is_perplexity_per_token():
    assert L.prompt_score(math.log(20.0), 10) == pytest.approx(2.0)


def test_rouge1_golden():
    assert rouge1_f("The cat sat", "the cat sat on the mat") == pytest.approx(100 * 2 * 1.0 * 0.5 / 1.5)
    assert rouge1_f("", "x") == 0.0 and rouge1_f("a b", "a b") == pytest.approx(100.0)
    # clipped counts: "the the the" vs "the cat": 1 hit, p = 1/3, r = 1/2
    assert rouge1_f("the the the", "the cat") == pytest.approx(100 * 2 * (1 / 3) * 0.5 / (1 / 3 + 0.5))
