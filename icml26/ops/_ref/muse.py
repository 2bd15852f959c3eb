"""MuSe: Multipole Semantic Attention (Mitchell & Kersting, arXiv 2509.10406 v1-v4; ICML 2026),
with its ablations and the spatial-block baseline, as a causal attention for (B, H, N, D) tensors
(the torch twin: the implementation off the C++ kernel's path, and its test oracle).

Contract: ``muse_attention(q, k, v, settings)`` with q (B, H, N, D), k, v (B, Hkv, N, D) returns
(B, H, N, D); the output at position t depends on tokens <= t only (query centroids from the
previous complete block, per-token assignment, retrieval of past key clusters only, exact
attention inside the query's own block). ``attention(method, ...)`` -> (out, sparsity).
Variants: ``muse`` (clusters, tilted far field, exact retrieval), ``muse-noretrieval``,
``muse-v1`` (untilted monopole + dipole; RECON of v1), ``block`` (MoBA, Lu et al. 2025, arXiv
2502.13189, code MoonshotAI/MoBA: per-query top-r past key blocks by q.mean(k_block)).

Source: the paper's v1 Fig. 1 caption (tilted summaries L_ab, k̃_ab, ṽ_ab) and v4 abstract
("selective exact retrieval from the most relevant clusters"); the paper's full text and code are
not public, so the clustering, causal query clusters, first-order far field and retrieval rule are
RECON (this project's). Numbered steps and what is RECON: docs/muse.md, "Specification".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

VARIANTS = ("muse", "muse-v1", "muse-noretrieval", "block")


def _pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class MuseSettings:
    """Hyper-parameters of the approximate attention (all per head and per block).

    block_tokens: B, tokens per block (exact causal attention inside it), >= 2.
    query_clusters / key_clusters: clusters per block (powers of two dividing B).
    lloyd_iters: Lloyd steps per balanced 2-means split (0 = contiguous clusters).
    retrieved_clusters: r, past key clusters (or key blocks, for ``block``) attended exactly
        by each query cluster.
    variant: one of VARIANTS."""

    block_tokens: int = 256
    query_clusters: int = 8
    key_clusters: int = 8
    lloyd_iters: int = 3
    retrieved_clusters: int = 16
    variant: str = "muse"
    detach_query_centroids: bool = True

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if not isinstance(self.block_tokens, int) or self.block_tokens < 2:
            raise ValueError(f"block_tokens must be an integer >= 2, got {self.block_tokens!r}")
        for name in ("query_clusters", "key_clusters"):
            c = getattr(self, name)
            if not _pow2(c) or self.block_tokens % c:
                raise ValueError(f"{name} must be a power of two dividing block_tokens={self.block_tokens}, got {c!r}")
        if self.lloyd_iters < 0:
            raise ValueError(f"lloyd_iters must be >= 0, got {self.lloyd_iters}")
        if self.retrieved_clusters < 0:
            raise ValueError(f"retrieved_clusters must be >= 0, got {self.retrieved_clusters}")

    @property
    def retrieval(self) -> int:
        return self.retrieved_clusters if self.variant in ("muse", "block") else 0


@dataclass
class Plan:
    """Constants of one call (no gradient): cluster orders, assignments and retrieved sets.

    perm_q: (G, nb, B) balanced cluster order of each block's queries (cluster a = positions
    a*B/Cq .. of the order; the centroids of block t are those of block t-1);
    assign: (G, nb, B) the centroid each query joins (``block``: the query itself, 0..B-1);
    perm_k: (G, nb, B) key order per block; retrieved: (G, nb, B, r) key-cluster ids per query,
    or None; valid: same shape, bool;
    exact_pairs: query-key pairs computed exactly per head (float)."""

    perm_q: Tensor
    perm_k: Tensor
    assign: Tensor | None = None
    retrieved: Tensor | None = None
    valid: Tensor | None = None
    exact_pairs: float = 0.0
    extra: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- 1. clustering
def balanced_order(x: Tensor, clusters: int, iters: int) -> Tensor:
    """Order of the rows of x that groups them into ``clusters`` equal contiguous clusters.

    x: (..., M, D); clusters: power of two dividing M. Recursive balanced 2-means: each group
    is split at the median of the projection on (c1 - c2), the two half means, ``iters`` times
    (a Lloyd step with equal-size constraint: the assignment that minimises the squared
    distance under it). Starts from the current order's halves; iters = 0 keeps the order.
    Returns (..., M) int64 indices. Deterministic (stable sorts). RECON (docs/muse.md, step 1)."""
    *lead, M, D = x.shape
    idx = torch.arange(M, device=x.device).expand(*lead, M)
    g = 1
    while g < clusters:
        m = M // g
        xs = _gather_rows(x, idx).reshape(*lead, g, m, D)
        ig = idx.reshape(*lead, g, m)
        for _ in range(iters):
            d = xs[..., : m // 2, :].mean(-2) - xs[..., m // 2 :, :].mean(-2)  # (..., g, D)
            proj = (xs * d.unsqueeze(-2)).sum(-1)  # (..., g, m)
            order = torch.argsort(proj, dim=-1, descending=True, stable=True)
            xs = _gather_rows(xs, order)
            ig = torch.gather(ig, -1, order)
        idx = ig.reshape(*lead, M)
        g *= 2
    return idx


def _blocks(x: Tensor, bt: int) -> tuple[Tensor, int]:
    """(Bz, H, N, D) -> zero-padded (Bz, H, nb, bt, D), and N."""
    n = x.shape[2]
    pad = (-n) % bt
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    return x.reshape(x.shape[0], x.shape[1], -1, bt, x.shape[-1]), n


def _safe_attend(scores: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over the last dim of scores (-inf = masked, whole rows may be masked) applied to
    values (..., K, D). Returns (out (..., Q, D), lse (..., Q)); an empty row gives 0 and a very
    negative lse (no NaN, no -inf, finite gradients)."""
    mx = scores.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    w = torch.exp(scores - mx)
    z = w.sum(-1, keepdim=True)
    zc = z.clamp_min(1e-30)
    out = (w @ values) / zc
    lse = (mx + torch.log(zc)).squeeze(-1)
    return out, lse


def _gather_rows(x: Tensor, idx: Tensor) -> Tensor:
    """x (..., M, D), idx (..., M) (same leading dims) -> the rows of x in idx order (row copies)."""
    m, d = x.shape[-2:]
    lead = idx.shape[:-1]
    base = torch.arange(math.prod(lead), device=x.device).reshape(*lead, 1) * m
    return x.reshape(-1, d)[(idx + base).reshape(-1)].reshape(*idx.shape, d)


def make_plan(q: Tensor, k: Tensor, s: MuseSettings) -> Plan:
    """Cluster orders for q (Bz, H, N, D) and k (Bz, Hkv, N, D) (keys clustered per KV head)
    and the per-token centroid assignment (causal: centroids of the previous block)."""
    bt = s.block_tokens
    with torch.no_grad():
        qb, _ = _blocks(q, bt)
        kb, _ = _blocks(k, bt)
        bz, h, nb = qb.shape[:3]
        hk = kb.shape[1]
        ar = torch.arange(bt, device=q.device).expand(bz, h, nb, bt)
        if s.variant in ("muse", "muse-noretrieval"):
            perm_q = balanced_order(qb, s.query_clusters, s.lloyd_iters)
        else:  # block: every query is its own group; v1: no query clusters
            perm_q = ar
        if s.variant == "block":
            perm_k = torch.arange(bt, device=k.device).expand(bz, hk, nb, bt)
        else:
            perm_k = balanced_order(kb, s.key_clusters, s.lloyd_iters)
        perm_k = perm_k.repeat_interleave(h // hk, dim=1)
        g = bz * h
        perm_q = perm_q.reshape(g, nb, bt).contiguous()
        if s.variant in ("muse", "muse-noretrieval"):
            cent = _centroids(qb.reshape(g, nb, bt, -1), perm_q, s.query_clusters)
            assign = _assign(qb.reshape(g, nb, bt, -1), cent)
        else:
            assign = ar.reshape(g, nb, bt).contiguous()
    return Plan(perm_q=perm_q, perm_k=perm_k.reshape(g, nb, bt).contiguous(), assign=assign)


def _centroids(qb: Tensor, perm_q: Tensor, cq: int) -> Tensor:
    """Centroids used by every block (G, nb, Cq, D): block t >= 1 gets the means of the balanced
    clusters of block t-1's queries; block 0 (no far field) gets block 0's own (never used)."""
    g, nb, bt, d = qb.shape
    cent = _gather_rows(qb, perm_q).reshape(g, nb, cq, bt // cq, d).mean(-2)
    return torch.cat([cent[:, :1], cent[:, :-1]], 1)


def _assign(qb: Tensor, cent: Tensor) -> Tensor:
    """Nearest centroid of every query: argmax_a q.q̄_a - |q̄_a|²/2 (= argmin |q - q̄_a|²; first on ties)."""
    sc = qb @ cent.transpose(-1, -2) - 0.5 * (cent * cent).sum(-1).unsqueeze(-2)  # (G, nb, B, Cq)
    return sc.argmax(-1)


def _local(qb: Tensor, kb: Tensor, vb: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """Exact causal attention inside each block: (G, nb, B, D) -> out, lse (G, nb, B)."""
    bt = qb.shape[-2]
    sc = (qb @ kb.transpose(-1, -2)) * scale
    tri = torch.ones(bt, bt, dtype=torch.bool, device=qb.device).tril()
    return _safe_attend(sc.masked_fill(~tri, float("-inf")), vb)


def _merge(o1: Tensor, l1: Tensor, o2: Tensor, l2: Tensor) -> tuple[Tensor, Tensor]:
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse).unsqueeze(-1) + o2 * torch.exp(l2 - lse).unsqueeze(-1), lse


def _exact_pairs(n: int, bt: int, counts_q: Tensor | None) -> float:
    """Exact query-key pairs per head: causal pairs in the diagonal blocks of the first n tokens
    plus the retrieved keys of each real query (counts_q (G, Np) keys per query, or None)."""
    full, last = divmod(n, bt)
    pairs = full * bt * (bt + 1) / 2 + last * (last + 1) / 2
    if counts_q is not None:
        pairs += counts_q[:, :n].double().sum().item() / counts_q.shape[0]
    return float(pairs)


def exact_pairs_shape(n: int, s: MuseSettings) -> float:
    """Exact query-key pairs per head for N = n tokens (local causal blocks plus, for query block
    t >= 1, min(r, t * Ck) retrieved clusters of B / Ck keys per real query): depends only on the
    shape, since every query cluster retrieves its top-r among the past clusters."""
    bt, ck, r = s.block_tokens, s.key_clusters, s.retrieval
    nb = -(-n // bt)
    pairs = _exact_pairs(n, bt, None)
    if s.variant == "muse-v1" or r == 0:
        return pairs
    for t in range(1, nb):
        real = min(bt, n - t * bt)
        pairs += real * min(r, t * ck) * (bt // ck)
    return float(pairs)


def sparsity(n: int, exact_pairs: float) -> float:
    """The issue's contract: 1 - exact pairs / causal pairs N(N+1)/2."""
    return 1.0 - exact_pairs / (n * (n + 1) / 2)


def muse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    settings: MuseSettings | None = None,
    *,
    scale: float | None = None,
    plan: Plan | None = None,
    return_plan: bool = False,
):
    """Causal MuSe (or one of its variants, ``settings.variant``) attention.

    q: (Bz, H, N, D); k, v: (Bz, Hkv, N, D) with H % Hkv == 0 (GQA); scale: default D**-0.5.
    plan: fixed cluster orders / retrieved sets (from an earlier call with return_plan=True);
    gradients then flow through everything else (gradcheck uses this).
    Returns out (Bz, H, N, D) in q's dtype (and the Plan when return_plan). Raises ValueError
    on bad shapes."""
    s = settings or MuseSettings()
    if (
        q.dim() != 4
        or k.dim() != 4
        or v.shape != k.shape
        or q.shape[0] != k.shape[0]
        or q.shape[2] != k.shape[2]
        or q.shape[-1] != k.shape[-1]
        or q.shape[1] % k.shape[1]
    ):
        raise ValueError(
            f"muse_attention: expected q (B, H, N, D) and k, v (B, Hkv, N, D) with H % Hkv == 0, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    bz, h, n, d = q.shape
    hk = k.shape[1]
    c = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    bt = s.block_tokens
    if plan is None:
        plan = make_plan(q, k, s)
    qb = _blocks(q, bt)[0].reshape(bz * h, -1, bt, d)  # (G, nb, B, D)
    kb = _blocks(k, bt)[0].repeat_interleave(h // hk, dim=1).reshape(bz * h, -1, bt, d)
    vb = _blocks(v, bt)[0].repeat_interleave(h // hk, dim=1).reshape(bz * h, -1, bt, d)
    g, nb = qb.shape[:2]
    out_loc, lse_loc = _local(qb, kb, vb, c)  # 5. diagonal block
    if nb == 1:
        plan.exact_pairs = _exact_pairs(n, bt, None)
        o = out_loc.reshape(bz, h, -1, d)[:, :, :n]
        return (o, plan) if return_plan else o
    if s.variant == "muse-v1":
        out_far, lse_far = _far_v1(qb, kb, vb, plan, s, c)
        counts = None
    else:
        out_far, lse_far, counts = _far_tilted(qb, kb, vb, plan, s, c)
    out, _ = _merge(out_loc, lse_loc, out_far, lse_far)
    plan.exact_pairs = _exact_pairs(n, bt, counts)
    o = out.reshape(bz, h, -1, d)[:, :, :n]
    return (o, plan) if return_plan else o


def _far_tilted(qb, kb, vb, plan: Plan, s: MuseSettings, c: float):
    """Steps 2-5 (and the block baseline): retrieval + far field for every query, token order.

    Query block by query block (t = 1 .. nb-1), against the key clusters of blocks < t only, with
    the centroids of block t-1. Returns out (G, nb, B, D), lse (G, nb, B), retrieved keys per
    query (G, Np) or None."""
    g, nb, bt, d = qb.shape
    cq, ck = (s.query_clusters, s.key_clusters)
    sz = bt // ck
    kc = nb * ck
    ks = _gather_rows(kb, plan.perm_k).reshape(g, kc, sz, d)  # (G, Kc, s, D)
    vs = _gather_rows(vb, plan.perm_k).reshape(g, kc, sz, d)
    block = s.variant == "block"
    if not block:
        cent = _centroids(qb, plan.perm_q, cq)  # (G, nb, Cq, D)
        if s.detach_query_centroids:
            cent = cent.detach()
    else:
        kmean = ks.mean(-2)  # MoBA gate: q . mean(k_block)
    ninf = float("-inf")
    r = s.retrieval
    need_plan = r > 0 and plan.retrieved is None
    rets, valids = [], []
    outs = [torch.zeros_like(qb[:, 0])]
    lses = [torch.full_like(qb[:, 0, :, 0], -1e30)]
    cnts = [torch.zeros(g, bt, dtype=torch.long, device=qb.device)]
    gi = torch.arange(g, device=qb.device)[:, None, None]
    for t in range(1, nb):
        kp = t * ck
        qt, at = qb[:, t], plan.assign[:, t]  # (G, B, D), (G, B)
        ksp, vsp = ks[:, :kp], vs[:, :kp]
        if block:
            gate = c * qt @ kmean[:, :kp].transpose(-1, -2)  # (G, B, Kp): per token
        else:
            qbt = cent[:, t]  # (G, Cq, D)
            # 3. tilted summaries of every past key cluster toward each centroid
            lg = (ksp.reshape(g, kp * sz, d) @ (c * qbt).transpose(-1, -2)).reshape(g, kp, sz, cq)
            mx = lg.amax(-2, keepdim=True).detach()
            w = torch.exp(lg - mx)  # (G, Kp, s, Cq)
            z = w.sum(-2)  # (G, Kp, Cq)
            L = (mx.squeeze(-2) + torch.log(z)).transpose(1, 2)  # (G, Cq, Kp)
            wn = (w / z.unsqueeze(-2)).transpose(-1, -2)  # (G, Kp, Cq, s)
            kt = (wn @ ksp).transpose(1, 2)  # (G, Cq, Kp, D)
            vt = (wn @ vsp).transpose(1, 2)
        if not block:
            # 4. far field: log Z_b(q) ~ L_ab + c (q - q̄_a).k̃_ab, numerator ~ Z_b(q) ṽ_ab
            onehot = F.one_hot(at, cq).to(qt.dtype).transpose(1, 2).unsqueeze(-1)  # (G, Cq, B, 1)
            delta = qt.unsqueeze(1) - qbt.unsqueeze(2)  # (G, Cq, B, D)
            sf_all = L.unsqueeze(-2) + c * delta @ kt.transpose(-1, -2)  # (G, Cq, B, Kp)
            sf = torch.gather(sf_all, 1, at[:, None, :, None].expand(g, 1, bt, kp)).squeeze(1)  # (G, B, Kp)
            gate = sf
        parts_s = []
        if r > 0:
            # 5. retrieval: each query's own top-r past key clusters by its far-field estimate of
            #    log Z_b(q) (muse) or by q.mean(k_b) (block), attended exactly
            rr = min(r, kp)
            if need_plan:
                top = torch.topk(gate.detach(), rr, dim=-1)
                idx, valid = top.indices, torch.ones_like(top.indices, dtype=torch.bool)
                rets.append(F.pad(idx, (0, r - rr)))
                valids.append(F.pad(valid, (0, r - rr)))
            else:
                idx, valid = plan.retrieved[:, t, :, :rr], plan.valid[:, t, :, :rr]
            kr = ksp[gi, idx].reshape(g, bt, rr * sz, d)  # (G, B, r*s, D)
            vr = vsp[gi, idx].reshape(g, bt, rr * sz, d)
            sr = c * (kr @ qt.unsqueeze(-1)).squeeze(-1)  # (G, B, r*s)
            parts_s.append(sr.masked_fill(~valid.repeat_interleave(sz, dim=-1), ninf))
            if not block:  # ... and dropped from its far field
                drop = torch.zeros(g, bt, kp, dtype=torch.bool, device=qb.device).scatter_(-1, idx, valid)
                sf = sf.masked_fill(drop, ninf)
            cnts.append(valid.sum(-1) * sz)
        else:
            cnts.append(torch.zeros(g, bt, dtype=torch.long, device=qb.device))
        if not block:
            parts_s.append(sf)
        if not parts_s:  # block baseline without retrieval: the local block only
            outs.append(torch.zeros_like(qt))
            lses.append(torch.full_like(qt[..., 0], -1e30))
            continue
        sc = torch.cat(parts_s, -1)
        mx = sc.amax(-1, keepdim=True).detach()
        mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
        w = torch.exp(sc - mx)
        z = w.sum(-1, keepdim=True).clamp_min(1e-30)
        o_t = torch.zeros_like(qt)
        if r > 0:
            o_t = o_t + (w[..., : rr * sz].unsqueeze(-2) @ vr).squeeze(-2)
        if not block:
            wf = w[..., -kp:].unsqueeze(1) * onehot  # (G, Cq, B, Kp)
            o_t = o_t + (wf @ vt).sum(1)
        outs.append(o_t / z)
        lses.append((mx + torch.log(z)).squeeze(-1))
    if need_plan:
        z0 = torch.zeros(g, bt, r, dtype=torch.long, device=qb.device)
        plan.retrieved = torch.stack([z0] + rets, 1)  # (G, nb, B, r)
        plan.valid = torch.stack([z0.bool()] + valids, 1)
    out = torch.stack(outs, 1)
    lse = torch.stack(lses, 1)
    counts = torch.stack(cnts, 1).reshape(g, nb * bt) if r > 0 else None
    return out, lse, counts


def _far_v1(qb, kb, vb, plan: Plan, s: MuseSettings, c: float):
    """v1 far field (RECON): per past key cluster b with centroid mu_b,
    sum_j e^{c q.k_j} v_j ~ e^{c q.mu_b} (M_b + c D_b q), sum_j e^{c q.k_j} ~ |b| e^{c q.mu_b},
    M_b = sum v_j, D_b = sum v_j (k_j - mu_b)^T. Block by block (memory O(B Kc D))."""
    g, nb, bt, d = qb.shape
    ck = s.key_clusters
    sz = bt // ck
    kc = nb * ck
    ks = _gather_rows(kb, plan.perm_k).reshape(g, kc, sz, d)
    vs = _gather_rows(vb, plan.perm_k).reshape(g, kc, sz, d)
    mu = ks.mean(-2)  # (G, Kc, D)
    vbar = vs.mean(-2)
    cov = (vs.transpose(-1, -2) @ (ks - mu.unsqueeze(-2))) / sz  # (G, Kc, Dv, Dk) = D_b / |b|
    covt = cov.transpose(-1, -2)  # (G, Kc, Dk, Dv)
    outs, lses = [torch.zeros_like(qb[:, 0])], [torch.full_like(qb[:, 0, :, 0], -1e30)]
    for t in range(1, nb):
        kp = t * ck
        qt = qb[:, t]  # (G, B, D)
        sc = c * qt @ mu[:, :kp].transpose(-1, -2) + math.log(sz)  # (G, B, Kp)
        mx = sc.amax(-1, keepdim=True).detach()
        w = torch.exp(sc - mx)
        z = w.sum(-1, keepdim=True)
        p = w / z
        mono = p @ vbar[:, :kp]
        x = (p.unsqueeze(-1) * qt.unsqueeze(-2)).reshape(g, bt, kp * d)  # (G, B, Kp*Dk)
        dip = x @ covt[:, :kp].reshape(g, kp * d, d)
        outs.append(mono + c * dip)
        lses.append((mx + torch.log(z)).squeeze(-1))
    return torch.stack(outs, 1), torch.stack(lses, 1)


def sdpa(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None) -> Tensor:
    """Exact causal attention (torch SDPA; GQA handled), the reference of every error."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def attention(method: str, q: Tensor, k: Tensor, v: Tensor, settings: MuseSettings, *, scale: float | None = None):
    """(out, sparsity) of ``method`` (``sdpa`` or one of VARIANTS) on (Bz, H, N, D) tensors."""
    n = q.shape[2]
    if method == "sdpa":
        return sdpa(q, k, v, scale=scale), 0.0
    from dataclasses import replace

    out, plan = muse_attention(q, k, v, replace(settings, variant=method), scale=scale, return_plan=True)
    return out, sparsity(n, plan.exact_pairs)
