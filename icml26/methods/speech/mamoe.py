"""MAMoE: the modality-aware mixture of experts of MoST (Lou, Yang, You; ICML 2026, arXiv 2601.10272),
as a layer, as a patch for transformers' sparse MoE blocks, and as upcycling of a dense LLaMA.

The gate [code: NUS-HPC-AI-Lab/MoST ``MAMoEGate``, arXiv 2601.10272]: for a token with modality
mark m (0 text, 1 speech, 2 neither):
  1. s = softmax(W_g h) over all E routed experts, in fp32;
  2. the scores of experts outside the token's group are set to 0 (text / speech groups);
  3. top-k of the masked scores; the weights are the raw masked scores (not renormalized);
  4. y = sum_chosen w_e E_e(h) + Shared(h)  (the shared experts are ungated);
  5. aux: DeepSeek sequence-level load-balancing loss on the masked scores,
     f_e = count_e E / (T k), P_e = mean_t s~_e, L = alpha mean_b sum_e f_e P_e.
Tokens of neither modality (mark 2): the official code gives them an all-zero score row and reads an
uninitialized buffer (times weight 0, which can be NaN). Here the rule is defined: ``other_tokens="shared"``
sends them to the shared expert only (routed contribution exactly 0), ``"all"`` routes them over every
routed expert (required when there is no shared expert).

Upcycling (Komatsuzaki et al. 2022, Sparse Upcycling): every routed expert and the shared expert start as
copies of the dense MLP (+ Gaussian noise of std ``noise_std`` on the expert weights), router N(0, 0.02).
``upcycle_init="official"`` keeps the official gate, so at initialization y = (sum_k w + 1) MLP(x);
``"equal"`` (RECON) uses y = 1/2 Shared(x) + 1/2 sum_k w~ E(x) with w~ = w / sum_k w
(renormalized within the group), so the upcycled model equals the dense one exactly at step 0.
The patch (:func:`patch_moe_block`) applies the mask inside the gate of transformers' Mixtral / Qwen2-MoE /
OLMoE blocks and keeps each host's own semantics (top-k renormalization, sigmoid shared-expert gate).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TEXT, SPEECH, OTHER = 0, 1, 2
VARIANTS = ("mamoe", "moe", "mamoe-noshared", "dense")


# ----------------------------------------------------------------------------- marks and masks
def modality_marks(input_ids: Tensor, speech_range: tuple[int, int], other_ids: Sequence[int] = ()) -> Tensor:
    """Modality marks from token ids (as the official ``_get_modality_marks``).

    input_ids: (B, T) int. speech_range: [lo, hi) ids of the speech units and the begin/end-of-speech
    markers; other_ids: ids of tokens of neither modality (mark 2). Everything else is text (mark 0).
    Returns (B, T) int64 in {0, 1, 2}."""
    lo, hi = int(speech_range[0]), int(speech_range[1])
    if hi < lo:
        raise ValueError(f"speech_range must have lo <= hi, got {speech_range}")
    marks = torch.zeros_like(input_ids, dtype=torch.long)
    marks[(input_ids >= lo) & (input_ids < hi)] = SPEECH
    for i in other_ids:
        marks[input_ids == int(i)] = OTHER
    return marks


def group_mask(
    marks: Tensor, num_experts: int, groups: tuple[Sequence[int], Sequence[int]] | None, other_tokens: str = "shared"
) -> Tensor:
    """Which routed experts each token may reach.

    marks: (N,) in {0, 1, 2}; groups: (text expert indices, speech expert indices), or None for no
    modality routing (every token may reach every expert). other_tokens: ``shared`` (mark-2 tokens reach no
    routed expert) or ``all``. Returns (N, E) bool."""
    n = marks.shape[0]
    if groups is None:
        return torch.ones(n, num_experts, dtype=torch.bool, device=marks.device)
    table = torch.zeros(3, num_experts, dtype=torch.bool, device=marks.device)
    for m, g in ((TEXT, groups[0]), (SPEECH, groups[1])):
        idx = torch.as_tensor(list(g), dtype=torch.long, device=marks.device)
        if idx.numel() and (idx.min() < 0 or idx.max() >= num_experts):
            raise ValueError(f"expert group {list(g)} out of range for {num_experts} experts")
        table[m, idx] = True
    if other_tokens == "all":
        table[OTHER] = True
    elif other_tokens != "shared":
        raise ValueError(f"other_tokens must be 'shared' or 'all', got {other_tokens!r}")
    return table[marks.long()]


def masked_topk(scores: Tensor, allowed: Tensor, top_k: int) -> tuple[Tensor, Tensor]:
    """Steps 2-3 of the gate: zero the scores outside ``allowed``, then top-k of what is left.

    scores: (N, E) softmax scores; allowed: (N, E) bool. Returns (weights (N, k), indices (N, k)).
    Allowed experts always rank above forbidden ones; a forbidden expert is chosen only when fewer than k
    are allowed (a small group, a mark-2 row) and then gets weight exactly 0."""
    masked = scores * allowed.to(scores.dtype)
    k = min(int(top_k), scores.shape[-1])
    # ties among zeros: prefer allowed experts, so a forbidden one is never picked over an allowed one
    key = masked + torch.where(allowed, 0.0, -1.0).to(scores.dtype)
    _, idx = torch.topk(key, k, dim=-1)
    w = torch.gather(masked, -1, idx)
    ok = torch.gather(allowed, -1, idx)
    w = torch.where(ok, w, torch.zeros_like(w))
    return w, idx


def seq_aux_loss(
    masked_scores: Tensor, indices: Tensor, num_experts: int, alpha: float = 1e-3, valid: Tensor | None = None
) -> Tensor:
    """DeepSeek sequence-level load-balancing loss on the masked scores (official MAMoE).

    masked_scores: (B, T, E); indices: (B, T, k) chosen experts; valid: optional (B, T, k) bool of the
    choices that count (weight > 0). f_e = count_e E / (T k), P_e = mean_t s~_{t,e};
    L = alpha * mean_b sum_e f_e P_e. Returns a scalar tensor."""
    b, t, e = masked_scores.shape
    k = indices.shape[-1]
    one = F.one_hot(indices, num_experts).to(masked_scores.dtype)  # (B, T, k, E)
    if valid is not None:
        one = one * valid[..., None].to(one.dtype)
    f = one.sum(dim=(1, 2)) * num_experts / (t * k)  # (B, E)
    p = masked_scores.mean(dim=1)  # (B, E)
    return alpha * (f * p).sum(-1).mean()


# ----------------------------------------------------------------------------- the layer
class SwiGLU(nn.Module):
    """LLaMA MLP: down(act(gate(x)) * up(x)). x: (..., d) -> (..., d)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str = "silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        if act != "silu":
            raise ValueError(f"only the silu activation is supported, got {act!r}")

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    @classmethod
    def copy_of(cls, mlp: nn.Module, noise_std: float = 0.0, generator: torch.Generator | None = None) -> "SwiGLU":
        """A copy of a LLaMA-style MLP (gate_proj/up_proj/down_proj), plus N(0, noise_std^2) on each weight."""
        d, i = mlp.gate_proj.in_features, mlp.gate_proj.out_features
        new = cls(d, i).to(mlp.gate_proj.weight.dtype)
        with torch.no_grad():
            for n in ("gate_proj", "up_proj", "down_proj"):
                w = getattr(mlp, n).weight.detach().clone()
                if noise_std > 0:
                    w += noise_std * torch.randn(w.shape, generator=generator, dtype=w.dtype)
                getattr(new, n).weight.copy_(w)
        return new


@dataclass
class RoutingStats:
    """Routing read-outs of the last forward (detached): mass on each group by token modality."""

    text_to_speech: float = 0.0  # fraction of text tokens' chosen experts in the speech group
    speech_to_text: float = 0.0
    load: Tensor | None = None  # (E,) fraction of choices per expert


class MAMoEBlock(nn.Module):
    """The MAMoE feed-forward block (official gate), a drop-in for a decoder layer's ``mlp``.

    experts: routed SwiGLU experts (E); shared: the ungated shared expert or None; groups: (text, speech)
    expert indices, or None for a plain MoE (no modality routing); top_k; init: ``official`` (raw masked
    weights + shared) or ``equal`` (1/2 shared + 1/2 renormalized routed; without a shared expert, the
    renormalized routed sum). ``self.marks`` (B, T) must be set before the forward (see
    :func:`modality_context`); None means all text. forward: (B, T, d) -> (B, T, d); the aux loss of the
    last forward is ``self.aux_loss`` (scalar, differentiable)."""

    def __init__(
        self,
        experts: Sequence[nn.Module],
        shared: nn.Module | None,
        hidden_size: int,
        *,
        top_k: int = 1,
        groups: tuple[Sequence[int], Sequence[int]] | None = None,
        init: str = "official",
        other_tokens: str = "shared",
        aux_alpha: float = 1e-3,
        router_std: float = 0.02,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if init not in ("official", "equal"):
            raise ValueError(f"upcycle_init must be 'official' or 'equal', got {init!r}")
        if other_tokens == "shared" and shared is None and groups is not None:
            raise ValueError("other_tokens='shared' needs a shared expert; use other_tokens='all'")
        if top_k < 1 or top_k > len(experts):
            raise ValueError(f"top_k must be in [1, {len(experts)}], got {top_k}")
        self.experts = nn.ModuleList(experts)
        self.shared = shared
        self.num_experts = len(experts)
        self.top_k = int(top_k)
        self.groups = None if groups is None else (tuple(int(i) for i in groups[0]), tuple(int(i) for i in groups[1]))
        self.init = init
        self.other_tokens = other_tokens
        self.aux_alpha = float(aux_alpha)
        w = torch.empty(self.num_experts, hidden_size)
        nn.init.normal_(w, 0.0, router_std, generator=generator)
        self.router = nn.Parameter(w.to(next(iter(experts[0].parameters())).dtype))
        self.marks: Tensor | None = None
        self.aux_loss: Tensor = torch.zeros(())
        self.stats = RoutingStats()

    def route(self, h: Tensor, marks: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Steps 1-3. h: (N, d); marks: (N,). Returns (weights (N,k), indices (N,k), masked scores (N,E),
        allowed (N,E))."""
        s = torch.softmax(F.linear(h.float(), self.router.float()), dim=-1)  # 1. (N, E) fp32
        allowed = group_mask(marks, self.num_experts, self.groups, self.other_tokens)
        if self.groups is None and self.shared is not None and self.other_tokens == "shared":
            allowed = allowed & (marks != OTHER)[:, None]
        w, idx = masked_topk(s, allowed, self.top_k)  # 2-3.
        return w, idx, s * allowed.to(s.dtype), allowed

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = x.reshape(-1, d)  # (N, d)
        marks = (
            torch.zeros(b * t, dtype=torch.long, device=x.device)
            if self.marks is None
            else self.marks.reshape(-1).to(x.device)
        )
        if marks.shape[0] != b * t:
            raise ValueError(f"modality marks hold {marks.shape[0]} tokens, the input {b * t}")
        w, idx, ms, _ = self.route(h, marks)
        if self.init == "equal":
            tot = w.sum(-1, keepdim=True)
            w = torch.where(tot > 0, w / tot.clamp_min(1e-30), w)
        # 4. routed experts, each on the tokens that chose it
        y = torch.zeros_like(h)
        for e in range(self.num_experts):
            tok, pos = torch.where((idx == e) & (w > 0))
            if tok.numel() == 0:
                continue
            y.index_add_(0, tok, self.experts[e](h[tok]) * w[tok, pos, None].to(h.dtype))
        if self.shared is not None:
            sh = self.shared(h)
            if self.init == "equal":
                routed_any = (w > 0).any(-1, keepdim=True)  # tokens with no routed expert get Shared(h) whole
                y = torch.where(routed_any, 0.5 * y + 0.5 * sh, sh)
            else:
                y = y + sh
        # 5. aux loss on the masked scores, per sequence
        self.aux_loss = seq_aux_loss(
            ms.reshape(b, t, -1),
            idx.reshape(b, t, -1),
            self.num_experts,
            self.aux_alpha,
            valid=(w > 0).reshape(b, t, -1),
        )
        self._record_stats(idx.detach(), (w > 0).detach(), marks)
        return y.reshape(b, t, d)

    def _record_stats(self, idx: Tensor, used: Tensor, marks: Tensor) -> None:
        speech_set = torch.zeros(self.num_experts, dtype=torch.bool, device=idx.device)
        if self.groups is not None:
            speech_set[list(self.groups[1])] = True
        else:  # plain MoE: the same index split as MAMoE's groups, for comparable read-outs
            speech_set[self.num_experts // 2 :] = True
        in_speech = speech_set[idx] & used  # (N, k)
        in_text = (~speech_set[idx]) & used

        def frac(m: int, num: Tensor) -> float:
            sel = marks == m
            tot = used[sel].sum().item()
            return float(num[sel].sum().item() / tot) if tot else 0.0

        load = torch.bincount(idx[used], minlength=self.num_experts).float()
        self.stats = RoutingStats(frac(TEXT, in_speech), frac(SPEECH, in_text), load / load.sum().clamp_min(1))


# ----------------------------------------------------------------------------- upcycling a dense LLaMA
def moe_layers(num_layers: int, every: int = 2) -> list[int]:
    """Layers made MoE: every ``every``-th one, starting at layer 1 (1, 3, 5, ...), as the notes' recipe."""
    if every < 1:
        raise ValueError(f"moe_every must be >= 1, got {every}")
    return [i for i in range(num_layers) if (i + 1) % every == 0] if every > 1 else list(range(num_layers))


def upcycle_llama(
    model: nn.Module,
    *,
    variant: str = "mamoe",
    layers: Sequence[int] | None = None,
    num_text_experts: int = 2,
    num_speech_experts: int = 2,
    top_k: int = 1,
    upcycle_init: str = "official",
    noise_std: float = 1e-3,
    aux_alpha: float = 1e-3,
    seed: int = 0,
) -> list[int]:
    """Replace the ``mlp`` of the given decoder layers of a LLaMA-style transformers model in place.

    variant: ``mamoe`` (modality groups + shared expert), ``moe`` (no modality routing, shared expert),
    ``mamoe-noshared`` (groups, no shared expert, top_k + 1 routed so the active parameters are equal),
    ``dense`` (the MLP widened to twice its intermediate size, [W; W] with the down projection halved: exactly
    the dense model at init, the active parameter count of top-1 + shared). Returns the layer indices
    changed. Raises ValueError for an unknown variant / init."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    dec = model.model.layers
    layers = moe_layers(len(dec)) if layers is None else list(layers)
    g = torch.Generator().manual_seed(int(seed))
    n_exp = num_text_experts + num_speech_experts
    groups = (tuple(range(num_text_experts)), tuple(range(num_text_experts, n_exp)))
    for li in layers:
        mlp = dec[li].mlp
        d = mlp.gate_proj.in_features
        if variant == "dense":
            dec[li].mlp = widen_mlp(mlp, 2)
            continue
        experts = [SwiGLU.copy_of(mlp, noise_std, g) for _ in range(n_exp)]
        shared = None if variant == "mamoe-noshared" else SwiGLU.copy_of(mlp, 0.0)
        k = top_k + 1 if variant == "mamoe-noshared" else top_k
        dec[li].mlp = MAMoEBlock(
            experts,
            shared,
            d,
            top_k=k,
            groups=None if variant == "moe" else groups,
            init=upcycle_init,
            other_tokens="all" if shared is None else "shared",
            aux_alpha=aux_alpha,
            generator=g,
        )
    return layers


def widen_mlp(mlp: nn.Module, factor: int = 2) -> SwiGLU:
    """A SwiGLU with ``factor`` x the intermediate size equal to ``mlp``: gate/up stacked ``factor`` times,
    down concatenated and divided by ``factor``."""
    d, i = mlp.gate_proj.in_features, mlp.gate_proj.out_features
    new = SwiGLU(d, i * factor).to(mlp.gate_proj.weight.dtype)
    with torch.no_grad():
        new.gate_proj.weight.copy_(mlp.gate_proj.weight.repeat(factor, 1))
        new.up_proj.weight.copy_(mlp.up_proj.weight.repeat(factor, 1))
        new.down_proj.weight.copy_(mlp.down_proj.weight.repeat(1, factor) / factor)
    return new


def mamoe_blocks(model: nn.Module) -> list[MAMoEBlock]:
    return [m for m in model.modules() if isinstance(m, MAMoEBlock)]


@contextmanager
def modality_context(model: nn.Module, marks: Tensor | None):
    """Give every MAMoE block (and patched host gate) of ``model`` the marks (B, T) for the forwards inside."""
    mods = [m for m in model.modules() if isinstance(m, MAMoEBlock) or hasattr(m, "_mamoe_patch")]
    old = [m.marks if isinstance(m, MAMoEBlock) else m._mamoe_patch["marks"] for m in mods]
    for m in mods:
        if isinstance(m, MAMoEBlock):
            m.marks = marks
        else:
            m._mamoe_patch["marks"] = marks
    try:
        yield
    finally:
        for m, o in zip(mods, old):
            if isinstance(m, MAMoEBlock):
                m.marks = o
            else:
                m._mamoe_patch["marks"] = o


def aux_loss(model: nn.Module) -> Tensor:
    """Sum of the MAMoE blocks' aux losses of the last forward (0 without blocks)."""
    bl = mamoe_blocks(model)
    return sum((b.aux_loss for b in bl), torch.zeros(())) if bl else torch.zeros(())


def param_counts(model: nn.Module) -> tuple[int, int]:
    """(active, total) parameters: a routed expert counts as active top_k / E of the time (k experts per token)."""
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for b in mamoe_blocks(model):
        per = sum(p.numel() for p in b.experts[0].parameters())
        inactive += per * (b.num_experts - b.top_k)
    return total - inactive, total


# ----------------------------------------------------------------------------- patching transformers MoE blocks
HOSTS = ("MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock", "OlmoeSparseMoeBlock")


def _renormalizes(block: nn.Module) -> bool:
    name = type(block).__name__
    if name.startswith("Mixtral"):
        return True
    return bool(getattr(block.gate, "norm_topk_prob", False))


def patch_moe_block(
    block: nn.Module, groups: tuple[Sequence[int], Sequence[int]], other_tokens: str = "all"
) -> nn.Module:
    """Apply the MAMoE modality mask inside the gate of a transformers sparse MoE block, in place.

    block: a ``MixtralSparseMoeBlock`` / ``Qwen2MoeSparseMoeBlock`` / ``OlmoeSparseMoeBlock`` (transformers 5);
    groups: (text experts, speech experts). The gate becomes: softmax (fp32) -> mask -> top-k -> the host's own
    renormalization (Mixtral always; Qwen2-MoE / OLMoE when ``norm_topk_prob``); the host's shared expert and its
    sigmoid gate are untouched. Marks come from :func:`modality_context` (None: all text). The router logits
    returned (for the host's own load-balancing loss) are the unmasked ones. ``other_tokens``: ``all`` (mark-2
    tokens use every expert) or ``shared`` (their routed weights are 0: only the host's shared expert, if any).
    Returns the block. Raises TypeError for another block type."""
    if type(block).__name__ not in HOSTS:
        raise TypeError(f"patch_moe_block: {type(block).__name__} is not one of {', '.join(HOSTS)}")
    gate = block.gate
    e = gate.num_experts
    renorm = _renormalizes(block)
    gate._mamoe_patch = {"marks": None, "groups": groups, "other": other_tokens}

    def forward(hidden_states: Tensor):
        h = hidden_states.reshape(-1, gate.hidden_dim)
        logits = F.linear(h, gate.weight)  # (N, E)
        probs = torch.softmax(logits.float(), dim=-1)
        marks = gate._mamoe_patch["marks"]
        marks = (
            torch.zeros(h.shape[0], dtype=torch.long, device=h.device)
            if marks is None
            else marks.reshape(-1).to(h.device)
        )
        allowed = group_mask(marks, e, gate._mamoe_patch["groups"], gate._mamoe_patch["other"])
        w, idx = masked_topk(probs, allowed, gate.top_k)
        if renorm:
            tot = w.sum(-1, keepdim=True)
            w = torch.where(tot > 0, w / tot.clamp_min(1e-30), w)
        return logits, w.to(logits.dtype), idx

    gate.forward = forward
    return block


def patch_model(model: nn.Module, groups: tuple[Sequence[int], Sequence[int]], other_tokens: str = "all") -> int:
    """Patch every supported sparse MoE block of ``model``; returns how many."""
    n = 0
    for m in model.modules():
        if type(m).__name__ in HOSTS:
            patch_moe_block(m, groups, other_tokens)
            n += 1
    return n
