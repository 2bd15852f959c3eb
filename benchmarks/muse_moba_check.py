"""Independent check of the MuSe vs MoBA comparison (docs/muse.md): counts the exact keys per query
of ``muse`` and ``block`` from the plan and recomputes MoBA in its official form (Lu et al. 2025,
arXiv 2502.13189; MoonshotAI/MoBA ``moba_naive``: chunks of C tokens, gate q.mean(k_chunk), the
query's own chunk forced into its top-k, future chunks masked) on SmolLM2 layer-2 q/k/v.
Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/muse_moba_check.py (about 3 CPU-minutes)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import muse as BM  # noqa: E402  (benchmarks/muse.py: the bench's q/k/v)

from icml26.methods.attention import muse as M  # noqa: E402
from icml26.ops import muse as K  # noqa: E402
from icml26.ops._ref import muse as R  # noqa: E402


def rse(o, e):
    return ((o.double() - e.double()) ** 2).sum().item() / (e.double() ** 2).sum().item()


def moba(q, k, v, scale, chunk, topk):
    """MoBA attention (batch 1): returns out (1, H, N, D) and exact pairs per head."""
    _, h, n, d = q.shape
    k, v = (x.repeat_interleave(h // k.shape[1], 1) for x in (k, v))
    nc = -(-n // chunk)
    out, pairs = torch.empty_like(q), 0
    pos = torch.arange(n)
    chunk_of = pos // chunk
    cc = torch.arange(nc)[None]
    for i in range(h):
        qh, kh, vh = q[0, i], k[0, i], v[0, i]
        kmean = torch.stack([kh[c * chunk : (c + 1) * chunk].mean(0) for c in range(nc)])
        gate = (qh @ kmean.T).masked_fill(cc > chunk_of[:, None], float("-inf"))
        gate = gate.masked_fill(cc == chunk_of[:, None], float("inf"))
        top = gate.topk(min(topk, nc), -1)
        sel = torch.zeros(n, nc, dtype=torch.bool).scatter_(1, top.indices, top.values > float("-inf"))
        mask = sel[:, chunk_of] & (pos[None] <= pos[:, None])
        pairs += mask.sum().item()
        out[0, i] = torch.softmax((qh @ kh.T * scale).masked_fill(~mask, float("-inf")), -1) @ vh
    return out, pairs / h


def main():
    torch.set_num_threads(1)
    lm: dict = {}
    for n in (4096, 8192):
        q, k, v, scale = BM._real_qkv(lm, n, 2)
        rep = q.shape[1] // k.shape[1]
        ex = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True, scale=scale
        )
        causal = n * (n + 1) / 2
        for var in ("muse", "block"):
            s = M.MuseSettings(variant=var)
            o, plan = R.muse_attention(q, k, v, s, scale=scale, return_plan=True)
            ret = plan.valid.sum(-1).double() * (s.block_tokens // s.key_clusters)  # (G, nb, B)
            cnt = (ret + torch.arange(1, s.block_tokens + 1).double()).reshape(ret.shape[0], -1)[:, :n]
            print(
                f"N={n} {var}: rse {rse(o, ex):.4f} (kernel {rse(K.attention(q, k, v, s, scale=scale), ex):.4f}), "
                f"keys/query {cnt.mean():.1f}, sparsity counted {1 - cnt.sum(1).mean().item() / causal:.4f}, "
                f"formula {R.sparsity(n, R.exact_pairs_shape(n, s)):.4f}",
                flush=True,
            )
        for chunk, tk in ((512, 3), (512, 2), (256, 3), (128, 5), (64, 10)):
            o, p = moba(q, k, v, scale, chunk, tk)
            print(
                f"N={n} MoBA C={chunk} top-{tk}: rse {rse(o, ex):.4f}, sparsity {1 - p / causal:.4f}, "
                f"keys/query {p / n:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
