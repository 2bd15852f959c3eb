"""Config fields that explain themselves: help, unit, choices, ranges and "sized" limits.

A Config field declares what a user needs to set it, in dataclass field metadata::

    steps: int = setting(2000, "optimizer steps per run", sized=10**7)
    lr: float = setting(1e-3, "Adam learning rate", gt=0)
    mode: Literal["train", "eval"] = "train"  # what the run does

- ``help``: the meaning; when absent, the trailing ``# comment`` of the field's line in the
  class source (else the comment lines right above it) is the help.
- ``unit``: when absent, read from the name's suffix (``_s`` seconds, ``_bytes``, ``_tokens``...).
- choices: a ``Literal[...]`` annotation (``core/recipe`` refuses any other value).
- ``gt`` / ``ge`` / ``lt`` / ``le``: a range, checked on the built Config (exit 2 naming it).
- ``sized``: the largest value accepted for a setting that scales the work or the memory of a
  run (``steps``, ``epochs``, ``batch_size``...); a larger one is refused up front, naming the
  setting, before heavy imports and before any output. A Config may also define
  ``work(self) -> list[Work]`` for a cost model over several settings (steps x size), checked
  after the sized limits (a cap is the bound of one setting alone, the model that of the run).

Importing this module loads no torch (Config modules import it).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import math
import tokenize
import typing
from typing import Any, NamedTuple

from icml26.core.errors import InputError

_UNITS = (  # name suffix -> unit
    ("_s", "seconds"),
    ("_seconds", "seconds"),
    ("_ms", "milliseconds"),
    ("_bytes", "bytes"),
    ("_mb", "MB"),
    ("_gb", "GB"),
    ("_tokens", "tokens"),
    ("_ratio", "fraction"),
    ("_fraction", "fraction"),
    ("_frac", "fraction"),
    ("_bits", "bits"),
    ("_steps", "steps"),
    ("_epochs", "epochs"),
    ("_hz", "Hz"),
    ("_px", "pixels"),
    ("_deg", "degrees"),
    ("_db", "dB"),
)


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",  # noqa: A002  (the name users know from argparse / typer)
    *,
    unit: str | None = None,
    sized: float | None = None,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    nonfinite: bool = False,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its help, unit, range and size limit in its metadata."""
    meta: dict[str, Any] = {}
    for k, v in (("help", help), ("unit", unit), ("sized", sized), ("gt", gt), ("ge", ge), ("lt", lt), ("le", le)):
        if v not in (None, ""):
            meta[k] = v
    if nonfinite:
        meta["nonfinite"] = True
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class Work(NamedTuple):
    """One item of a Config's cost model (``Config.work()``): ``amount`` of ``unit`` against ``limit``;
    ``settings`` names what to lower (e.g. ``"steps or batch_size"``)."""

    amount: float
    limit: float
    unit: str
    settings: str
    detail: str = ""
    verb: str = "need"  # the message: "this run would <verb> ~<amount> <unit>"


@functools.lru_cache(maxsize=None)
def source_comments(cls: type) -> dict[str, str]:
    """``{field: comment}`` from the trailing ``# comment`` of each ``name: type = ...`` statement
    in the class body, else from the block of comment lines right above it."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    src = inspect.cleandoc("\n" + src) if src.startswith((" ", "\t")) else src
    lines = src.splitlines()
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    comment_at = {t.start[0]: t.string for t in toks if t.type == tokenize.COMMENT}
    body_indent = None
    out: dict[str, str] = {}
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for t in toks:
        if t.type != tokenize.NAME or t.string not in names or t.string in out:
            continue
        row, col = t.start
        line = lines[row - 1]
        if line[:col].strip() or not line[col + len(t.string) :].lstrip().startswith(":"):
            continue
        if body_indent is None:
            body_indent = col
        if col != body_indent:
            continue
        # the field's statement may span lines (a long default): its comment is on its last line
        end = row
        for u in toks:
            if u.start[0] >= row and u.type in (tokenize.NEWLINE,):
                end = u.start[0]
                break
        parts = [comment_at[r] for r in range(row, end + 1) if r in comment_at]
        if not parts:  # no trailing comment: the comment block right above the field
            r = row - 1
            while r >= 1 and lines[r - 1].strip().startswith("#") and r in comment_at:
                parts.insert(0, comment_at[r])
                r -= 1
        text = " ".join(p.lstrip("#").strip() for p in parts).strip()
        if text:
            out[t.string] = text
    return out


def _merged_comments(cls: type) -> dict[str, str]:
    """Comments of ``cls`` and of its dataclass bases (a subclass inherits its base's help)."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            out.update(source_comments(base))
    return out


def field_help(cls: type, f: dataclasses.Field) -> str:
    """The help of a field: its metadata ``help``, else its comment in the source, else ""."""
    return f.metadata.get("help") or _merged_comments(cls).get(f.name, "")


def field_unit(f: dataclasses.Field) -> str | None:
    if f.metadata.get("unit"):
        return f.metadata["unit"]
    for suffix, unit in _UNITS:
        if f.name.endswith(suffix) and f.name != suffix.lstrip("_"):
            return unit
    return None


def type_text(tp: Any) -> str:
    """``Literal['a', 'b']`` -> ``a|b``; ``int | None`` -> ``int|None``; ``tuple[float, ...]`` -> ``float,...``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        return "|".join(type_text(a) for a in args)
    if origin in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return f"{type_text(args[0])},..."
        return ",".join(type_text(a) for a in args) if args else "list"
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _fmt_limit(v: float) -> str:
    return f"{v:.0e}" if isinstance(v, float) or abs(v) >= 10**6 else str(v)


def range_text(f: dataclasses.Field) -> str:
    m = f.metadata
    parts = [f"{op} {m[k]}" for k, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")) if k in m]
    if "sized" in m:
        parts.append(f"<= {_fmt_limit(m['sized'])} (sized)")
    return ", ".join(parts)


def _numbers(v: Any) -> list[float]:
    if isinstance(v, bool):
        return []
    if isinstance(v, (int, float)):
        return [v]
    if isinstance(v, (tuple, list)):
        return [x for y in v for x in _numbers(y)]
    return []


def check(cfg: Any, source: str = "config") -> None:
    """The declared ranges of a built Config, its sized limits, then its ``work()`` cost model;
    InputError naming the setting(s) on the first one exceeded."""
    _check_fields(cfg, source, sized=False)
    _check_fields(cfg, source, sized=True)
    work = getattr(cfg, "work", None)
    if callable(work):
        from icml26.core.limits import check_work

        for w in work() or ():
            check_work(w.amount, w.limit, w.verb, w.unit, w.settings, detail=w.detail)


def check_sized_given(config_cls: type, values: dict, source: str = "config") -> None:
    """The sized limits of the values given, before the Config is built: a value over its limit is
    named as such, not by a cross-field check of ``__post_init__`` it also breaks (non-finite values
    are left to the Config's own checks)."""
    finite = {k: v for k, v in values.items() if all(math.isfinite(x) for x in _numbers(v))}
    _check_fields(config_cls, source, sized=True, values=finite)


def _check_fields(cfg: Any, source: str, *, sized: bool, values: dict | None = None) -> None:
    for f in dataclasses.fields(cfg):
        m = f.metadata
        if not any(k in m for k in ("gt", "ge", "lt", "le", "sized")):
            continue
        if values is not None and f.name not in values:
            continue
        for x in _numbers(values[f.name] if values is not None else getattr(cfg, f.name)):
            if sized:
                if "sized" in m and x > m["sized"]:
                    from icml26.core.limits import sci

                    raise InputError(
                        f"{source}: {f.name}={sci(x)} is over its limit {_fmt_limit(m['sized'])} (it scales the "
                        f"run's work or memory: hours of CPU or an allocation that cannot fit); lower {f.name}"
                    )
                continue
            if isinstance(x, float) and math.isnan(x):
                raise InputError(f"{source}: {f.name} is NaN")
            if "gt" in m and not x > m["gt"]:
                raise InputError(f"{source}: {f.name} must be > {m['gt']}, got {x}")
            if "ge" in m and not x >= m["ge"]:
                raise InputError(f"{source}: {f.name} must be >= {m['ge']}, got {x}")
            if "lt" in m and not x < m["lt"]:
                raise InputError(f"{source}: {f.name} must be < {m['lt']}, got {x}")
            if "le" in m and not x <= m["le"]:
                raise InputError(f"{source}: {f.name} must be <= {m['le']}, got {x}")


def sized_fields(cls: type) -> list[str]:
    """The settings of a Config declared ``sized`` (they scale the work or memory of a run)."""
    return [f.name for f in dataclasses.fields(cls) if "sized" in f.metadata]


def rows(cls: type, cfg: Any = None) -> list[dict]:
    """One row per settable field: name, type (choices), unit, effective default (``cfg``'s value
    when given: the value after the recipe, ``--set`` and any family preset), range, help."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if cfg is not None:
            d = getattr(cfg, f.name)
        elif f.default is not dataclasses.MISSING:
            d = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            d = f.default_factory()  # type: ignore[misc]
        else:
            d = "(required)"
        out.append(
            {
                "name": f.name,
                "type": type_text(hints.get(f.name, Any)),
                "unit": field_unit(f),
                "default": d,
                "range": range_text(f),
                "help": field_help(cls, f),
            }
        )
    return out


def help_text(cls: type, command: str, cfg: Any = None) -> str:
    """What ``--set help`` prints: one block per field (name, type or choices, effective default,
    then the help with its unit and range)."""
    rs = rows(cls, cfg)
    w0 = max((len(r["name"]) for r in rs), default=4)
    lines = [
        f"{command}: settings (a recipe's config: section, or --set key=value); "
        "default = the value this run would use (after the recipe, --set and any preset)"
    ]
    for r in rs:
        d = r["default"]
        d = ",".join(map(str, d)) if isinstance(d, (tuple, list)) else repr(d) if isinstance(d, str) else str(d)
        lines.append(f"  {r['name']:<{w0}}  {r['type']} = {d}")
        extra = [r["help"] or "(no description)"]
        if r["unit"]:
            extra.append(f"unit: {r['unit']}")
        if r["range"]:
            extra.append(f"range: {r['range']}")
        lines.append(f"  {'':<{w0}}    " + "; ".join(extra))
    return "\n".join(lines)
