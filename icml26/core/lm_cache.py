"""The one place where our code hands a KV cache to a transformers causal LM.

transformers >= 5.3 names the cache argument of ``forward`` ``cache`` (and the output field
``.cache``); the older name ``past_key_values`` still works there but warns on every call
(a FutureWarning: removed in 5.40). transformers 5.2, which the kvpress peer venv pins, knows
only ``past_key_values``. So the caller creates the cache itself (a
:class:`transformers.DynamicCache`, filled in place by each forward; the cache API of both
releases) and passes it under the name this model's ``forward`` takes; nothing reads the
cache back from the output.
"""

from __future__ import annotations

import inspect
from functools import lru_cache


@lru_cache(maxsize=None)
def _argument_of(forward_cls: type) -> str:
    params = inspect.signature(forward_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_argument(model) -> str:
    """``"cache"`` when ``type(model).forward`` takes it (transformers >= 5.3), else
    ``"past_key_values"`` (older releases, e.g. 5.2 beside kvpress)."""
    return _argument_of(type(model))


def new_cache(model):
    """An empty :class:`transformers.DynamicCache` for ``model`` (one layer per decoder layer)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def forward(model, input_ids, cache, **kwargs):
    """``model(input_ids, use_cache=True, <cache argument>=cache, **kwargs)``: the model's output;
    ``cache`` (from :func:`new_cache`) now also holds these positions' keys and values.

    input_ids: (B, T) token ids (int64) on the model's device."""
    return model(input_ids=input_ids, use_cache=True, **{cache_argument(model): cache}, **kwargs)
