"""Recipes: YAML files -> frozen Config dataclasses, strictly.

A recipe is::

    method: bai                 # must equal the subcommand
    description: "..."          # optional
    seed: 0                     # optional
    config:                     # exactly fields of the method's Config
      budget: 2000

Precedence: Config defaults < recipe < ``--set key=value`` < typed command options.
Unknown keys, wrong types and values that the Config rejects raise ``InputError`` (exit 2)
with the list of valid keys. YAML is read with safe_load semantics only (``read_yaml``).
Floats: NaN is never taken; ``inf``/``-inf`` (``.inf``, ``1e400``) only by a field that
allows it (``allows_nonfinite``: ``field(metadata={"nonfinite": True})`` or an infinite
default); every other float field refuses it, also where its Config does not check.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Sequence

from icml26.core.errors import InputError

_TOP_KEYS = ("method", "description", "seed", "config")


_LOADER = None


def _safe_loader() -> type:
    """``yaml.SafeLoader`` (safe_load semantics) that also reads ``1e-2``, ``1E5``,
    ``-3e+4`` as floats (YAML 1.2; YAML 1.1 wants a dot) and refuses duplicate keys."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.constructor import ConstructorError

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        dup = key in seen
                        seen.add(key)
                    except TypeError:  # unhashable key: left to the base class
                        continue
                    if dup:
                        raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    # add_implicit_resolver copies the inherited table first: SafeLoader itself is untouched
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    _LOADER = Loader
    return Loader


def parse_yaml_text(text: str) -> Any:
    """``yaml.safe_load`` with the loader of :func:`read_yaml`; ``yaml.YAMLError`` on bad text,
    including what PyYAML's constructors raise as other exceptions (``2020-13-45`` read as a
    date, ``!!int abc``: ValueError; an empty ``!!float``: IndexError) and nesting deeper
    than Python's recursion limit."""
    import yaml

    loader = _safe_loader()(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError:
        raise
    except RecursionError:
        raise yaml.YAMLError("nesting too deep") from None
    except Exception as e:  # noqa: BLE001  (a constructor's error on the user's text: ValueError, IndexError, ...)
        err = yaml.YAMLError(f"a value cannot be read: {' '.join(str(e).split())[:200]}")
        err.problem = err.args[0]  # type: ignore[attr-defined]
        raise err from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path, what: str = "file") -> Any:
    """Parse a YAML file (safe_load semantics, ``1e-2`` is a float, duplicate keys refused);
    InputError on a missing or malformed file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} {str(path)!r} does not exist or is not a file")
    try:
        return parse_yaml_text(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # one line
        raise InputError(f"{what} {str(path)!r}: not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {str(path)!r}: not a UTF-8 text file") from None


def shipped_recipes() -> Path | None:
    """The recipes that ship with the package (``icml26/recipes``; in a source checkout the
    repository's ``recipes/``), or None."""
    pkg = Path(__file__).resolve().parents[1]
    for d in (pkg / "recipes", pkg.parent / "recipes"):
        if d.is_dir():
            return d
    return None


def shipped_path(path: str | Path) -> Path:
    """``path`` itself when it exists, else the shipped copy of a repository path
    ``recipes/<...>`` (so ``-r recipes/quantize/smollm2.yaml`` and env files named that way work
    from any folder after ``pip install``), else ``path`` unchanged."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    root = shipped_recipes()
    parts = p.parts
    if root is not None and len(parts) >= 2 and parts[0] == "recipes" and (root.joinpath(*parts[1:])).exists():
        return root.joinpath(*parts[1:])
    return p


def recipe_path(recipe: str | Path, command: str) -> Path:
    """Where recipe ``recipe`` of ``command`` is: a file path, a repository path
    (``recipes/<command>/<name>.yaml``), or a shipped recipe by name (``-r tiny``,
    ``-r smollm2.yaml``). InputError naming the shipped recipes when none matches."""
    p = shipped_path(recipe)
    if p.is_file():
        return p
    name = str(recipe)
    root = shipped_recipes()
    if root is not None and "/" not in name and "\\" not in name:
        cand = root / command / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
        if cand.is_file():
            return cand
        names = sorted(q.stem for q in (root / command).glob("*.yaml")) if (root / command).is_dir() else []
        if names:
            raise InputError(
                f"recipe {name!r}: no such file, and {command} ships no recipe of that name; "
                f"shipped: {', '.join(names)}"
            )
    return p


def load_recipe(path: str | Path, command: str) -> tuple[dict, int | None]:
    """Return (config mapping, seed or None) from a recipe for ``command``: a YAML file, or a
    shipped recipe by name (``-r tiny``; see :func:`recipe_path`)."""
    path = recipe_path(path, command)
    data = read_yaml(path, "recipe")
    if not isinstance(data, dict):
        raise InputError(f"recipe {str(path)!r}: expected a mapping with keys {', '.join(_TOP_KEYS)}")
    unknown = sorted(set(data) - set(_TOP_KEYS), key=str)  # keys of mixed types (1, "a") sort by text
    if unknown:
        raise InputError(
            f"recipe {str(path)!r}: unknown top-level key {unknown[0]!r}; valid keys: {', '.join(_TOP_KEYS)}"
        )
    method = data.get("method")
    if method is not None and method != command:
        raise InputError(f"recipe {str(path)!r} is for {method!r}, not for {command!r}")
    cfg = data.get("config") or {}
    if not isinstance(cfg, dict):
        raise InputError(f"recipe {str(path)!r}: 'config' must be a mapping")
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise InputError(f"recipe {str(path)!r}: 'seed' must be a non-negative integer, got {seed!r}")
    return cfg, seed


def parse_sets(sets: Sequence[str] | None) -> dict:
    """``["a=1", "b=[1, 2]"]`` -> ``{"a": 1, "b": [1, 2]}`` (values parsed as YAML scalars/lists)."""
    import yaml

    out: dict = {}
    for item in sets or ():
        if "=" not in item:
            raise InputError(f"--set {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise InputError(f"--set {item!r}: empty key")
        try:
            out[key] = parse_yaml_text(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key] = raw
    return out


def parse_choices(spec: str, valid: Sequence[str], what: str = "algo") -> list[str]:
    """ "all" or a comma list of ``valid`` names -> list (repeats dropped, first order kept);
    ValueError on an empty spec, an empty item ("uct,") or an unknown name."""
    names = [s.strip() for s in str(spec).split(",")]
    if names == ["all"]:
        return list(valid)
    if any(not n for n in names):
        raise ValueError(f"{what} {str(spec)!r}: empty name; give all or a comma list of {', '.join(valid)}")
    for n in names:
        if n not in valid:
            raise ValueError(f"{what} {n!r} is not one of all, {', '.join(valid)}")
    return list(dict.fromkeys(names))


def _short(value: Any) -> str:
    """``repr`` bounded in depth and length: a YAML value built from aliases (``*a`` nine
    times, nine levels deep) has a repr of 9**9 items, and a message must stay a line."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, 6, 6, 6, 6
    r.maxstring, r.maxother, r.maxlong = 80, 80, 40
    return r.repr(value)


def _coerce(name: str, value: Any, tp: Any) -> Any:
    """Coerce a YAML value to the annotated field type, or raise InputError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(name, value, args)
    if origin is typing.Literal:
        if value in args:
            return value
        raise InputError(f"{name}: {_short(value)} is not one of {', '.join(map(repr, args))}")
    if origin in (tuple, list):
        return _coerce_seq(name, value, origin, args)
    if tp is bool:
        return _coerce_bool(name, value)
    if tp is int:
        return _coerce_int(name, value)
    if tp is float:
        return _coerce_float(name, value)
    if tp is str:
        if isinstance(value, (dict, list)):
            raise InputError(f"{name}: expected a string, got {_short(value)}")
        return str(value)
    return value


def _coerce_union(name: str, value: Any, args: tuple) -> Any:
    """``X | Y | None``: None when allowed, else the first member type that takes the value."""
    if value is None and type(None) in args:
        return None
    errs = []
    for a in args:
        if a is type(None):
            continue
        try:
            return _coerce(name, value, a)
        except InputError as e:
            errs.append(str(e))
    raise InputError(errs[0] if errs else f"{name}: invalid value {_short(value)}")


def _coerce_seq(name: str, value: Any, origin: Any, args: tuple) -> Any:
    """``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``: a scalar is read as a one-item list."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{name}: expected a list, got {_short(value)}")
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_coerce(name, v, args[0]) for v in value)
    if origin is tuple and args:
        if len(args) != len(value):
            raise InputError(f"{name}: expected {len(args)} values, got {len(value)}")
        return tuple(_coerce(name, v, a) for v, a in zip(value, args))
    inner = args[0] if args else Any
    seq = [_coerce(name, v, inner) for v in value]
    return tuple(seq) if origin is tuple else seq


def _coerce_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise InputError(f"{name}: expected true/false, got {_short(value)}")


def _coerce_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InputError(f"{name}: expected an integer, got {_short(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise InputError(f"{name}: expected an integer, got {_short(value)}")


def _coerce_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InputError(f"{name}: expected a number, got {_short(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
        raise InputError(f"{name}: expected a number (within float range), got {_short(value)}") from None
    if math.isnan(v):
        raise InputError(f"{name}: NaN is not allowed")
    return v


def _takes_float(tp: Any) -> bool:
    """Whether an annotation is float or holds one (``float | None``, ``tuple[float, ...]``)."""
    return tp is float or any(_takes_float(a) for a in typing.get_args(tp))


def allows_nonfinite(f: dataclasses.Field) -> bool:
    """Whether a float field of a Config takes ``inf``/``-inf`` from a recipe or ``--set``:
    only when it says so, with ``field(metadata={"nonfinite": True})`` or a non-finite
    default (``math.inf`` read as "no limit"). NaN is never taken (see ``_coerce``)."""
    if f.metadata.get("nonfinite"):
        return True
    d = f.default
    return isinstance(d, float) and not math.isfinite(d)


def _first_nonfinite(value: Any) -> float | None:
    """The first infinite float in a coerced value (tuples and lists are walked), else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, (tuple, list)):
        for v in value:
            x = _first_nonfinite(v)
            if x is not None:
                return x
    return None


def _nonfinite_checker(config_cls: type):
    """``check(key, coerced value) -> message or None`` for the float fields that refuse inf."""
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    hints = typing.get_type_hints(config_cls)
    refuse = {k for k, f in fields.items() if _takes_float(hints.get(k, Any)) and not allows_nonfinite(f)}

    def check(key: str, value: Any) -> str | None:
        if key not in refuse:
            return None
        x = _first_nonfinite(value)
        return None if x is None else f"{key} must be a finite number, got {x}"

    return check


def build_config(config_cls: type, values: dict, source: str = "config") -> Any:
    """Instantiate a frozen dataclass from a mapping, strictly.

    Unknown key -> InputError listing valid keys. ValueError/TypeError raised by the
    dataclass' own validation (``__post_init__``) -> InputError with its message.
    An infinite value for a float field that does not allow it (``allows_nonfinite``)
    -> InputError ``"<field> must be a finite number, got inf"``; the Config's own
    validation speaks first (its message when it refuses the value itself)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    hints = typing.get_type_hints(config_cls)
    check = _nonfinite_checker(config_cls)
    kwargs = {}
    nonfinite = None
    for key, value in values.items():
        k = str(key).replace("-", "_")
        if k not in fields:
            raise InputError(f"{source}: unknown key {key!r}; valid keys: {', '.join(sorted(fields))}")
        kwargs[k] = _coerce(k, value, hints.get(k, Any))
        nonfinite = nonfinite or check(k, kwargs[k])
    from icml26.core import settings

    settings.check_sized_given(config_cls, kwargs, source)  # a sized limit before any cross-field check
    try:
        cfg = config_cls(**kwargs)
    except InputError:
        raise
    except (ValueError, TypeError) as e:
        raise InputError(f"{source}: {e}") from None
    except Exception:  # noqa: BLE001  (e.g. OverflowError: int(inf) in a check) -- only when inf came in
        if nonfinite is None:
            raise
    if nonfinite is not None:
        raise InputError(f"{source}: {nonfinite}")
    settings.check(cfg, source)  # declared ranges, sized limits and the Config's work() model
    return cfg


def wants_help(sets: Sequence[str] | None) -> bool:
    """Whether ``--set help`` (or ``--set list``) was given."""
    return any(str(s).strip() in ("help", "list") for s in sets or ())


def settings_help(config_cls: type, command: str, sets: Sequence[str] | None, cfg: Any = None) -> None:
    """``--set help`` (or ``--set list``): print every field a recipe or ``--set`` can change (type
    or choices, the effective default: ``cfg``'s value when given, the help, unit and range) on
    stdout, then exit 0 (``typer.Exit``)."""
    if not wants_help(sets):
        return
    import typer

    from icml26.core.settings import help_text

    typer.echo(help_text(config_cls, command, cfg))
    raise typer.Exit(0)


def _effective(config_cls: type, values: dict) -> Any:
    """The Config built from the values given so far (presets applied), or None when they do not build."""
    try:
        return build_config(config_cls, values)
    except (InputError, ValueError, TypeError):
        try:
            return config_cls()
        except Exception:  # noqa: BLE001  (a Config with required fields)
            return None


def recipe_section(recipe: str | Path, command: str, section: str | None, sections: Sequence[str] = ()) -> dict:
    """A recipe's config mapping; with ``section``, the mapping under ``config.<section>`` of a
    recipe that holds one per subcommand (``sections``: the valid ones; others are refused)."""
    cfg, _ = load_recipe(recipe, command)
    if section is None:
        return cfg
    unknown = sorted(set(map(str, cfg)) - set(sections))
    if unknown:
        raise InputError(
            f"recipe {str(recipe)!r}: unknown key {unknown[0]!r} under config; valid keys: {', '.join(sections)} "
            "(one mapping per subcommand)"
        )
    sec = cfg.get(section) or {}
    if not isinstance(sec, dict):
        raise InputError(f"recipe {str(recipe)!r}: config.{section} must be a mapping")
    return sec


def resolve(
    config_cls: type,
    command: str,
    recipe: str | Path | None = None,
    sets: Sequence[str] | None = None,
    *,
    section: str | None = None,
    sections: Sequence[str] = (),
    **typed: Any,
) -> Any:
    """Config defaults < recipe < ``--set`` < typed options (those that are not None).

    Every recipe and ``--set`` value is type-checked even when a later layer overrides it,
    so a bad value is always an error (exit 2), never silently dropped. ``--set help`` lists
    the fields with the defaults this run would use (after the recipe, the other ``--set`` and
    the typed options) and exits (``settings_help``)."""
    what = f"{command} {section}" if section else command
    if wants_help(sets):
        values = {}
        if recipe is not None:
            values.update(recipe_section(recipe, command, section, sections))
        values.update(parse_sets([s for s in sets or () if str(s).strip() not in ("help", "list")]))
        values.update({k: v for k, v in typed.items() if v is not None})
        settings_help(config_cls, what, sets, _effective(config_cls, values))
    values = {}
    hints = typing.get_type_hints(config_cls)
    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    layers = []
    if recipe is not None:
        cfg = recipe_section(recipe, command, section, sections)
        layers.append((f"recipe {str(recipe)!r}", {str(k).replace("-", "_"): v for k, v in cfg.items()}))
    layers.append(("--set", parse_sets(sets)))
    check = _nonfinite_checker(config_cls)
    given = {k for k, v in typed.items() if v is not None}
    for i, (where, layer) in enumerate(layers):
        later = given.union(*(set(lay) for _, lay in layers[i + 1 :]))
        for k, v in layer.items():
            if k in fields:  # unknown keys: build_config names them with the valid ones
                try:
                    c = _coerce(k, v, hints.get(k, Any))
                except InputError as e:
                    raise InputError(f"{what} config ({where}): {e}") from None
                msg = check(k, c) if k in later else None  # a value the Config never sees
                if msg:
                    raise InputError(f"{what} config ({where}): {msg}")
        values.update(layer)
    values.update({k: v for k, v in typed.items() if v is not None})
    return build_config(config_cls, values, source=f"{what} config")


def recipe_seed(recipe: str | Path | None, command: str, default: int | None) -> int | None:
    """Seed from a recipe when the command line gave none."""
    if default is not None or recipe is None:
        return default
    return load_recipe(recipe, command)[1]


def config_dict(cfg: Any) -> dict:
    """A JSON/YAML-ready dict of a Config (tuples -> lists)."""

    def conv(v):
        if isinstance(v, tuple):
            return [conv(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        return v

    return {k: conv(v) for k, v in dataclasses.asdict(cfg).items()}
