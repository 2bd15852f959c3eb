"""The shared up-front work limit (icml26/core/limits.py) and the commands that use it."""

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.core.errors import InputError
from icml26.core.limits import check_work, sci


def test_sci_formats_floats_and_huge_integers():
    assert sci(3e12) == "3.0e+12"
    assert sci(14_014_000_000) == "1.4e+10"
    assert sci(10**400) == "1.0e+400"  # float() would overflow
    assert sci(123 * 10**398) == "1.2e+400"


def test_check_work_passes_at_the_limit_and_names_everything_above_it():
    check_work(1e9, 1e9, "draw", "samples", "--seeds")
    with pytest.raises(InputError) as e:
        check_work(3e12, 1e9, "draw", "samples", "--seeds or --budget", detail="seeds x budget")
    assert str(e.value) == (
        "this run would draw ~3.0e+12 samples (seeds x budget; hours of CPU; limit 1e+09); lower --seeds or --budget"
    )
    assert isinstance(e.value, ValueError)  # Python callers catching ValueError keep working
    with pytest.raises(
        InputError, match=r"^this run would simulate ~1\.0e\+400 pulls \(hours of CPU; limit 5e\+10\); lower --seeds$"
    ):
        check_work(10**400, 5e10, "simulate", "pulls", "--seeds")


@pytest.mark.parametrize(
    "args,msg",
    [
        (
            ["-b", "1000000000"],
            "this run would simulate ~1.1e+12 pulls (seeds x algorithms x the sum of the budgets; "
            "hours of CPU; limit 2e+10); lower --seeds, --budget or the number of --algo",
        ),
        (
            ["-d", "0.1"],
            "this run would simulate ~6.0e+11 pulls (seeds x algorithms x --delta values x max_pulls, a run's "
            "worst case; hours of CPU; limit 2e+10); lower --set max_pulls=N, --seeds or the number of --algo",
        ),
    ],
)
def test_bai_total_work_limit_exit_2(args, msg):
    r = CliRunner().invoke(
        app, ["bai", "-e", "varde-3groups", "-a", "all", "--seeds", "100000" if "-d" in args else "100", *args]
    )
    assert r.exit_code == 2, r.output
    assert msg in " ".join(r.output.split())
    assert '"kind"' not in r.output
