"""Counter-based random numbers shared by the tree-search twin and the C++ kernel.

Every draw is a pure function of (seed, stream, index, counter): SplitMix64 (Steele et al.,
OOPSLA 2014) over the key layout of ``icml26/csrc/cpu/mcts_search.h``, uniform doubles from the
top 53 bits, Box-Muller and ziggurat normals (Marsaglia & Tsang 2000; Doornik's ZIGNOR 2005) and
Bailey's polar Student-t (Math. Comp. 62, 1994). Same numbers, bit for bit, as the kernel.
"""

from __future__ import annotations

import math

M64 = (1 << 64) - 1
ALGO_STREAM = 1 << 40
OUTCOME_C = 20


# ---------------------------------------------------------------- counter-based RNG
def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def key(seed: int, stream: int, idx: int, c: int) -> int:
    """sm(sm(sm(seed) ^ (stream * M + c)) ^ idx), all mod 2^64."""
    a = splitmix64(seed & M64)
    b = splitmix64(a ^ ((stream * 0xD1B54A32D192ED03 + c) & M64))
    return splitmix64(b ^ (idx & M64))


def u01(h: int) -> float:
    return (h >> 11) * 2.0**-53


def u01_open(h: int) -> float:
    return ((h >> 11) + 0.5) * 2.0**-53


def std_normal(seed: int, stream: int, idx: int) -> float:
    u1 = u01_open(key(seed, stream, idx, 0))
    u2 = u01(key(seed, stream, idx, 1))
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def std_student_t(seed: int, stream: int, idx: int, df: float) -> float:
    """Bailey's polar method (Math. Comp. 62, 1994)."""
    for a in range(64):
        U = 2.0 * u01(key(seed, stream, idx, 2 + 2 * a)) - 1.0
        V = 2.0 * u01(key(seed, stream, idx, 3 + 2 * a)) - 1.0
        W = U * U + V * V
        if 0.0 < W <= 1.0:
            return U * math.sqrt(df * (math.pow(W, -2.0 / df) - 1.0) / W)
    return 0.0


# Standard normal draws of the tree rewards: ziggurat, 128 layers, as Doornik's ZIGNOR (Marsaglia &
# Tsang 2000; Doornik 2005), on the counter-based keys (see mcts_search.h for the key layout).
ZIG_C, TAIL_C = 100, 300
ZIG_LAYERS = 128
ZIG_R, ZIG_V = 3.442619855899, 9.91256303526217e-3


def _zig_tables() -> tuple[list[float], list[float]]:
    X = [0.0] * (ZIG_LAYERS + 1)
    f = math.exp(-0.5 * ZIG_R * ZIG_R)
    X[0] = ZIG_V / f
    X[1] = ZIG_R
    for i in range(2, ZIG_LAYERS):
        X[i] = math.sqrt(-2.0 * math.log(ZIG_V / X[i - 1] + f))
        f = math.exp(-0.5 * X[i] * X[i])
    return X, [X[i + 1] / X[i] for i in range(ZIG_LAYERS)]


ZIG_X, ZIG_RT = _zig_tables()


def std_normal_zig(seed: int, stream: int, idx: int) -> float:
    """N(0, 1) draw number ``idx`` of ``stream``: attempt a uses key(.., ZIG_C + 2a) (layer = low
    7 bits, u = top 53 bits) and key(.., ZIG_C + 2a + 1) for the wedge; the tail (Marsaglia's
    method beyond R) key(.., TAIL_C + 2t) and key(.., TAIL_C + 2t + 1)."""
    X, Rt = ZIG_X, ZIG_RT
    for a in range(64):
        h = key(seed, stream, idx, ZIG_C + 2 * a)
        i = h & (ZIG_LAYERS - 1)
        u = 2.0 * u01(h) - 1.0
        if abs(u) < Rt[i]:
            return u * X[i]
        if i == 0:
            for t in range(64):
                x = math.log(u01_open(key(seed, stream, idx, TAIL_C + 2 * t))) / ZIG_R
                y = math.log(u01_open(key(seed, stream, idx, TAIL_C + 2 * t + 1)))
                if not (-2.0 * y < x * x):
                    return x - ZIG_R if u < 0.0 else ZIG_R - x
            return -ZIG_R if u < 0.0 else ZIG_R
        x = u * X[i]
        f0 = math.exp(-0.5 * (X[i] * X[i] - x * x))
        f1 = math.exp(-0.5 * (X[i + 1] * X[i + 1] - x * x))
        if f1 + u01(key(seed, stream, idx, ZIG_C + 2 * a + 1)) * (f0 - f1) < 1.0:
            return x
    return 0.0


def gumbel(seed: int, a: int) -> float:
    return -math.log(-math.log(u01_open(key(seed, ALGO_STREAM + 1, a, 0))))
