"""Gymnasium environments as generative models for tree search (see mcts.py).

``--env`` takes a gymnasium id with keyword arguments in URL query form,
``FrozenLake-v1?map_name=8x8&is_slippery=true``; values are parsed as YAML scalars.
"""

from __future__ import annotations


def parse_kwargs(query: str, spec: str) -> dict:
    """``"a=1&b=true&c=8x8"`` -> ``{"a": 1, "b": True, "c": "8x8"}``; InputError when malformed."""
    import yaml

    from icml26.core.errors import InputError

    out: dict = {}
    for part in filter(None, (query or "").split("&")):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise InputError(f"{spec!r}: expected key=value after '?', got {part!r}")
        try:
            val = yaml.safe_load(v) if v.strip() else ""
        except yaml.YAMLError:
            val = v
        if isinstance(val, (dict, list)):
            val = v
        out[k.strip()] = val
    return out
