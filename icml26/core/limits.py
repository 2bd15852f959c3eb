"""Up-front work limits: refuse a run that would take hours of CPU before any result.

One wording for every command::

    this run would <verb> ~<estimate> <unit> (<detail>; hours of CPU; limit <limit>); lower <hint>
"""

from __future__ import annotations

from icml26.core.errors import InputError


def sci(n: float | int) -> str:
    """``3e12`` -> ``"3.0e+12"``; integers too large for a float keep their leading digits
    (``10**400`` -> ``"1.0e+400"``) instead of overflowing."""
    try:
        return f"{float(n):.1e}"
    except OverflowError:
        d = str(int(n))
        return f"{d[0]}.{(d[1:] + '0')[0]}e+{len(d) - 1:02d}"


def check_work(work: float | int, limit: float, verb: str, unit: str, hint: str, *, detail: str = "") -> None:
    """Raise InputError when the estimated ``work`` exceeds ``limit``.

    verb/unit: what is counted, e.g. ``"draw"``/``"samples"`` or ``"spend"``/``"flops planning
    on 300 states"``; hint: what the user can lower, e.g. ``"--seeds or --budget"``; detail: how
    the estimate was counted (optional), shown before the limit."""
    if work > limit:
        how = f"{detail}; " if detail else ""
        raise InputError(
            f"this run would {verb} ~{sci(work)} {unit} ({how}hours of CPU; limit {limit:.0e}); lower {hint}"
        )
