"""Core infrastructure: recipes, output, errors, stats, sampler."""

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from icml26.core.errors import InputError
from icml26.core.output import atomic_write_text, prepare_out_dir, to_json
from icml26.core.recipe import build_config, load_recipe, parse_sets, resolve
from icml26.core.stats import wilson_interval


@dataclass(frozen=True)
class Cfg:
    a: int = 1
    b: float = 0.5
    name: str = "x"
    xs: tuple[int, ...] = ()
    opt: Optional[float] = None
    flag: bool = False

    def __post_init__(self):
        if self.b < 0:
            raise ValueError(f"b must be >= 0, got {self.b}")


def test_resolve_precedence(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("method: t\nseed: 3\nconfig:\n  a: 2\n  b: 0.25\n  xs: [1, 2]\n")
    cfg = resolve(Cfg, "t", r, ["b=0.75", "name=hello"], a=None, flag=True)
    assert (cfg.a, cfg.b, cfg.name, cfg.xs, cfg.flag) == (2, 0.75, "hello", (1, 2), True)
    assert load_recipe(r, "t")[1] == 3
    cfg = resolve(Cfg, "t", r, ["a=5"], a=9)
    assert cfg.a == 9


def test_unknown_key_lists_valid_keys(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("method: t\nconfig:\n  bogus: 1\n")
    with pytest.raises(InputError, match=r"unknown key 'bogus'; valid keys: a, b, flag, name, opt, xs"):
        resolve(Cfg, "t", r)
    with pytest.raises(InputError, match="unknown key 'zz'"):
        resolve(Cfg, "t", None, ["zz=1"])


def test_recipe_errors(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("method: other\nconfig: {}\n")
    with pytest.raises(InputError, match="is for 'other'"):
        load_recipe(r, "t")
    r.write_text("method: t\nconfig: [1\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_recipe(r, "t")
    r.write_text("method: t\nextra: 1\n")
    with pytest.raises(InputError, match="unknown top-level key 'extra'"):
        load_recipe(r, "t")
    with pytest.raises(InputError, match="does not exist"):
        load_recipe(tmp_path / "missing.yaml", "t")


def test_type_coercion_and_validation():
    assert build_config(Cfg, {"a": 3.0, "opt": "0.5", "flag": "yes"}) == Cfg(a=3, opt=0.5, flag=True)
    with pytest.raises(InputError, match="a: expected an integer"):
        build_config(Cfg, {"a": 1.5})
    with pytest.raises(InputError, match="b must be >= 0"):
        build_config(Cfg, {"b": -1})
    with pytest.raises(InputError, match="NaN"):
        build_config(Cfg, {"b": float("nan")})
    assert parse_sets(["xs=[3, 4]", "name=a=b"]) == {"xs": [3, 4], "name": "a=b"}
    with pytest.raises(InputError, match="expected key=value"):
        parse_sets(["novalue"])


def test_json_nan_to_null():
    line = to_json(
        {"kind": "result", "x": float("nan"), "y": [1.0, float("inf")], "z": np.float64(2.5), "w": np.arange(2)}
    )
    assert json.loads(line) == {"kind": "result", "x": None, "y": [1.0, None], "z": 2.5, "w": [0, 1]}


def test_out_dir_never_clobbered(tmp_path):
    d = tmp_path / "run"
    prepare_out_dir(d)
    atomic_write_text(d / "notes.txt", "unrelated")
    assert prepare_out_dir(d) == d  # a folder with unrelated files is usable
    atomic_write_text(d / "records.jsonl", "one")
    with pytest.raises(InputError, match=r"already holds a run \(records.jsonl\)"):
        prepare_out_dir(d)
    assert prepare_out_dir(d, resume=True) == d
    assert (d / "records.jsonl").read_text() == "one"
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt", "records.jsonl"]  # no temp files left behind
    assert (d / "records.jsonl").stat().st_mode & 0o044 == 0o044  # readable like any file, not mkstemp's 0600
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        prepare_out_dir(f)
    with pytest.raises(InputError, match="cannot create the directory"):
        prepare_out_dir(f / "sub")


def test_wilson_interval_oracle():
    lo, hi = wilson_interval(10, 100)
    # closed form recomputed independently
    z, n, p = 1.959963984540054, 100, 0.1
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert lo == pytest.approx(c - h, abs=1e-12) and hi == pytest.approx(c + h, abs=1e-12)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(50, 50)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_help_does_not_import_torch():
    code = (
        "import sys; from icml26.cli import app; import typer.testing as t; r = t.CliRunner().invoke(app, "
        "['--help']); assert r.exit_code == 0, r.output; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_sampler_distributions():
    """The counter-based sampler reproduces each distribution's mean and spread."""
    from icml26.ops._ref.bandit_sampler import sample

    kind = np.array([0, 1, 2, 3, 4], np.int32)
    params = np.array([[0.3, 0, 0], [0.5, 2.0, 0], [0.4, 1.0, 3.0], [0.3, 1.2, 0], [0, 0, 0]], dtype=np.float64)
    ev, off = np.array([1.0, 2.0, 3.0, 10.0]), np.array([0, 0, 0, 0, 0, 4])
    S = 200_000
    seeds = np.arange(S) % 13
    idx = np.arange(S) // 13
    expect = [
        (0.3, math.sqrt(0.21)),
        (0.5, 2.0),
        (0.4, math.sqrt(3.0)),
        (0.3, 0.3 * math.sqrt(math.exp(1.44) - 1)),
        (4.0, math.sqrt(np.var([1, 2, 3, 10]))),
    ]
    for a, (mu, sd) in enumerate(expect):
        r = sample(kind, params, ev, off, seeds, np.full(S, a), idx)
        assert abs(r.mean() - mu) < 5 * sd / math.sqrt(S), (a, r.mean(), mu)
        if a != 3:  # lognormal's sample std converges slowly
            assert r.std() == pytest.approx(sd, rel=0.03), a
    # deterministic and distinct across seeds
    r1 = sample(kind, params, ev, off, np.array([1, 1, 2]), np.array([1, 1, 1]), np.array([5, 5, 5]))
    assert r1[0] == r1[1] and r1[0] != r1[2]


def test_best_of_names_a_winner_only_without_ties():
    from icml26.core.stats import best_of

    rows = [{"s": "a", "wer": 0.5}, {"s": "b", "wer": 0.25}, {"s": "c", "wer": float("nan")}, {"s": "d", "wer": None}]
    assert best_of(rows, "wer", "s") == "b"
    assert best_of(rows, "wer", "s", lower=False) == "a"
    assert best_of([{"s": "a", "wer": 1.0}, {"s": "b", "wer": 1.0}], "wer", "s") is None  # every variant ties
    assert best_of([{"s": "a", "wer": None}], "wer", "s") is None


# ------------------------------------------------------------------ settings and the preamble


def test_settings_read_help_from_metadata_trailing_or_leading_comments_and_check_limits():
    import dataclasses
    from typing import Literal

    from icml26.core import settings

    @dataclasses.dataclass(frozen=True)
    class C:
        steps: int = dataclasses.field(default=10, metadata={"sized": 100})  # optimizer steps
        # learning rate of the
        # optimizer
        lr: float = dataclasses.field(default=0.1, metadata={"gt": 0})
        mode: Literal["a", "b"] = "a"
        wait_s: float = settings.setting(1.0, "time between checks")

        def work(self):
            return [settings.Work(self.steps * self.lr, 5.0, "step-units", "steps or lr")]

    rows = {r["name"]: r for r in settings.rows(C)}
    assert rows["steps"]["help"] == "optimizer steps" and rows["steps"]["range"] == "<= 100 (sized)"
    assert rows["lr"]["help"] == "learning rate of the optimizer" and rows["lr"]["range"] == "> 0"
    assert rows["mode"]["type"] == "a|b" and rows["mode"]["help"] == ""
    assert rows["wait_s"]["help"] == "time between checks" and rows["wait_s"]["unit"] == "seconds"
    settings.check(C())
    with pytest.raises(InputError, match=r"steps=1.0e\+03 is over its limit 100 .*lower steps"):
        settings.check(C(steps=1000))
    with pytest.raises(InputError, match=r"lr must be > 0, got -1.0"):
        settings.check(C(lr=-1.0))
    with pytest.raises(InputError, match=r"this run would need ~9.0e\+00 step-units .*lower steps or lr"):
        settings.check(C(steps=90))  # within its cap, over the work model


def test_parse_numbers_takes_repeated_and_comma_separated_values():
    from icml26.core.preamble import parse_numbers

    assert parse_numbers(["64,256", "1024"], "--batch", int) == (64, 256, 1024)
    assert parse_numbers(["1e3"], "--batch", int) == (1000,)
    assert parse_numbers(["0.5, 2"], "--noise-level") == (0.5, 2.0)
    assert parse_numbers(None, "--batch", int) is None
    with pytest.raises(InputError, match=r"--batch: expected integers \(comma-separated\), got '64,x'"):
        parse_numbers(["64,x"], "--batch", int)


def test_read_records_keeps_complete_lines_and_drops_a_cut_last_line(tmp_path):
    from icml26.core.jsonl import complete_lines, read_records

    p = tmp_path / "steps.jsonl"
    p.write_bytes(b'{"step": 1, "x": null}\n\n{"step": 2}\n{"step": 3, "x"')  # killed mid-write
    assert read_records(p) == [{"step": 1, "x": None}, {"step": 2}]
    lines, offsets, end = complete_lines(p)
    assert offsets == [0, 23, 24] and end == 36 and lines[1] == ""
    p.write_bytes(b'{"step": 1}\nnot json\n')
    with pytest.raises(ValueError):
        read_records(p)
