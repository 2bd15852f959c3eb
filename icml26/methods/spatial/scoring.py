"""VSI-Bench scoring (Yang et al., "Thinking in Space", CVPR 2025), written to the rules of its public
lmms-eval task, vision-x-nyu/thinking-in-space ``lmms_eval/tasks/vsibench/utils.py`` (commit
e6a72f39):

- task lists ``MCA_QUESTION_TYPES`` / ``NA_QUESTION_TYPES`` (lines 13-26);
- ``fuzzy_matching``: the first space-separated token, trailing "." stripped (l. 104-105);
- multiple choice: ``exact_match``, case-insensitive equality with the gold letter (l. 107-108);
- numeric: ``to_float`` (a parse failure is None, l. 125-130), then
  ``mean_relative_accuracy(start=.5, end=.95, interval=.05)``: ``np.linspace(.5, .95,
  int((end - start) / interval + 2))`` (10 thresholds: int() truncates 10.999...), accuracy =
  mean of ``|pred - gt| / gt <= 1 - theta`` (l. 110-117); a None prediction raises TypeError
  and scores ``WORST_CASE_FOR_METRICS`` = 0 (l. 141-144);
- aggregation: the mean per question type, then the three ``object_rel_direction_*`` accuracies
  popped (a missing split counting 0) and averaged into ``object_rel_direction_accuracy``, then
  ``overall`` = the unweighted mean of what remains (l. 150-177).

The same float operations are used here, so edge cases (relative error exactly 0.2 counts
for theta = 0.8: 1 - 0.8 = 0.19999999999999996 >= 0.19999999999999996) fall as they do there.
Added here (not in VSI-Bench): a count of unparsable predictions per task (numeric: not a float;
multiple choice: no option letter; missing prediction: both) and the splits that are missing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

import numpy as np

from icml26.core.errors import InputError

MCA_QUESTION_TYPES = (
    "object_rel_direction_easy",
    "object_rel_direction_medium",
    "object_rel_direction_hard",
    "object_rel_distance",
    "route_planning",
    "obj_appearance_order",
)
NA_QUESTION_TYPES = ("object_abs_distance", "object_counting", "object_size_estimation", "room_size_estimation")
TASKS = NA_QUESTION_TYPES + MCA_QUESTION_TYPES
DIRECTION_SPLITS = MCA_QUESTION_TYPES[:3]
DIRECTION_TASK = "object_rel_direction"


def fuzzy_matching(pred: str) -> str:
    """VSI-Bench: first space-separated token, trailing '.' stripped."""
    return pred.split(" ")[0].rstrip(".").strip()


def exact_match(pred: str, target: str) -> float:
    return 1.0 if pred.lower() == target.lower() else 0.0


def to_float(pred) -> float | None:
    try:
        return float(pred)
    except BaseException:  # noqa: BLE001  (as VSI-Bench: anything unparsable is None)
        return None


def mean_relative_accuracy(
    pred: float, target: float, start: float = 0.5, end: float = 0.95, interval: float = 0.05
) -> float:
    """MRA over thresholds linspace(start, end, int((end - start) / interval + 2)) (10 for the defaults).

    Raises TypeError when pred or target is None (VSI-Bench scores that 0)."""
    num_pts = (end - start) / interval + 2
    conf_intervs = np.linspace(start, end, int(num_pts))
    accuracy = abs(pred - target) / target <= 1 - conf_intervs
    return float(accuracy.mean())


def score_one(task: str, prediction, answer: str, options: Iterable[str] | None = None) -> tuple[float, bool]:
    """(score, unparsable) of one prediction. prediction None counts as unparsable and scores 0."""
    if task in MCA_QUESTION_TYPES:
        if prediction is None:
            return 0.0, True
        p = fuzzy_matching(str(prediction))
        letters = [o.split(".")[0].strip().lower() for o in options] if options else None
        unparsable = letters is not None and p.lower() not in letters
        return exact_match(p, str(answer)), unparsable
    if task in NA_QUESTION_TYPES:
        pv = None if prediction is None else to_float(fuzzy_matching(str(prediction)))
        try:
            return mean_relative_accuracy(pv, to_float(answer)), pv is None
        except TypeError:
            return 0.0, True
    raise ValueError(f"unknown task {task!r}")


def read_predictions(path: str | Path) -> list[dict]:
    """The ``score --predictions`` JSONL: one object per line with id, task, question_type, answer,
    prediction (null allowed). InputError naming the line on anything else."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--predictions {str(path)!r} does not exist or is not a file")
    rows, seen = [], set()
    for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise InputError(f"--predictions {str(path)!r} line {i}: not a JSON object") from None
        if not isinstance(r, dict):
            raise InputError(f"--predictions {str(path)!r} line {i}: not a JSON object")
        missing = [k for k in ("id", "task", "question_type", "answer", "prediction") if k not in r]
        if missing:
            raise InputError(f"--predictions {str(path)!r} line {i}: missing field(s) {', '.join(missing)}")
        if r["task"] not in TASKS:
            raise InputError(
                f"--predictions {str(path)!r} line {i}: unknown task {r['task']!r} (one of {', '.join(TASKS)})"
            )
        want = "multiple_choice" if r["task"] in MCA_QUESTION_TYPES else "numeric"
        if r["question_type"] != want:
            raise InputError(
                f"--predictions {str(path)!r} line {i}: task {r['task']} has question_type {want!r}, got "
                f"{r['question_type']!r}"
            )
        if r["id"] in seen:
            raise InputError(f"--predictions {str(path)!r} line {i}: duplicate id {r['id']!r}")
        seen.add(r["id"])
        rows.append(r)
    if not rows:
        raise InputError(f"--predictions {str(path)!r} holds no predictions")
    return rows


def score(rows: Iterable[dict]) -> tuple[list[dict], dict]:
    """Per-task result records (kind, task, metric, score, n, n_unparsable; the combined
    object_rel_direction record too) and the summary (overall as VSI-Bench computes it)."""
    per: dict[str, list[float]] = {}
    bad: dict[str, int] = {}
    for r in rows:
        s, u = score_one(r["task"], r.get("prediction"), r["answer"], r.get("options"))
        per.setdefault(r["task"], []).append(s)
        bad[r["task"]] = bad.get(r["task"], 0) + int(u)
    out: dict[str, float] = {}
    records = []
    for task in TASKS:
        if task not in per:
            continue
        metric = "accuracy" if task in MCA_QUESTION_TYPES else "mra"
        val = float(np.mean(per[task]))
        records.append(
            {
                "kind": "result",
                "task": task,
                "metric": metric,
                "score": val,
                "n": len(per[task]),
                "n_unparsable": bad[task],
            }
        )
        out[task] = val
    missing_dir = [t for t in DIRECTION_SPLITS if t not in per]
    direction = sum(out.pop(t, 0.0) for t in DIRECTION_SPLITS) / 3.0
    n_dir = sum(len(per.get(t, ())) for t in DIRECTION_SPLITS)
    records.append(
        {
            "kind": "result",
            "task": DIRECTION_TASK,
            "metric": "accuracy",
            "score": direction,
            "n": n_dir,
            "n_unparsable": sum(bad.get(t, 0) for t in DIRECTION_SPLITS),
            "combined_from": list(DIRECTION_SPLITS),
        }
    )
    out[DIRECTION_TASK] = direction
    overall = sum(out.values()) / len(out)
    summary = {
        "kind": "summary",
        "overall": overall,
        "overall_percent": 100.0 * overall,
        "tasks": len(out),
        "n": sum(len(v) for v in per.values()),
        "n_unparsable": sum(bad.values()),
        "missing_direction_splits": missing_dir,
        "rule": "VSI-Bench: mean per task; the 3 rel_direction splits averaged into one (a missing split counts 0); "
        "overall = mean of tasks",
    }
    return records, summary


def fmt_number(x: float) -> str:
    """A numeric prediction as text (2 significant decimals)."""
    return "nan" if not math.isfinite(x) else f"{x:.2f}"
