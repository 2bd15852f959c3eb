"""Divergence: a non-finite loss or parameter stops that run, and the run says so.

Every training loop calls :func:`check` on its losses (and, every so often, on its
parameters). A non-finite value raises :class:`Diverged`; the loop's caller turns it into its
result with :func:`diverged_fields` (``diverged: true``, the step, what went non-finite) and
:func:`warn` prints one line on stderr. Verdicts (core/verdict.py) leave diverged rows out.
Torch is not imported here: tensors are checked through their own ``isfinite``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Iterable


class Diverged(RuntimeError):
    """Training produced a non-finite value. ``step``: the step (int); ``what``: the quantity."""

    def __init__(self, step: int, what: str, value: Any = None):
        self.step, self.what, self.value = int(step), str(what), value
        super().__init__(f"training diverged at step {self.step}: {self.what} is {value}")


def _finite(v: Any) -> bool:
    if v is None:
        return True
    isf = getattr(v, "isfinite", None)
    if isf is not None and hasattr(v, "all"):  # a torch tensor or numpy array
        r = isf() if callable(isf) else isf
        return bool(r.all())
    try:
        import numpy as np

        if isinstance(v, np.ndarray):
            return bool(np.isfinite(v).all())
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return math.isfinite(float(v))


def _forced(step: int) -> bool:
    """``ICML26_FORCE_DIVERGE_AT=N``: the checks treat every value from step N on as non-finite
    (fault injection, so that a test can see each training command stop and say so)."""
    import os

    v = os.environ.get("ICML26_FORCE_DIVERGE_AT", "").strip()
    return v.isdigit() and int(step) >= int(v)


def check(step: int, **values: Any) -> None:
    """Raise :class:`Diverged` at ``step`` if any value (number, tensor or array) is not finite.

    ``check(step, critic_loss=loss, q=q)``; the first non-finite keyword names the quantity.
    ``ICML26_FORCE_DIVERGE_AT=N`` forces it from step N on (tests)."""
    if values and _forced(step):
        raise Diverged(step, next(iter(values)), "nan (forced by ICML26_FORCE_DIVERGE_AT)")
    for k, v in values.items():
        if not _finite(v):
            shown = v if isinstance(v, (int, float)) else "non-finite"
            raise Diverged(step, k, shown)


def check_params(step: int, params: Iterable[Any], what: str = "parameters") -> None:
    """Raise :class:`Diverged` if any tensor in ``params`` (e.g. ``model.parameters()``) holds
    a non-finite value."""
    for p in params:
        if not _finite(getattr(p, "data", p)):
            raise Diverged(step, what, "non-finite")


def diverged_fields(exc: Diverged | None) -> dict:
    """The result fields for a run: ``{"diverged": False}`` or ``{"diverged": True,
    "diverged_step": step, "diverged_what": quantity}``."""
    if exc is None:
        return {"diverged": False}
    return {"diverged": True, "diverged_step": exc.step, "diverged_what": exc.what}


def warn(exc: Diverged, run: str = "") -> None:
    """One line on stderr: which run diverged, where, and that it is left out of the verdict."""
    who = f"{run}: " if run else ""
    print(
        f"warning: {who}training diverged at step {exc.step} ({exc.what} non-finite); "
        "the run stopped there and is left out of the verdict",
        file=sys.stderr,
    )
