"""VSI-Bench scoring rules on hand-made answers, and questions re-derived from a hand-built scene."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml26.methods.spatial import bench as B
from icml26.methods.spatial import scoring as S


@pytest.mark.parametrize(
    "pred,gt,mra",
    [
        (1.2, 1, 0.7),
        (1.5, 1, 0.1),
        (0.9, 1, 0.9),
        (2, 1, 0.0),
        (10, 8, 0.6),
        (1, 1, 1.0),
        (1.05, 1, 1.0),
        (4, 5, 0.6),
        (1.0500001, 1, 0.9),
        (0.5, 1, 0.1),
        (0.4999, 1, 0.0),
    ],
)
def test_mra_threshold_edges(pred, gt, mra):
    """Test vectors of shared/methods/geothinker.md and the edges, with VSI-Bench's float arithmetic:
    |1.2 - 1| / 1 = 0.19999999999999996 passes theta = 0.8 but |4 - 5| / 5 = 0.2 does not."""
    assert S.mean_relative_accuracy(pred, gt) == pytest.approx(mra)


def test_mra_has_ten_thresholds():
    num = (0.95 - 0.5) / 0.05 + 2
    assert int(num) == 10 and num < 11  # VSI-Bench's int() truncation gives 10 points
    # an error of 0.26 passes theta 0.5..0.70 (5 of 10)
    assert S.mean_relative_accuracy(1.26, 1.0) == pytest.approx(0.5)


def test_fuzzy_matching_and_parse_failures():
    assert (
        S.fuzzy_matching("B. left") == "B" and S.fuzzy_matching("3.5 meters") == "3.5" and S.fuzzy_matching("4.") == "4"
    )
    assert S.score_one("object_rel_direction_easy", "b", "B", ["A. left", "B. right"]) == (1.0, False)
    assert S.score_one("object_rel_direction_easy", "right", "B", ["A. left", "B. right"]) == (0.0, True)
    assert S.score_one("object_counting", "three", "3") == (0.0, True)
    assert S.score_one("object_counting", None, "3") == (0.0, True)
    assert S.score_one("object_counting", "3 chairs", "3") == (1.0, False)
    assert S.score_one("room_size_estimation", "nan", "20") == (0.0, False)


def _row(i, task, answer, pred, options=None):
    qt = "multiple_choice" if task in S.MCA_QUESTION_TYPES else "numeric"
    r = {"id": str(i), "task": task, "question_type": qt, "answer": answer, "prediction": pred}
    if options:
        r["options"] = options
    return r


def test_aggregation_directions_averaged_then_tasks():
    opts = ["A. left", "B. right"]
    rows = [
        _row(0, "object_counting", "4", "4"),
        _row(1, "object_counting", "4", "x"),  # 1.0, 0 -> 0.5
        _row(2, "object_rel_direction_easy", "A", "A", opts),
        _row(3, "object_rel_direction_easy", "A", "A", opts),
        _row(4, "object_rel_direction_easy", "A", "B", opts),  # 2/3
        _row(5, "object_rel_direction_medium", "C", "C", ["A. left", "B. right", "C. back"]),  # 1
        _row(
            6,
            "object_rel_direction_hard",
            "D",
            "A",
            ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
        ),  # 0
        _row(7, "object_abs_distance", "2.0", "2.4"),  # rel err 0.2 -> 0.7
    ]
    recs, summ = S.score(rows)
    by = {r["task"]: r for r in recs}
    assert by["object_counting"]["score"] == 0.5 and by["object_counting"]["n_unparsable"] == 1
    assert by["object_rel_direction_easy"]["score"] == pytest.approx(2 / 3)
    assert (
        by["object_rel_direction"]["score"] == pytest.approx((2 / 3 + 1 + 0) / 3)
        and by["object_rel_direction"]["n"] == 5
    )
    # overall: mean of counting, abs distance, direction (3 tasks), not of the 5 splits
    assert summ["tasks"] == 3
    assert summ["overall"] == pytest.approx((0.5 + 0.7 + (2 / 3 + 1) / 3) / 3)
    assert summ["n_unparsable"] == 1 and summ["missing_direction_splits"] == []
    recs, summ = S.score(rows[:2])  # no direction split at all: VSI-Bench still counts the task as 0
    assert summ["overall"] == pytest.approx(0.25) and len(summ["missing_direction_splits"]) == 3


def _scene():
    """A hand-built 6 x 5 m room: positions are box centres (x, y, z), y up."""
    objs = [
        {"id": 1, "class": "table", "size": [1.0, 0.75, 0.6], "position": [2.0, 0.375, 0.0]},
        {"id": 2, "class": "chair", "size": [0.5, 0.9, 0.5], "position": [2.0, 0.45, 1.5]},
        {"id": 3, "class": "chair", "size": [0.5, 0.9, 0.5], "position": [-2.0, 0.45, 1.5]},
        {"id": 4, "class": "lamp", "size": [0.4, 1.5, 0.4], "position": [-2.5, 0.75, -2.0]},
        {"id": 5, "class": "tv", "size": [1.2, 0.7, 0.15], "position": [0.0, 0.35, -2.3]},
        {"id": 6, "class": "sofa", "size": [2.0, 0.8, 0.9], "position": [0.0, 0.4, 2.0]},
        {"id": 7, "class": "plant", "size": [0.4, 1.0, 0.4], "position": [2.6, 0.5, -2.1]},
    ]
    return {"room": {"width_m": 6.0, "depth_m": 5.0, "height_m": 2.8, "floor_area_m2": 30.0}, "objects": objs}


def test_questions_rederived_from_hand_built_scene():
    layout = _scene()
    first = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6}
    cfg = B.BenchConfig(max_questions_per_task=50)
    qs = B.make_questions(layout, first, np.random.default_rng(0), cfg)
    by: dict = {}
    for q in qs:
        by.setdefault(q["task"], []).append(q)
    assert {q["objects"][0]: q["answer"] for q in by["object_counting"]} == {
        "chair": "2",
        "table": "1",
        "lamp": "1",
        "tv": "1",
        "sofa": "1",
        "plant": "1",
    }
    assert by["room_size_estimation"][0]["answer"] == "30.0"
    sizes = {q["objects"][0]: q["answer"] for q in by["object_size_estimation"]}
    assert sizes == {"table": "100", "lamp": "150", "tv": "120", "sofa": "200", "plant": "100"}  # chair is not unique
    for q in by["object_abs_distance"]:
        a, b = q["objects"]
        # hand computation for table-tv: x gap max(0, 2-0 - (1+1.2)/2)=0.9, z gap 2.3-(0.6+0.15)/2 = 1.925
        if {a, b} == {"table", "tv"}:
            assert float(q["answer"]) == pytest.approx(math.hypot(0.9, 1.925), abs=0.005)
    assert all("chair" not in q["objects"] for q in qs if q["task"] != "object_counting")
    # direction: standing by the tv (0, -2.3) facing the sofa (0, 2.0): +z ahead; right = -x (y up, right-handed)
    tv, sofa, table, lamp = (
        next(o for o in layout["objects"] if o["class"] == c) for c in ("tv", "sofa", "table", "lamp")
    )
    assert B.direction_angle(tv, sofa, table) < 0  # table at +x: to the left
    assert B.direction_angle(tv, sofa, lamp) > 0  # lamp at -x: to the right
    for q in by.get("object_rel_direction_easy", []):
        pos, ori, qq = (next(o for o in layout["objects"] if o["class"] == c) for c in q["objects"])
        th = B.direction_angle(pos, ori, qq)
        assert q["answer"] == ("B" if th > 0 else "A")
    for q in by.get("object_rel_direction_hard", []):
        pos, ori, qq = (next(o for o in layout["objects"] if o["class"] == c) for c in q["objects"])
        th = B.direction_angle(pos, ori, qq)
        want = ("front" if abs(th) < 90 else "back") + "-" + ("right" if th > 0 else "left")
        assert q["options"][ord(q["answer"]) - 65].endswith(want)
    for q in by.get("object_rel_distance", []):
        target = next(o for o in layout["objects"] if o["class"] == q["objects"][0])
        opts = [o.split(". ")[1] for o in q["options"]]
        d = {c: B.box_distance(target, next(o for o in layout["objects"] if o["class"] == c)) for c in opts}
        assert opts[ord(q["answer"]) - 65] == min(d, key=d.get)
    order = by["obj_appearance_order"][0]
    assert order["options"][ord(order["answer"]) - 65].split(". ")[1] == ", ".join(
        sorted(order["objects"], key=lambda c: first[next(o["id"] for o in layout["objects"] if o["class"] == c)])
    )
    assert len(by["object_rel_direction_medium"]) > 0 and len(by["object_rel_distance"]) > 0


def test_appearance_order_questions_have_untied_true_orders():
    """Several appearance-order questions per scene (up to max_questions_per_task), each naming 4
    objects first seen in 4 different frames; objects sharing a first frame are never asked
    together, and the answer spells the classes by first frame."""
    layout = _scene()
    ids = {o["class"]: o["id"] for o in layout["objects"] if o["class"] != "chair"}
    first = {1: 0, 2: 0, 3: 1, 4: 2, 5: 3, 6: 3, 7: 5}  # tv & sofa tie at frame 3: 2 possible sets of 4
    qs = [
        q
        for q in B.make_questions(layout, first, np.random.default_rng(0), B.BenchConfig(max_questions_per_task=3))
        if q["task"] == "obj_appearance_order"
    ]
    assert len(qs) == 2 and len({tuple(sorted(q["objects"])) for q in qs}) == 2
    for q in qs:
        frames = [first[ids[c]] for c in q["objects"]]
        assert len(set(frames)) == 4 and not {"tv", "sofa"} <= set(q["objects"])
        opts = [o.split(". ", 1)[1] for o in q["options"]]
        assert len(set(opts)) == 4
        assert opts[ord(q["answer"]) - 65] == ", ".join(sorted(q["objects"], key=lambda c: first[ids[c]]))
    # fewer than 4 distinct first frames: no question
    none = {1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 2, 7: None}
    assert not [
        q
        for q in B.make_questions(layout, none, np.random.default_rng(0), B.BenchConfig())
        if q["task"] == "obj_appearance_order"
    ]


def test_box_distance_and_first_appearance():
    a = {"position": [0, 0.5, 0], "size": [1, 1, 1]}
    b = {"position": [3, 0.5, 4], "size": [1, 1, 1]}
    assert B.box_distance(a, b) == pytest.approx(math.hypot(2, 3))
    assert B.box_distance(a, {"position": [0.5, 0.5, 0], "size": [1, 1, 1]}) == 0.0
    m0 = np.zeros((4, 4), np.uint8)
    m1 = m0.copy()
    m1[:2, :2] = 3
    assert B.first_appearance([m0, m1, m1], [3, 5], 4) == {3: 1, 5: None}


def test_turn_angle_and_word_by_hand():
    """Heading +z from (0, 0) to (0, 1): right is -x (y up), so (-1, 1) is a right turn of 90 degrees,
    (1, 1) a left one, (0, 0) straight back, (0, 3) straight on (no turn word)."""
    p = lambda x, z: {"position": [x, 0.5, z]}  # noqa: E731
    assert B.turn_angle(p(0, 0), p(0, 1), p(-1, 1)) == pytest.approx(90.0)
    assert B.turn_angle(p(0, 0), p(0, 1), p(1, 1)) == pytest.approx(-90.0)
    assert abs(B.turn_angle(p(0, 0), p(0, 1), p(0, 0))) == pytest.approx(180.0)
    assert B.turn_angle(p(0, 0), p(0, 1), p(0, 3)) == pytest.approx(0.0)
    assert [B.turn_word(a) for a in (90, -90, 180, -150, 0, 25, 130, 140)] == [
        "turn right",
        "turn left",
        "turn back",
        "turn back",
        None,
        None,
        None,
        None,
    ]


def test_route_planning_rederived_from_hand_built_scene():
    layout = _scene()
    first = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6}
    qs = B.make_questions(layout, first, np.random.default_rng(0), B.BenchConfig(max_questions_per_task=50))
    routes = [q for q in qs if q["task"] == "route_planning"]
    assert len(routes) >= 5
    obj = {o["class"]: o for o in layout["objects"]}
    for q in routes:
        start, w1, w2, goal = (obj[c] for c in q["objects"])
        want = f"{B.turn_word(B.turn_angle(start, w1, w2))}, {B.turn_word(B.turn_angle(w1, w2, goal))}"
        opts = [o.split(". ", 1)[1] for o in q["options"]]
        assert len(set(opts)) == 4 and opts[ord(q["answer"]) - 65] == want
        assert f"beginning at the {start['class']} facing the {w1['class']}" in q["question"]
        assert "chair" not in q["objects"]  # only objects unique in their class are named


def test_route_head_loss_and_prediction_follow_the_turn_logits():
    """With the route head's bias favouring (turn right, turn back), the prediction is the option
    spelling those turns, and the loss is lower for a question whose answer it is."""
    import torch

    from icml26.methods.spatial import experiment as E

    torch.manual_seed(0)
    model = E.SpatialQA(E.Config(hidden_size=8, layers=1, heads=1, frames=2), "none", 2)
    with torch.no_grad():
        model.route_head.weight.zero_()
        model.route_head.bias.copy_(torch.tensor([0.0, 3.0, 0.0, 0.0, 0.0, 3.0]))  # turn 1: right; turn 2: back
    opts = [
        "A. turn left, turn left",
        "B. turn right, turn left",
        "C. turn right, turn back",
        "D. turn back, turn back",
    ]
    q = {"task": "route_planning", "question_type": "multiple_choice", "options": opts, "answer": "C"}
    h = torch.randn(2, 8)
    assert E.predict(model, h[:1], [q]) == ["C"]
    good = float(E.batch_loss(model, h[:1], [q]))
    bad = float(E.batch_loss(model, h[:1], [{**q, "answer": "A"}]))
    lp = torch.log_softmax(torch.tensor([[0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]), -1)
    assert good == pytest.approx(-float(lp[0, 1] + lp[1, 2]) / 2, rel=1e-5)
    assert bad == pytest.approx(-float(lp[0, 0] + lp[1, 0]) / 2, rel=1e-5)


def test_appearance_head_loss_and_prediction_agree_on_the_order():
    """With the time head's bias giving tv < sofa < lamp < plant, the prediction is the option in
    that order, the pairwise loss of that answer is the hand value, and it is lower than for the
    reversed order (loss and prediction read the head the same way round)."""
    import torch

    from icml26.methods.spatial import experiment as E

    torch.manual_seed(0)
    model = E.SpatialQA(E.Config(hidden_size=8, layers=1, heads=1, frames=2), "none", 2)
    t = {"tv": 0.0, "sofa": 1.0, "lamp": 2.0, "plant": 3.0}
    with torch.no_grad():
        model.time_head.weight.zero_()
        model.time_head.bias.zero_()
        for c, v in t.items():
            model.time_head.bias[E.CLASS_IDS[c]] = v
    opts = [
        "A. plant, lamp, sofa, tv",
        "B. sofa, tv, lamp, plant",
        "C. tv, sofa, lamp, plant",
        "D. lamp, tv, plant, sofa",
    ]
    q = {"task": "obj_appearance_order", "question_type": "multiple_choice", "options": opts, "answer": "C"}
    h = torch.randn(1, 8)
    assert E.predict(model, h, [q]) == ["C"]
    good = float(E.batch_loss(model, h, [q]))
    bad = float(E.batch_loss(model, h, [{**q, "answer": "A"}]))
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    assert good == pytest.approx(sum(sp(-d) for d in (1, 2, 3, 1, 2, 1)) / 6, rel=1e-5)
    assert bad == pytest.approx(sum(sp(d) for d in (1, 2, 3, 1, 2, 1)) / 6, rel=1e-5) and bad > good
