"""A press: KV-cache eviction as forward hooks on the attention layers of a transformers model.

    from icml26.methods.kvcache import KVPress
    press = KVPress(method="capkv", compression_ratio=0.5)
    with press(model):                       # hooks on every self_attn; removed on exit
        out = model.generate(input_ids, max_new_tokens=20)   # the prompt's cache is compressed

Prefill compression: after an attention layer has run on a prompt (its cache held nothing
before), the hook scores the layer's cache, keeps sinks + recent window + the top-scoring
tokens, exactly ``n_kept(T, ratio)`` per KV head, and replaces the cache tensors in place.
Keys are cached after RoPE, so kept keys keep their positions; ``model.generate`` (which
derives position ids from the attention mask) continues at the right positions. When you
call ``model(...)`` yourself on a compressed cache, pass ``position_ids`` explicitly.

Decoding-time compression (``decoding_budget_tokens > 0``): a prompt longer than budget +
``decoding_interval_tokens`` - 1 is compressed to the budget at prefill (with the prompt's own
query statistics, as prefill compression); while generating, whenever a layer's cache
reaches budget + ``decoding_interval_tokens`` it is compressed back to the budget, scored with
the queries of the last ``window_tokens`` steps. So between steps a layer holds at most
budget + interval - 1 entries, and budget + interval while a step attends (tested at every
step). ``start_decoding`` does the prefill part on a captured prefill (the harness).

Works with transformers' LLaMA-style attention (LLaMA, Mistral, Qwen2/3; the hook reads
``cache``/``past_key_values``, ``hidden_states`` and ``position_embeddings`` from the call).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Iterator

import torch

from contextlib import nullcontext as _nullcontext

from icml26.methods.kvcache import headmask as _headmask
from icml26.methods.kvcache import logdet as _logdet
from icml26.methods.kvcache import options as _options
from icml26.methods.kvcache import scoring as S
from icml26.methods.kvcache import spec as _spec


@dataclass
class KVPress(S.PressOptions):
    """Eviction policy + hooks. ``method`` is one of ``scoring.METHODS``; the scoring options
    (``sink_tokens``, ``window_tokens``, CapKV's ``question_share``, ...) are ``scoring.PressOptions``'
    fields, keyword-only."""

    method: str = "capkv"
    compression_ratio: float = 0.5  # fraction of the prompt's KV entries evicted, [0, 1)
    seed: int = 0  # random baseline
    decoding_budget_tokens: int = 0  # 0 = no decoding-time compression
    decoding_interval_tokens: int = 16
    stats: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.method not in S.METHODS:
            raise ValueError(f"unknown method {self.method!r}; valid: {', '.join(S.METHODS)}")
        _options.check_options(
            self,
            self.method,
            compression_ratio=self.compression_ratio,
            decoding_budget_tokens=self.decoding_budget_tokens,
            decoding_interval_tokens=self.decoding_interval_tokens,
        )
        self._qbuf: dict[int, torch.Tensor] = {}
        self._seen: dict[int, int] = {}
        self._left: set[int] = set()  # sliding-window layers left to the model's window (never compressed)
        self._compressed: set[int] = set()
        self._rotary = None
        self.last_keep = None
        self.reset_stats()

    # ------------------------------------------------------------------ scoring + selection
    @property
    def params(self) -> S.ScoreParams:
        names = {f.name for f in fields(S.ScoreParams)}
        return S.ScoreParams(**{k: getattr(self, k) for k in names})

    def reset_stats(self) -> None:
        self.stats = {"score_s": 0.0, "layers": 0, "kept_tokens": [], "total_tokens": []}

    @torch.no_grad()
    def select(self, x: S.LayerInputs, n_keep: int) -> torch.Tensor:
        """Indices (B, Hkv, n_keep) of the tokens to keep in this layer (uniform budgets)."""
        return self.select_masked(x, n_keep)[0]

    @torch.no_grad()
    def select_masked(self, x: S.LayerInputs, n_keep: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(indices (B, Hkv, L), keep mask (B, Hkv, L) or None when every slot is kept).

        Uniform budgets: L = n_keep, no mask. Adaptive: the layer keeps Hkv * n_keep entries in
        total, L is the largest head's count and ``keep`` marks the padding slots False."""
        t = x.keys.shape[2]
        if n_keep >= t:
            return torch.arange(t, device=x.keys.device).expand(*x.keys.shape[:2], t), None
        if self.method == "capkv-greedy":
            return self._greedy(x, n_keep), None
        params = self.params
        observed = self.method in ("capkv", "capkv-qa") and (x.hidden is not None or x.queries is not None)
        n_question = int(math.floor(self.share * n_keep)) if observed else 0
        if n_question > 0:
            # retrieval channel: its top share of the budget is kept first, the rest by the main channel
            scores, question = S.score_capkv_channels(x, params)  # (B, Hkv, T) each, one batched leverage
            scores = S.reserve_top(scores, question, n_question)
        else:
            scores = S.SCORERS[self.method](x, params)  # (B, Hkv, T)
        if observed and self.recent_mode == "adaptive":
            # per-head recent window: the continuation share of the budget goes to recency as far as the
            # head's observed attention beyond the window is concentrated on the most recent tokens
            window = min(self._window(n_keep), t)
            span = n_keep - min(self.sink_tokens, n_keep) - n_question
            extra = S.adaptive_recent(
                S.observed_attention(x, params), span, sink_tokens=self.sink_tokens, window_tokens=window
            )
            scores = S.reserve_recent(scores, extra, window)
        if self.head_budget == "adaptive":
            idx, keep = S.select_adaptive(
                scores, n_keep, sink_tokens=self.sink_tokens, window_tokens=self._window(n_keep), floor=self.head_floor
            )
            return idx, (None if bool(keep.all()) else keep)
        return S.select_indices(scores, n_keep, sink_tokens=self.sink_tokens, window_tokens=self._window(n_keep)), None

    @property
    def share(self) -> float:
        """The share of each head's budget kept by capkv-qa's retrieval channel (0 for every other method)."""
        return _options.question_share(self, self.method)

    def _window(self, n_keep: int) -> int:
        """Recent tokens always kept: ``window_tokens``, or for CapKV ``recent_share`` of the budget if more."""
        if self.method in ("capkv", "capkv-qa", "capkv-greedy"):
            return S.recent_window(n_keep, self.window_tokens, self.recent_share)
        return self.window_tokens

    def _greedy(self, x: S.LayerInputs, n_keep: int) -> torch.Tensor:
        """Exact greedy log-det selection (``logdet.greedy_logdet``) with the CapKV weights."""
        b, hkv, t, d = x.keys.shape
        p = self.params
        srcs = ("window", "future-rope") if p.query_source == "joint" else (p.query_source,)
        ws = [S.capkv_token_weights(x, p, src) for src in srcs]  # each (B, Hkv, g, T)
        if p.gqa == "pool":  # one channel per KV head (per source)
            ws = [w_.mean(2, keepdim=True) for w_ in ws]
        w = torch.cat(ws, 2).reshape(b * hkv, -1, t)  # (B*Hkv, channels, T): F sums their capacities
        u = x.values.float().reshape(b * hkv, t, d)
        rho = _logdet.ridge_of(u, w, p.ridge_ratio, relative=not p.ridge_absolute)
        sinks = min(self.sink_tokens, n_keep)
        window = max(0, min(self._window(n_keep), n_keep - sinks, t - sinks))
        pos = torch.arange(t)
        forced = (pos < sinks) | (pos >= t - window)
        picks = _logdet.greedy_logdet(u, w, n_keep - int(forced.sum()), rho, initial=forced)
        idx = torch.cat([pos[forced].expand(b * hkv, -1), picks], dim=1).view(b, hkv, n_keep)
        return idx.sort(-1).values.to(x.keys.device)

    def compress(self, x: S.LayerInputs, n_keep: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Kept (keys, values) of one layer, (B, Hkv, L, D) each; records timing.

        L = n_keep with uniform budgets; with adaptive budgets L is the largest head's count and
        the padding mask is left in ``self.last_keep`` ((B, Hkv, L) bool, None if no padding)."""
        t0 = time.perf_counter()
        with torch.no_grad():
            idx, keep = self.select_masked(x, n_keep)
            gi = idx.unsqueeze(-1).expand(-1, -1, -1, x.keys.shape[-1])
            k, v = x.keys.gather(2, gi).contiguous(), x.values.gather(2, gi).contiguous()
        self.stats["score_s"] += time.perf_counter() - t0
        self.stats["layers"] += 1
        self.stats["kept_tokens"].append(int(n_keep))
        self.stats["total_tokens"].append(int(x.keys.shape[2]))
        self.last_keep = keep
        return k, v

    # ------------------------------------------------------------------ hooks
    def _pre_hook(self, module, args, kwargs):
        """A new prompt (this layer's cache is empty): drop the padding mask of the previous one."""
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        layer = (
            cache.layers[module.layer_idx]
            if cache is not None and hasattr(cache, "layers") and module.layer_idx < len(cache.layers)
            else None
        )
        empty = layer is None or layer.keys is None or layer.keys.numel() == 0
        if empty:
            _headmask.set_layer_mask(module, None)
            self._seen[module.layer_idx] = 0  # positions this layer has seen of the new sequence
            self._left.discard(module.layer_idx)
            self._compressed.discard(module.layer_idx)
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if hidden is not None and cache is not None and hasattr(cache, "layers"):  # refused before attending
            li = module.layer_idx
            seen = self._seen.get(li, 0 if empty else int(layer.keys.shape[2]))
            self._leave(module.config, li, seen + int(hidden.shape[1]), prefill=empty)
        return None

    def _leave(self, config, li: int, positions: int, prefill: bool) -> bool:
        """Whether layer ``li`` is left to the model's own sliding window (not compressed) at
        ``positions``: refused (ValueError, naming the setting) when the model cannot run, or when
        a window becomes active on a layer already compressed (the window would not follow it)."""
        _spec.check_attention(config, positions)  # soft-capping, no full-attention layer, old transformers
        if li in self._left:
            return True
        w, layers = _spec.window_layers(config, positions)
        if li not in layers:
            return False
        if li in self._compressed and not prefill:
            raise ValueError(
                f"KV-cache eviction does not support this model's attention (sliding_window={w}): layer {li} was "
                f"compressed while its window covered the sequence and the window is active at {positions} "
                f"positions, which a compressed cache does not follow (keep the sequence within {w} positions)"
            )
        self._left.add(li)
        return True

    def _hook(self, module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None or not hasattr(cache, "layers"):
            return output
        li = module.layer_idx
        layer = cache.layers[li]
        keys, values = layer.keys, layer.values
        if keys is None or keys.numel() == 0:
            return output
        t, tq = keys.shape[2], hidden.shape[1]
        self._seen[li] = self._seen.get(li, t - tq) + tq  # positions the layer has seen
        if self._leave(module.config, li, self._seen[li], prefill=t == tq):  # the model's own sliding window
            return output
        cos, sin = kwargs["position_embeddings"]
        qout = module.__dict__.pop(_QOUT, None)
        x = S.LayerInputs(
            keys=keys,
            values=values,
            module=module,
            hidden=hidden,
            cos=cos,
            sin=sin,
            rotary=S.layer_rotary(self._rotary, module),
            layer_idx=li,
            q_proj_out=qout if qout is not None and qout.shape[1] == tq else None,
        )
        if self.decoding_budget_tokens > 0 and self.window_tokens > 0:  # keep recent queries for decoding
            with torch.no_grad():
                q = S.window_queries(x, self.window_tokens).detach()
            old = self._qbuf.get(li)
            self._qbuf[li] = q if (old is None or t == tq) else torch.cat([old, q], 2)[:, :, -self.window_tokens :]
        if t == tq:  # prefill: the cache held nothing before this call
            n = self.prefill_kept(t)
            if n < t:
                k, v = self.compress(x, n)
                layer.keys, layer.values = k, v
                _headmask.set_layer_mask(module, self.last_keep)
                self._compressed.add(li)
        elif self.decoding_budget_tokens > 0 and t > self.decoding_budget_tokens + self.decoding_interval_tokens - 1:
            # decoding: only the recent queries are known (future-rope statistics fall back to them)
            xd = S.LayerInputs(keys=keys, values=values, module=module, queries=self._qbuf[li], layer_idx=li)
            p_keep = min(self.decoding_budget_tokens, t)
            k, v = self.compress(xd, p_keep)
            layer.keys, layer.values = k, v
            self._compressed.add(li)
        return output

    def prefill_kept(self, t: int) -> int:
        """Entries per KV head a layer keeps after a prefill of ``t`` tokens: ``n_kept(t, ratio)``
        (t when ratio = 0), capped at ``decoding_budget_tokens`` when the result would reach
        budget + interval (the decoding rule applied to the prompt)."""
        n = S.n_kept(t, self.compression_ratio) if self.compression_ratio > 0 else t
        if self.decoding_budget_tokens > 0 and n > self.decoding_budget_tokens + self.decoding_interval_tokens - 1:
            n = self.decoding_budget_tokens
        return n

    @torch.no_grad()
    def start_decoding(self, captured: list, config, tokens: int | None = None) -> "object":
        """The cache the hooks would leave after the prefill that ``captured`` recorded
        (``capture_layers``): each layer compressed to ``prefill_kept(T)`` entries, and the query
        buffer of decoding-time compression filled with the prompt's last ``window_tokens``
        queries. Call inside ``with press(model):`` (entering clears the buffer), then decode on
        the returned ``DynamicCache`` with explicit ``position_ids``. Uniform budgets only.
        ``tokens``: the longest sequence the cache will see; sliding-window layers active there
        keep the model's window (``spec.window_layers``) and are never compressed."""
        from transformers import DynamicCache

        if self.head_budget == "adaptive":
            raise ValueError("start_decoding: head_budget=adaptive is prefill-only (use compress_captured)")
        cache = DynamicCache(config=config)
        for x in captured:
            t = x.keys.shape[2]
            seen = max(t, x.hidden.shape[1] if x.hidden is not None else 0)
            self._seen[x.layer_idx] = seen
            if self._leave(config, x.layer_idx, max(seen, tokens or 0), prefill=True):
                _keep_window(cache, x, seen)
                continue
            n = self.prefill_kept(t)
            if self.decoding_budget_tokens > 0 and self.window_tokens > 0:
                self._qbuf[x.layer_idx] = S.window_queries(x, self.window_tokens).detach()
            if n < t:
                k, v = self.compress(x, n)
                self._compressed.add(x.layer_idx)
            else:
                k, v = x.keys.clone(), x.values.clone()
            cache.update(k, v, x.layer_idx)
        return cache

    @contextmanager
    def __call__(self, model) -> Iterator["KVPress"]:
        """Register the hooks on every attention layer of ``model``; remove them on exit."""
        lm = model.model.language_model if hasattr(model.model, "language_model") else model.model
        self._rotary = getattr(lm, "rotary_emb", None)
        self._qbuf = {}
        self._seen = {}
        self._left, self._compressed = set(), set()
        handles = []
        try:
            with _headmask.head_masks(model) if self.head_budget == "adaptive" else _nullcontext():
                for layer in lm.layers:
                    handles.append(_save_q_proj(layer.self_attn))
                    handles.append(layer.self_attn.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
                    handles.append(layer.self_attn.register_forward_hook(self._hook, with_kwargs=True))
                try:
                    yield self
                finally:
                    _headmask.set_masks(model, None)
        finally:
            for h in handles:
                h.remove()
            self._qbuf = {}


_QOUT = "_icml26_q_proj_out"


def _save_q_proj(attn):
    """Keep the q_proj output of the attention's current call on the module, so scoring reuses
    the prefill's queries instead of recomputing them (popped by the attention hook)."""

    def hook(module, args, output):
        attn.__dict__[_QOUT] = output.detach()

    return attn.q_proj.register_forward_hook(hook)


# ---------------------------------------------------------------------- capture (for the harness)


@contextmanager
def capture_layers(model) -> Iterator[list]:
    """Record each attention layer's LayerInputs during one prefill (no compression).

    The prefill forward is the same for every policy (a layer's cache is compressed only after
    that layer has attended), so a harness can prefill once and apply many policies with
    ``compress_captured``; this gives the same cache as the hooks (tested)."""
    lm = model.model.language_model if hasattr(model.model, "language_model") else model.model
    rotary = getattr(lm, "rotary_emb", None)
    captured: list = []

    def hook(module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        layer = cache.layers[module.layer_idx]
        cos, sin = kwargs["position_embeddings"]
        qout = module.__dict__.pop(_QOUT, None)
        captured.append(
            S.LayerInputs(
                keys=layer.keys,
                values=layer.values,
                module=module,
                hidden=hidden.detach(),
                cos=cos,
                sin=sin,
                rotary=S.layer_rotary(rotary, module),
                layer_idx=module.layer_idx,
                q_proj_out=None if qout is None else qout.detach(),
            )
        )
        return output

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in lm.layers]
    handles += [_save_q_proj(layer.self_attn) for layer in lm.layers]
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def _keep_window(cache, x, positions: int) -> None:
    """Put captured layer ``x`` into ``cache`` as the model keeps it: a sliding-window layer holds
    its last window of keys and counts every position seen (transformers sizes its mask so)."""
    cache.update(x.keys.clone(), x.values.clone(), x.layer_idx)
    layer = cache.layers[x.layer_idx]
    if hasattr(layer, "cumulative_length"):
        layer.cumulative_length = positions


def compress_captured(press: KVPress, captured: list, config, tokens: int | None = None) -> "object":
    """A new DynamicCache holding ``press``'s selection of every captured layer; sliding-window
    layers active at ``tokens`` positions (default: the prefill's) keep the model's own window
    (``spec.window_layers``), uncompressed."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    masks = {}
    for x in captured:
        t = x.keys.shape[2]
        seen = max(t, x.hidden.shape[1] if x.hidden is not None else 0)
        _spec.check_attention(config, max(seen, tokens or 0))
        if x.layer_idx in _spec.window_layers(config, max(seen, tokens or 0))[1]:
            _keep_window(cache, x, seen)
            continue
        if press.compression_ratio > 0:
            k, v = press.compress(x, S.n_kept(t, press.compression_ratio))
            if getattr(press, "last_keep", None) is not None:
                masks[x.layer_idx] = press.last_keep
        else:
            k, v = x.keys.clone(), x.values.clone()
        cache.update(k, v, x.layer_idx)
    cache.icml26_keep = masks  # head-adaptive padding masks (empty for uniform budgets); see headmask.cache_masks
    return cache


def kept_per_head(cache) -> list[list[int]]:
    """Entries kept per (layer, KV head) of a cache (batch element 0): (layers x Hkv) ints.

    With uniform budgets every head of a layer holds the layer's length; with head-adaptive
    budgets the padding slots (``cache.icml26_keep``, from ``compress_captured``) are not counted,
    so a layer's row sums to Hkv * its uniform budget."""
    masks = getattr(cache, "icml26_keep", None) or {}
    out = []
    for i, l in enumerate(cache.layers):
        if l.keys is None:
            continue
        if i in masks:
            out.append([int(c) for c in masks[i][0].sum(-1).tolist()])
        else:
            out.append([int(l.keys.shape[2])] * int(l.keys.shape[1]))
    return out


def gini(values) -> float:
    """Gini coefficient of non-negative numbers (0 = all equal, -> 1 = all on one): the mean
    absolute difference over all pairs / (2 * mean). Empty or all-zero input: 0."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    total = sum(xs)
    if n == 0 or total <= 0:
        return 0.0
    # sorted form: G = sum_i (2i - n - 1) x_i / (n * sum x), i = 1..n
    return float(sum((2 * (i + 1) - n - 1) * x for i, x in enumerate(xs)) / (n * total))


def cache_bytes(cache, *, kept_only: bool = False) -> int:
    """Bytes held by the keys and values of a transformers cache (the dense, padded tensors).

    ``kept_only=True``: bytes of the kept entries only, leaving out head-adaptive padding slots
    (what a per-head variable-length layout would hold)."""
    masks = getattr(cache, "icml26_keep", None) or {}
    total = 0
    for i, l in enumerate(cache.layers):
        if l.keys is None:
            continue
        per_entry = l.keys.shape[-1] * l.keys.element_size() + l.values.shape[-1] * l.values.element_size()
        n = l.keys.shape[0] * l.keys.shape[1] * l.keys.shape[2]
        if kept_only and i in masks:
            keep = masks[i]
            n -= int((~keep).sum())
        total += n * per_entry
    return int(total)
