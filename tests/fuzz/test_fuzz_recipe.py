"""Fuzz: recipes (YAML -> Config) and ``--set key=value`` values, for every command's Config.

Any recipe text or ``--set`` value either resolves to a Config or is an InputError with one
line; never another exception (see tests/fuzz/_fuzz.py for the profiles)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math

import pytest

from tests.fuzz._fuzz import YAML_TEXT, fuzz_pair, one_line, parses_or_input_error, st, values

from icml26.core.errors import InputError
from icml26.core.recipe import build_config, load_recipe, parse_sets, read_yaml, resolve

# command -> (module, Config class); filter-data's subcommands read a section of one recipe
CONFIGS = {
    "bai": ("icml26.methods.exploration.bai", "Config"),
    "bpi": ("icml26.methods.exploration.bpi", "Config"),
    "mcts": ("icml26.methods.exploration.mcts", "Config"),
    "evict-kv": ("icml26.methods.kvcache.evaluate", "Config"),
    "train-lfm": ("icml26.methods.lfm.train", "Config"),
    "sample-lfm": ("icml26.methods.lfm.sample", "SampleConfig"),
    "probe-syntax": ("icml26.methods.probing.syntax_semantics", "Config"),
    "quantize": ("icml26.methods.quantization.fptquant", "Config"),
    "filter-data make-corpus": ("icml26.methods.filtering.corpus", "CorpusConfig"),
    "filter-data train": ("icml26.methods.filtering.classifiers", "TrainConfig"),
    "filter-data analyze": ("icml26.methods.filtering.analysis", "AnalyzeConfig"),
    "filter-data proxy": ("icml26.methods.filtering.proxy", "ProxyConfig"),
}


@functools.cache
def config_cls(cmd: str) -> type:
    mod, name = CONFIGS[cmd]
    return getattr(importlib.import_module(mod), name)


@functools.cache
def field_names(cmd: str) -> list[str]:
    return [f.name for f in dataclasses.fields(config_cls(cmd)) if f.init]


@functools.cache
def _field_strategy(cmd: str):
    return st.one_of(st.sampled_from(field_names(cmd)), st.text(max_size=6))


VALUES = values(6)
SET_VALUES = st.one_of(YAML_TEXT, st.text(max_size=20))


COMMANDS = st.sampled_from(sorted(CONFIGS))


@st.composite
def config_mappings(draw):
    """(command, {field: nasty value}) with real field names (and now and then an unknown one)."""
    cmd = draw(COMMANDS)
    return cmd, draw(st.dictionaries(_field_strategy(cmd), VALUES, max_size=4))


@st.composite
def set_items(draw):
    """(command, ["key=value", ...]) as typed on the command line."""
    cmd = draw(COMMANDS)
    item = st.one_of(
        st.tuples(_field_strategy(cmd), SET_VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
        st.text(max_size=10).filter(lambda t: t.strip() not in ("help", "list")),
    )
    return cmd, draw(st.lists(item, max_size=3))


# --- properties ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_recipe")


def _recipe_file(tmp_dir, data: bytes | str):
    p = tmp_dir / "r.yaml"
    p.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return p


def _yaml_text_prop(tmp_dir, data):
    parses_or_input_error(read_yaml, _recipe_file(tmp_dir, data), "recipe")


test_yaml_text, test_yaml_text_slow = fuzz_pair(st.one_of(YAML_TEXT, st.binary(max_size=200)))(_yaml_text_prop)


def _recipe_text_prop(tmp_dir, args):
    cmd, text = args
    p = _recipe_file(tmp_dir, text)
    if parses_or_input_error(load_recipe, p, cmd.split()[0]) is not None and not cmd.startswith("filter-data"):
        parses_or_input_error(resolve, config_cls(cmd), cmd, recipe=p)


test_recipe_text, test_recipe_text_slow = fuzz_pair(st.tuples(COMMANDS, YAML_TEXT))(_recipe_text_prop)


def _structured_prop(tmp_dir, cm, seed, as_set):
    import yaml

    cmd, mapping = cm
    if as_set:  # the same values typed as --set key=value (their YAML flow form)
        try:
            sets = [
                f"{k}={yaml.safe_dump(v, default_flow_style=True, width=10**6).strip().removesuffix('...').strip()}"
                for k, v in mapping.items()
            ]
        except (yaml.YAMLError, UnicodeError):
            return
        sets = [s for s in sets if "\n" not in s]
        parses_or_input_error(resolve, config_cls(cmd), cmd, sets=sets)
        return
    if cmd.startswith("filter-data"):  # filter-data reads config.<section>; build_config is what it calls
        parses_or_input_error(build_config, config_cls(cmd), mapping, source=f"{cmd} config")
        return
    try:
        text = yaml.safe_dump({"method": cmd, "seed": seed, "config": mapping}, allow_unicode=True)
    except (yaml.YAMLError, UnicodeError):
        return
    p = _recipe_file(tmp_dir, text)
    parses_or_input_error(resolve, config_cls(cmd), cmd, recipe=p)


def _structured(tmp_dir, args):
    _structured_prop(tmp_dir, *args)


test_recipe_structured, test_recipe_structured_slow = fuzz_pair(st.tuples(config_mappings(), values(2), st.booleans()))(
    _structured
)


def _sets_prop(args):
    cmd, sets = args
    parses_or_input_error(resolve, config_cls(cmd), cmd, sets=sets)


test_set_values, test_set_values_slow = fuzz_pair(set_items())(_sets_prop)


# --- regressions: each raised another exception (or let inf through) before ----------------
@pytest.mark.parametrize(
    "text, msg",
    [
        ("seed: 2020-99-99\n", "not valid YAML: a value cannot be read: month must be in 1..12"),  # ValueError
        ("config: {budget: !!int abc}\n", "not valid YAML: a value cannot be read: invalid literal for int()"),
        ("config: {tau: !!float x}\n", "not valid YAML: a value cannot be read: could not convert string to float"),
        ("config: {tau: !!float }\n", "not valid YAML: a value cannot be read"),  # IndexError
        ("[" * 600 + "]" * 600, "not valid YAML: nesting too deep"),  # RecursionError
        ("1: a\nb: c\n", "unknown top-level key 1; valid keys"),  # TypeError: keys of mixed types sorted
    ],
)
def test_recipe_regressions(tmp_path, text, msg):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        resolve(config_cls("bai"), "bai", recipe=p)
    assert msg in one_line(e.value)


@pytest.mark.parametrize(
    "item, msg",
    [
        ("seeds=2020-99-99", "seeds: expected an integer, got '2020-99-99'"),  # the date error as raw text
        ("algo=" + "[" * 600, "algo"),  # RecursionError
        ("delta=!!float ", "delta"),
    ],
)
def test_set_regressions(item, msg):
    with pytest.raises(InputError) as e:
        resolve(config_cls("bai"), "bai", sets=[item])
    assert msg in one_line(e.value)


def _float_fields():
    import typing

    from icml26.core.recipe import allows_nonfinite

    out = []
    for cmd in sorted(CONFIGS):
        cls = config_cls(cmd)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init and "float" in str(hints[f.name]) and not allows_nonfinite(f):
                out.append((cmd, f.name, "tuple" in str(hints[f.name])))
    return out


@pytest.mark.parametrize("cmd, name, is_tuple", _float_fields())
@pytest.mark.parametrize("value", ["inf", "-.inf", "1e400"])
def test_set_non_finite_float_is_refused_for_every_config(cmd, name, is_tuple, value):
    """No Config's float field takes inf from --set (bai's tau, evict-kv's ratios, train-lfm's
    learning rates... took it before); the Config's own check speaks first where it has one."""
    item = f"{name}=[0.5, {value}]" if is_tuple else f"{name}={value}"
    with pytest.raises(InputError) as e:
        build_config(config_cls(cmd), parse_sets([item]), source=f"{cmd} config")
    msg = one_line(e.value)  # the Config's own message ("delta must be in (0, 1), got inf") or recipe's
    assert "inf" in msg or "must be" in msg


def test_recipe_inf_overridden_by_set_is_still_refused(tmp_path):
    """A recipe value replaced by --set never reaches the Config: it is checked on its own."""
    p = tmp_path / "r.yaml"
    p.write_text("method: bai\nconfig: {tau: .inf}\n")
    with pytest.raises(InputError, match=r"bai config \(recipe .*\): tau must be a finite number, got inf"):
        resolve(config_cls("bai"), "bai", recipe=p, sets=["tau=0.5"])
    assert resolve(config_cls("bai"), "bai", sets=["tau=0.5"]).tau == 0.5


def test_non_finite_default_or_metadata_allows_inf():
    """The opt-in: a float field whose default is inf ("no limit"), or that says so."""

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        limit: float = math.inf
        scale: float = dataclasses.field(default=1.0, metadata={"nonfinite": True})
        rate: float = 0.1

    assert build_config(Cfg, {"limit": "inf", "scale": "-inf"}) == Cfg(limit=math.inf, scale=-math.inf)
    with pytest.raises(InputError, match="rate must be a finite number, got inf"):
        build_config(Cfg, {"rate": "inf"})
    with pytest.raises(InputError, match="NaN is not allowed"):
        build_config(Cfg, {"limit": "nan"})


def test_aliased_value_in_a_message_is_bounded(tmp_path):
    """A value built from YAML aliases (9 ** 8 leaves from a 300-byte file) went into the
    message whole (repr took seconds and hundreds of MB); now the repr is bounded."""
    import time

    levels = ["&l0 [" + ", ".join(["x"] * 9) + "]"] + [
        f"&l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]" for k in range(1, 8)
    ]
    p = tmp_path / "r.yaml"
    p.write_text("method: bai\nconfig:\n  seeds: [" + ", ".join(levels) + "]\n")
    t0 = time.perf_counter()
    with pytest.raises(InputError) as e:
        resolve(config_cls("bai"), "bai", recipe=p)
    assert "seeds: expected an integer, got [" in one_line(e.value) and len(str(e.value)) < 600
    assert time.perf_counter() - t0 < 2.0
