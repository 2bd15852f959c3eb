"""Orthonormal Hadamard matrices of sizes that are not powers of two, and their fast apply.

``n = m * 2**k`` with ``m`` in {1} or a Paley-I order ``q + 1`` (q prime, q = 3 mod 4:
12, 20, 24, 44, 48, 60, 72, ...). ``H_n = H_m (x) H_{2^k}`` (Kronecker), scaled by 1/sqrt(n).
SmolLM2-135M needs 576 = 72 * 8 (Paley q = 71), 1536 = 12 * 128 and head_dim 64 = 2**6;
Gemma-3-270M's 640 = 20 * 32.

``apply(x, n)`` computes ``x @ H_n`` over the last dim in O(n (m + log n)) through the
Kronecker factors, never forming the n x n matrix.
"""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor


def _is_prime(q: int) -> bool:
    return q > 1 and all(q % p for p in range(2, int(q**0.5) + 1))


@cache
def _paley(n: int) -> Tensor:
    """Paley construction I: Hadamard matrix of order n = q + 1, q prime, q = 3 (mod 4)."""
    q = n - 1
    residues = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if i in residues else -1 for i in range(1, q)]
    qm = torch.tensor([[chi[(j - i) % q] for j in range(q)] for i in range(q)], dtype=torch.float64)
    s = torch.zeros(n, n, dtype=torch.float64)
    s[0, 1:] = 1
    s[1:, 0] = -1
    s[1:, 1:] = qm
    h = s + torch.eye(n, dtype=torch.float64)
    return h


@cache
def _sylvester(n: int) -> Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _factor(n: int) -> tuple[int, int]:
    """n = m * 2**k with the smallest Paley order m (or m = 1)."""
    if n <= 0:
        raise ValueError(f"Hadamard size must be positive, got {n}")
    p2 = n & -n
    if p2 == n:
        return 1, n
    for m in sorted({q + 1 for q in range(3, n) if _is_prime(q) and q % 4 == 3}):
        if m > n:
            break
        if n % m == 0 and (n // m) & (n // m - 1) == 0:
            return m, n // m
    raise ValueError(f"no Hadamard matrix of order {n} is constructed here (need m * 2**k with m-1 a prime = 3 mod 4)")


def has_hadamard(n: int) -> bool:
    try:
        _factor(n)
        return True
    except ValueError:
        return False


@cache
def _factors(n: int) -> tuple[Tensor, Tensor]:
    m, p = _factor(n)
    hm = _paley(m) if m > 1 else torch.ones(1, 1, dtype=torch.float64)
    return hm / m**0.5, _sylvester(p) / p**0.5


def hadamard(n: int, dtype=torch.float32) -> Tensor:
    """Orthonormal n x n Hadamard matrix (H H^T = I)."""
    a, b = _factors(n)
    return torch.kron(a, b).to(dtype)


def apply(x: Tensor, n: int | None = None) -> Tensor:
    """``x @ H_n`` over the last dim (x: (..., n)), via the Kronecker factors."""
    n = x.shape[-1] if n is None else n
    a, b = _factors(n)
    a = a.to(dtype=x.dtype, device=x.device)
    b = b.to(dtype=x.dtype, device=x.device)
    shp = x.shape
    y = x.reshape(-1, a.shape[0], b.shape[0])  # (R, m, p)
    y = torch.matmul(a.T, y)  # kron(a, b): x @ kron(a,b) = a^T X b in the (m, p) view
    y = torch.matmul(y, b)
    return y.reshape(shp)


def random_hadamard(n: int, seed: int, dtype=torch.float32) -> Tensor:
    """QuaRot's randomized Hadamard ``diag(s) H_n`` with random signs s (orthogonal)."""
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=g).to(torch.float64) * 2 - 1
    return (signs[:, None] * torch.kron(*_factors(n))).to(dtype)
