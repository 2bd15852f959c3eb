"""Questions of the VSI-style benchmark from a scene graph, with exact answers: the question types,
templates and option rules of VSI-Bench (Yang et al., CVPR 2025; vision-x-nyu/thinking-in-space);
route_planning is RECON (docs/geo-fusion.md, "Specification")."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from icml26.methods.spatial.bench import BenchConfig


def box_distance(a: dict, b: dict) -> float:
    """Closest-point distance of two axis-aligned boxes (0 when they touch), m."""
    gap = [
        max(0.0, abs(pa - pb) - (sa + sb) / 2)
        for pa, pb, sa, sb in zip(a["position"], b["position"], a["size"], b["size"])
    ]
    return float(math.sqrt(sum(g * g for g in gap)))


def first_appearance(instances: list[np.ndarray], ids, min_pixels: int) -> dict[int, int | None]:
    """Object id -> first frame index with >= min_pixels of it (None when never seen)."""
    out: dict[int, int | None] = {}
    for i in ids:
        out[i] = next((f for f, m in enumerate(instances) if int((m == i).sum()) >= min_pixels), None)
    return out


def _letters(opts: list[str]) -> list[str]:
    return [f"{chr(65 + k)}. {o}" for k, o in enumerate(opts)]


def direction_angle(pos: dict, ori: dict, query: dict) -> float:
    """Signed angle (degrees) of ``query`` seen from ``pos`` facing ``ori`` on the floor plane:
    0 = straight ahead, positive = to the right (y up, right = facing x up)."""
    p, o, q = (np.array([d["position"][0], d["position"][2]]) for d in (pos, ori, query))
    f = (o - p) / np.linalg.norm(o - p)
    r = np.array([-f[1], f[0]])  # cross((fx, 0, fz), (0, 1, 0)) = (-fz, 0, fx)
    v = q - p
    return float(math.degrees(math.atan2(v @ r, v @ f)))


ROUTE_TURNS = ("turn left", "turn right", "turn back")


def turn_angle(prev: dict, at: dict, nxt: dict) -> float:
    """Signed floor-plane angle (degrees) of the leg at -> nxt relative to the heading prev -> at:
    0 = straight on, positive = to the right (the convention of ``direction_angle``)."""
    a, b = (np.array([d["position"][0], d["position"][2]]) for d in (prev, at))
    ahead = {"position": [float(b[0] + (b - a)[0]), 0.0, float(b[1] + (b - a)[1])]}
    return direction_angle(at, ahead, nxt)


def turn_word(angle: float) -> str | None:
    """VSI-Bench's turn word for a signed angle, or None when the turn is ambiguous (within 10 degrees
    of 135) or too slight to be a turn (< 30 degrees)."""
    a = abs(angle)
    if a < 30 or abs(a - 135) < 10:
        return None
    return "turn back" if a >= 135 else ("turn right" if angle > 0 else "turn left")


def make_questions(
    layout: dict, first_frame: dict[int, int | None], rng: np.random.Generator, cfg: BenchConfig
) -> list[dict]:
    """Questions (without id / scene / frames) with exact answers from the scene graph."""
    objs = layout["objects"]
    counts: dict[str, int] = {}
    for o in objs:
        counts[o["class"]] = counts.get(o["class"], 0) + 1
    unique = [o for o in objs if counts[o["class"]] == 1]
    cap = cfg.max_questions_per_task
    qs: list[dict] = []

    def num(task, question, answer, refs):
        qs.append({"task": task, "question_type": "numeric", "question": question, "answer": answer, "objects": refs})

    def mc(task, question, options, correct, refs):
        qs.append(
            {
                "task": task,
                "question_type": "multiple_choice",
                "question": question,
                "options": _letters(options),
                "answer": chr(65 + options.index(correct)),
                "objects": refs,
            }
        )

    # object_counting
    for cls in list(rng.permutation(sorted(counts)))[:cap]:
        num("object_counting", f"How many {cls}(s) are in this room?", str(counts[cls]), [str(cls)])
    # object_abs_distance
    pairs = [(a, b) for a, b in itertools.combinations(unique, 2) if box_distance(a, b) >= 0.2]
    for k in rng.permutation(len(pairs))[:cap]:
        a, b = pairs[k]
        num(
            "object_abs_distance",
            f"Measuring from the closest point of each object, what is the direct distance between the "
            f"{a['class']} and the {b['class']} (in meters)?",
            f"{box_distance(a, b):.2f}",
            [a["class"], b["class"]],
        )
    # object_size_estimation
    for k in rng.permutation(len(unique))[:cap]:
        o = unique[k]
        num(
            "object_size_estimation",
            f"What is the length of the longest dimension (length, width, or height) of the "
            f"{o['class']}, measured in centimeters?",
            str(int(round(100 * max(o["size"])))),
            [o["class"]],
        )
    # room_size_estimation
    num(
        "room_size_estimation",
        "What is the size of this room (in square meters)? If multiple rooms are shown, estimate the "
        "size of the combined space.",
        f"{layout['room']['floor_area_m2']:.1f}",
        [],
    )
    # object_rel_distance
    made = 0
    for k in rng.permutation(len(unique)):
        if made >= cap or len(unique) < 5:
            break
        target = unique[k]
        others = [o for o in unique if o is not target]
        cand = [others[j] for j in rng.permutation(len(others))[:4]]
        d = sorted((box_distance(target, c), c["class"]) for c in cand)
        if d[1][0] - d[0][0] < 0.15:
            continue
        opts = [c["class"] for c in cand]
        mc(
            "object_rel_distance",
            f"Measuring from the closest point of each object, which of these objects "
            f"({', '.join(opts)}) is the closest to the {target['class']}?",
            opts,
            d[0][1],
            [target["class"], *opts],
        )
        made += 1
    # object_rel_direction_*
    triples = list(itertools.permutations(unique, 3))
    order = rng.permutation(len(triples)) if triples else []
    done = {"easy": 0, "medium": 0, "hard": 0}
    for k in order:
        if all(v >= cap for v in done.values()):
            break
        pos, ori, q = triples[k]
        if (
            math.dist(pos["position"][::2], ori["position"][::2]) < 0.5
            or math.dist(pos["position"][::2], q["position"][::2]) < 0.5
        ):
            continue
        th = direction_angle(pos, ori, q)
        a = abs(th)
        refs = [pos["class"], ori["class"], q["class"]]
        lead = f"If I am standing by the {pos['class']} and facing the {ori['class']}, "
        if done["easy"] < cap and 10 <= a <= 170:
            mc(
                "object_rel_direction_easy",
                lead + f"is the {q['class']} to the left or the right of the {ori['class']}?",
                ["left", "right"],
                "right" if th > 0 else "left",
                refs,
            )
            done["easy"] += 1
        elif done["medium"] < cap and a >= 40 and abs(a - 135) >= 10:
            mc(
                "object_rel_direction_medium",
                lead + f"is the {q['class']} to my left, right, or back? An object is to my "
                "back if I would have to turn at least 135 degrees in order to face it.",
                ["left", "right", "back"],
                "back" if a >= 135 else ("right" if th > 0 else "left"),
                refs,
            )
            done["medium"] += 1
        elif done["hard"] < cap and min(abs(a - 0), abs(a - 90), abs(a - 180)) >= 10:
            quad = ("front" if a < 90 else "back") + "-" + ("right" if th > 0 else "left")
            mc(
                "object_rel_direction_hard",
                f"If I am standing by the {pos['class']}, facing the {ori['class']}, is the "
                f"{q['class']} to my front-left, front-right, back-left, or back-right? The directions refer to the "
                "quadrants of "
                "a Cartesian plane (if I am standing at the origin and facing along the positive y-axis).",
                ["front-left", "front-right", "back-left", "back-right"],
                quad,
                refs,
            )
            done["hard"] += 1
    # obj_appearance_order: up to `cap` sets of 4 objects (unique in their class) first seen in 4 different frames, so
    # that the true order has no ties; objects first seen in the same frame are never asked together
    by_frame: dict[int, list[str]] = {}
    for o in unique:
        if first_frame.get(o["id"]) is not None:
            by_frame.setdefault(int(first_frame[o["id"]]), []).append(o["class"])
    frames = sorted(by_frame)
    asked: set[tuple[str, ...]] = set()
    for _ in range(4 * cap if len(frames) >= 4 else 0):
        if len(asked) >= cap:
            break
        true = [
            by_frame[f][int(rng.integers(len(by_frame[f])))]
            for f in sorted(frames[j] for j in rng.permutation(len(frames))[:4])
        ]
        if tuple(sorted(true)) in asked:
            continue
        asked.add(tuple(sorted(true)))
        shown = list(rng.permutation(true))
        opts = {", ".join(true)}
        while len(opts) < 4:
            opts.add(", ".join(rng.permutation(true)))
        opts = [", ".join(true)] + sorted(opts - {", ".join(true)})
        opts = [opts[j] for j in rng.permutation(4)]
        mc(
            "obj_appearance_order",
            f"What will be the first-time appearance order of the following categories in the video: "
            f"{', '.join(shown)}?",
            opts,
            ", ".join(true),
            [str(c) for c in shown],
        )
    # route_planning (last, so that the questions above do not depend on it)
    _route_questions(unique, rng, cap, mc)
    return qs


def _route_questions(unique: list[dict], rng: np.random.Generator, cap: int, mc) -> None:
    """route_planning questions (RECON rule of the module docstring of ``bench``), added through ``mc``."""
    routes = list(itertools.permutations(unique, 4))
    made = 0
    for k in rng.permutation(len(routes)) if routes else []:
        if made >= cap:
            break
        start, w1, w2, goal = routes[k]
        legs = ((start, w1), (w1, w2), (w2, goal))
        if min(math.dist(a["position"][::2], b["position"][::2]) for a, b in legs) < 0.5:
            continue
        turns = [turn_word(turn_angle(start, w1, w2)), turn_word(turn_angle(w1, w2, goal))]
        if None in turns:
            continue
        true = ", ".join(turns)
        others = [", ".join(c) for c in itertools.product(ROUTE_TURNS, repeat=2) if ", ".join(c) != true]
        opts = [true] + [others[j] for j in rng.permutation(len(others))[:3]]
        opts = [opts[j] for j in rng.permutation(4)]
        mc(
            "route_planning",
            f"You are a robot beginning at the {start['class']} facing the {w1['class']}. You want to navigate to "
            f"the {goal['class']}. You will perform the following actions (Note: for each [please fill in], choose "
            "either 'turn back,' 'turn left,' or 'turn right.'): 1. Go forward until the "
            f"{w1['class']} 2. [please fill in] 3. Go forward until the {w2['class']} 4. [please fill in] "
            f"5. Go forward until the {goal['class']}. You have reached the final destination.",
            opts,
            true,
            [start["class"], w1["class"], w2["class"], goal["class"]],
        )
        made += 1
