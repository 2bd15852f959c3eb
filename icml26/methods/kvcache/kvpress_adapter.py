"""Interoperability with NVIDIA kvpress (PyPI ``kvpress``, optional).

- ``as_kvpress(press)``: our policy as a ``kvpress.ScorerPress``, so it runs inside kvpress'
  own hooks and pipelines (``with as_kvpress(p)(model): ...``). Sinks and the recent window
  are encoded as top scores; kvpress' budget rule equals ours (``scoring.n_kept``).
- ``KvpressRunner(kvpress_press)``: a kvpress press applied to our captured prefill (same
  inputs kvpress' hook would see: module, hidden states, keys, values, RoPE tables), so the
  evaluation harness runs kvpress' CapPress / SnapKVPress / LeverageScorePress beside ours on
  identical inputs. ``kvpress_press(name, ratio)`` builds one by class name.

kvpress 0.5.5 pins transformers<5.3, so it lives in a venv of its own: ``make peers`` builds one
under the user cache (icml26.core.peers; see docs/evict-kv.md).
"""

from __future__ import annotations

import time

import torch

from icml26.methods.kvcache import scoring as S
from icml26.methods.kvcache import spec as _spec

INSTALL = "pip install kvpress==0.5.5 (pins transformers<5.3: use a separate venv, see docs/evict-kv.md)"


def _kvpress():
    try:
        import kvpress  # noqa: F401
    except ImportError:
        from icml26.core.errors import MissingDataError

        raise MissingDataError(f"kvpress is not installed: {INSTALL}") from None
    return kvpress


def as_kvpress(press):
    """Wrap a ``KVPress`` as a ``kvpress.ScorerPress`` (prefill compression)."""
    kvpress = _kvpress()
    from dataclasses import dataclass

    @dataclass
    class ICML26Press(kvpress.ScorerPress):
        compression_ratio: float = press.compression_ratio

        def score(self, module, hidden_states, keys, values, attentions, kwargs):
            _spec.check_attention(module.config, max(int(keys.shape[2]), int(hidden_states.shape[1])), kvpress=True)
            cos, sin = kwargs["position_embeddings"]
            x = S.LayerInputs(
                keys=keys,
                values=values,
                module=module,
                hidden=hidden_states,
                cos=cos,
                sin=sin,
                rotary=getattr(module, "rotary_emb", None),
                layer_idx=module.layer_idx,
            )
            t = keys.shape[2]
            n = S.n_kept(t, self.compression_ratio)
            idx = press.select(x, n)  # (B, H, n)
            s = torch.zeros(keys.shape[:3], dtype=torch.float32, device=keys.device)
            # kept tokens score 1, the rest 0: kvpress' top-k with the same budget is our set
            s.scatter_(-1, idx, torch.ones_like(idx, dtype=torch.float32))
            return s

    return ICML26Press()


def press_class(name: str):
    """The kvpress press class called ``name``; InputError when kvpress has none, MissingDataError
    when kvpress is not installed."""
    kvpress = _kvpress()
    cls = getattr(kvpress, name, None)
    if not (isinstance(cls, type) and name.endswith("Press")):
        from icml26.core.errors import InputError

        presses = sorted(n for n in dir(kvpress) if n.endswith("Press") and isinstance(getattr(kvpress, n), type))
        raise InputError(f"kvpress has no press {name!r}; e.g. {', '.join(presses[:8])}")
    return cls


def kvpress_press(name: str, compression_ratio: float, **kw):
    """A kvpress press by class name (``CapPress``, ``SnapKVPress``, ``LeverageScorePress``, ...)
    with its own defaults, and ``kw`` (its fields) over them. ``FinchPress`` (question-aware:
    SnapKV-style scores from the question's queries, kvpress' ``finch_press.py``) gets
    ``rerotate_keys=False``: the harness keeps the prompt's positions for every press."""
    cls = press_class(name)
    if name == "FinchPress":
        kw.setdefault("rerotate_keys", False)
    try:
        return cls(compression_ratio=compression_ratio, **kw)
    except TypeError as e:
        from icml26.core.errors import InputError

        raise InputError(f"kvpress:{name}: {e}") from None


def _positions(x: S.LayerInputs) -> int:
    """Positions the captured prefill covered (a sliding-window cache may hold fewer keys)."""
    return max(int(x.keys.shape[2]), int(x.hidden.shape[1]) if x.hidden is not None else 0)


class KvpressRunner:
    """Duck-types ``KVPress.compress`` for ``press.compress_captured`` with a kvpress press."""

    def __init__(self, kv_press, model=None, question_tokens: int = 0):
        self.press = kv_press
        self.question_tokens = int(question_tokens)
        if type(kv_press).__name__ == "FinchPress":
            if self.question_tokens < 1:
                raise ValueError(
                    "kvpress:FinchPress reads the question: it needs question_aware (the question in the prompt)"
                )
            if getattr(kv_press, "rerotate_keys", False):
                raise ValueError(
                    "kvpress:FinchPress: rerotate_keys=True moves the kept keys; the harness keeps positions"
                )
            kv_press.window_size = self.question_tokens  # what its delimiter hook would find: the question's span
        self.compression_ratio = float(getattr(kv_press, "compression_ratio", 0.0))
        self.stats = {"score_s": 0.0, "layers": 0, "kept_tokens": [], "total_tokens": []}
        self._posted = False
        self.model = model

    def compress(self, x: S.LayerInputs, n_keep: int):
        _spec.check_attention(x.module.config, _positions(x), kvpress=True)
        if x.rotary is not None and getattr(x.module, "rotary_emb", None) is None:
            x.module.rotary_emb = x.rotary  # what kvpress' context manager does
        if not self._posted and self.model is not None:
            self.press.post_init_from_model(self.model)
            self._posted = True
        t0 = time.perf_counter()
        with torch.no_grad():
            k, v = self.press.compress(
                x.module, x.hidden, x.keys, x.values, None, {"position_embeddings": (x.cos, x.sin)}
            )
        self.stats["score_s"] += time.perf_counter() - t0
        self.stats["layers"] += 1
        self.stats["kept_tokens"].append(int(k.shape[2]))
        self.stats["total_tokens"].append(int(x.keys.shape[2]))
        return k, v
