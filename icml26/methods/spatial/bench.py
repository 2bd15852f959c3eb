"""A deterministic VSI-style spatial-QA benchmark rendered with POV-Ray (RECON; the question
types, templates and scoring follow VSI-Bench, Yang et al. CVPR 2025, vision-x-nyu/thinking-in-space).

Generator (seeded, one ``numpy`` generator per scene from (seed, scene index)):
1. A room W x D x 2.8 m (W, D in [room_min_m, room_max_m]), floor/walls/ceiling, two lights.
2. objects_min..objects_max objects of 9 primitive-built classes with metric size ranges
   (table, chair, sofa, bed, cabinet, lamp, plant, tv, box), axis-aligned, placed without
   overlap in the ring between the camera path and the walls.
3. views_min..views_max pinhole views along an ellipse around the room centre (one turn), each
   looking across the room; exact K, camera-to-world, depth and instance ids
   (:mod:`icml26.core.data.renders`).
4. Questions from the scene graph (objects unique in their class are the ones named, as
   VSI-Bench does): object_counting, object_abs_distance, object_size_estimation,
   room_size_estimation, object_rel_distance, object_rel_direction_easy/medium/hard,
   obj_appearance_order and route_planning (``questions.py``).

route_planning is RECON (VSI-Bench builds routes on the scanned rooms' navigable floor; ours are
polylines of straight legs between object centres with VSI-Bench's three turn words); the
margins and the turn rule: docs/geo-fusion.md, "Specification"."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from icml26.core.data import renders as R
from icml26.core.errors import InputError
from icml26.core.output import atomic_write_text, to_json
from icml26.methods.spatial.questions import (  # noqa: F401  (re-exported)
    ROUTE_TURNS,
    _letters,
    box_distance,
    direction_angle,
    first_appearance,
    make_questions,
    turn_angle,
    turn_word,
)
from icml26.methods.spatial.scoring import TASKS

CLASSES = ("table", "chair", "sofa", "bed", "cabinet", "lamp", "plant", "tv", "box")
# size ranges (x, y, z) in metres; colour (linear rgb) of the class's main part
SIZES = {
    "table": ((0.8, 1.8), (0.70, 0.80), (0.6, 1.0)),
    "chair": ((0.40, 0.55), (0.80, 1.00), (0.40, 0.55)),
    "sofa": ((1.5, 2.2), (0.70, 0.90), (0.8, 1.0)),
    "bed": ((1.4, 2.0), (0.90, 1.10), (1.9, 2.1)),
    "cabinet": ((0.5, 1.2), (0.80, 2.00), (0.4, 0.6)),
    "lamp": ((0.3, 0.5), (1.20, 1.80), (0.3, 0.5)),
    "plant": ((0.3, 0.6), (0.50, 1.20), (0.3, 0.6)),
    "tv": ((0.8, 1.4), (0.60, 0.90), (0.12, 0.2)),
    "box": ((0.3, 0.5), (0.30, 0.60), (0.3, 0.5)),
}
COLOURS = {
    "table": (0.35, 0.18, 0.07),
    "chair": (0.75, 0.08, 0.06),
    "sofa": (0.08, 0.15, 0.6),
    "bed": (0.85, 0.75, 0.8),
    "cabinet": (0.1, 0.45, 0.12),
    "lamp": (0.9, 0.8, 0.1),
    "plant": (0.05, 0.25, 0.05),
    "tv": (0.03, 0.03, 0.03),
    "box": (0.9, 0.4, 0.05),
}
ROOM_HEIGHT_M = 2.8


@dataclass(frozen=True)
class BenchConfig:
    scenes: int = field(default=40, metadata={"sized": 100_000})  # rooms rendered
    views_min: int = 8  # fewest camera views of a scene
    views_max: int = 16  # most camera views of a scene (<= 64)
    width: int = field(default=128, metadata={"sized": 2048, "unit": "pixels"})  # render width
    height: int = field(default=96, metadata={"sized": 2048, "unit": "pixels"})  # render height
    hfov_deg: float = 75.0  # horizontal field of view of the camera
    objects_min: int = 6  # fewest objects in a room
    objects_max: int = 9  # most objects in a room (<= 12)
    room_min_m: float = 4.0  # smallest room side (metres)
    room_max_m: float = 8.0  # largest room side (metres)
    min_pixels: int = 20  # an object counts as seen in a view with at least this many pixels
    max_questions_per_task: int = 2  # questions per task and scene
    hdr: bool = False  # also write hdr/ (and ldr/ at the HDR-NeRF exposures)

    def __post_init__(self):
        if not 1 <= self.scenes <= 100_000:
            raise ValueError(f"scenes must be in [1, 100000], got {self.scenes}")
        if not 2 <= self.views_min <= self.views_max <= 64:
            raise ValueError(f"need 2 <= views_min <= views_max <= 64, got {self.views_min}, {self.views_max}")
        if not 1 <= self.objects_min <= self.objects_max <= 12:
            raise ValueError(f"need 1 <= objects_min <= objects_max <= 12, got {self.objects_min}, {self.objects_max}")
        if not 3.0 <= self.room_min_m <= self.room_max_m <= 15.0:
            raise ValueError(f"need 3 <= room_min_m <= room_max_m <= 15, got {self.room_min_m}, {self.room_max_m}")
        if not (16 <= self.width <= 2048 and 16 <= self.height <= 2048):
            raise ValueError(f"width/height must be in [16, 2048], got {self.width}x{self.height}")
        if not 20.0 <= self.hfov_deg <= 120.0:
            raise ValueError(f"hfov_deg must be in [20, 120], got {self.hfov_deg}")


# --------------------------------------------------------------------------- scene graph


def generate_layout(rng: np.random.Generator, cfg: BenchConfig) -> dict:
    """Room and objects (scene.json content): positions are box centres, sizes (x, y, z) in m."""
    W = float(np.round(rng.uniform(cfg.room_min_m, cfg.room_max_m), 2))
    D = float(np.round(rng.uniform(cfg.room_min_m, cfg.room_max_m), 2))
    n = int(rng.integers(cfg.objects_min, cfg.objects_max + 1))
    distinct = min(n, len(CLASSES), max(1, n - int(rng.integers(0, 3))))  # 0-2 repeated classes (for counting)
    chosen = [CLASSES[i] for i in rng.permutation(len(CLASSES))[:distinct]]
    wanted = chosen + [chosen[int(rng.integers(distinct))] for _ in range(n - distinct)]
    objs: list[dict] = []
    for cls in wanted:  # up to 300 placements per object; one that does not fit is left out
        for _ in range(300):
            (x0, x1), (y0, y1), (z0, z1) = SIZES[cls]
            sx, sy, sz = (float(np.round(rng.uniform(a, b), 3)) for a, b in ((x0, x1), (y0, y1), (z0, z1)))
            if rng.random() < 0.5:
                sx, sz = sz, sx
            px = float(rng.uniform(-W / 2 + sx / 2 + 0.05, W / 2 - sx / 2 - 0.05))
            pz = float(rng.uniform(-D / 2 + sz / 2 + 0.05, D / 2 - sz / 2 - 0.05))
            # keep out of the camera zone (|x| < 0.32 W, |z| < 0.32 D)
            if abs(px) - sx / 2 < 0.32 * W and abs(pz) - sz / 2 < 0.32 * D:
                continue
            if any(
                abs(px - o["position"][0]) < (sx + o["size"][0]) / 2 + 0.15
                and abs(pz - o["position"][2]) < (sz + o["size"][2]) / 2 + 0.15
                for o in objs
            ):
                continue
            objs.append(
                {
                    "id": len(objs) + 1,
                    "class": cls,
                    "size": [sx, sy, sz],
                    "position": [round(px, 4), sy / 2, round(pz, 4)],
                }
            )
            break
    return {
        "units": "m",
        "up": "+y",
        "room": {"width_m": W, "depth_m": D, "height_m": ROOM_HEIGHT_M, "floor_area_m2": round(W * D, 4)},
        "objects": objs,
    }


def camera_path(rng: np.random.Generator, layout: dict, cfg: BenchConfig) -> list[R.Camera]:
    W, D = layout["room"]["width_m"], layout["room"]["depth_m"]
    n = int(rng.integers(cfg.views_min, cfg.views_max + 1))
    a0 = float(rng.uniform(0, 2 * math.pi))
    K = R.intrinsics(cfg.width, cfg.height, cfg.hfov_deg)
    cams = []
    for i in range(n):
        a = a0 + 2 * math.pi * i / n
        eye = np.array([0.22 * W * math.cos(a), 1.5 + 0.1 * math.sin(3 * a), 0.22 * D * math.sin(a)])
        target = np.array([-0.45 * W * math.cos(a + 0.35), 0.7, -0.45 * D * math.sin(a + 0.35)])
        cams.append(R.Camera(cfg.width, cfg.height, K, R.look_at(eye, target)))
    return cams


def _box(lo, hi) -> str:
    return f"box {{ {R.pov_vec(lo)}, {R.pov_vec(hi)} }}"


def _cyl(a, b, r) -> str:
    return f"cylinder {{ {R.pov_vec(a)}, {R.pov_vec(b)}, {r:.6g} }}"


def object_shape(o: dict) -> str:
    """SDL union of one object, built from primitives inside its box (world coordinates)."""
    cls = o["class"]
    (sx, sy, sz), (px, _, pz) = o["size"], o["position"]
    x0, x1, z0, z1 = px - sx / 2, px + sx / 2, pz - sz / 2, pz + sz / 2
    parts: list[str] = []
    leg = 0.05
    if cls in ("table", "chair"):
        top = sy if cls == "table" else 0.47
        parts.append(_box([x0, top - 0.05, z0], [x1, top, z1]))
        for lx, lz in ((x0, z0), (x1 - leg, z0), (x0, z1 - leg), (x1 - leg, z1 - leg)):
            parts.append(_box([lx, 0, lz], [lx + leg, top - 0.05, lz + leg]))
        if cls == "chair":
            parts.append(_box([x0, top, z1 - 0.06], [x1, sy, z1]))
    elif cls == "sofa":
        parts += [
            _box([x0, 0, z0], [x1, 0.45, z1]),
            _box([x0, 0.45, z1 - 0.2], [x1, sy, z1]),
            _box([x0, 0.45, z0], [x0 + 0.15, 0.65, z1]),
            _box([x1 - 0.15, 0.45, z0], [x1, 0.65, z1]),
        ]
    elif cls == "bed":
        parts += [_box([x0, 0, z0], [x1, 0.55, z1]), _box([x0, 0, z1 - 0.08], [x1, sy, z1])]
    elif cls == "lamp":
        r = min(sx, sz) / 2
        parts += [
            _cyl([px, 0, pz], [px, 0.03, pz], r * 0.6),
            _cyl([px, 0, pz], [px, sy - 0.3, pz], 0.025),
            f"cone {{ {R.pov_vec([px, sy - 0.35, pz])}, {r:.6g}, {R.pov_vec([px, sy, pz])}, {r * 0.5:.6g} }}",
        ]
    elif cls == "plant":
        r = min(sx, sz) / 2
        pot = min(0.35, 0.35 * sy)
        parts += [
            _cyl([px, 0, pz], [px, pot, pz], r * 0.6),
            f"sphere {{ <0, 0, 0>, 1 scale <{r:.6g}, {(sy - pot) / 2:.6g}, {r:.6g}> "
            f"translate {R.pov_vec([px, pot + (sy - pot) / 2, pz])} }}",
        ]
    elif cls == "tv":
        parts += [_box([x0, 0, z0], [x1, 0.04, z1]), _box([px - 0.03, 0, pz - 0.03], [px + 0.03, sy * 0.35, pz + 0.03])]
        if sx >= sz:  # screen across the longer side, thin along the other
            parts.append(_box([x0, sy * 0.35, pz - 0.03], [x1, sy, pz + 0.03]))
        else:
            parts.append(_box([px - 0.03, sy * 0.35, z0], [px + 0.03, sy, z1]))
    else:  # cabinet, box
        parts.append(_box([x0, 0, z0], [x1, sy, z1]))
    return "union { " + " ".join(parts) + " }"


def pov_objects(layout: dict) -> list[R.PovObject]:
    W, D, H = layout["room"]["width_m"], layout["room"]["depth_m"], layout["room"]["height_m"]
    t = 0.1
    room = [
        R.PovObject(
            _box([-W / 2 - t, -t, -D / 2 - t], [W / 2 + t, 0, D / 2 + t]),
            "pigment { checker rgb 0.55 rgb 0.42 scale 0.5 } finish { diffuse 0.8 }",
            0,
        ),
        R.PovObject(
            _box([-W / 2 - t, H, -D / 2 - t], [W / 2 + t, H + t, D / 2 + t]),
            "pigment { rgb 0.8 } finish { diffuse 0.7 }",
            0,
        ),
        R.PovObject(_box([-W / 2 - t, 0, -D / 2 - t], [-W / 2, H, D / 2 + t]), "pigment { rgb <0.75, 0.7, 0.6> }", 0),
        R.PovObject(_box([W / 2, 0, -D / 2 - t], [W / 2 + t, H, D / 2 + t]), "pigment { rgb <0.7, 0.72, 0.6> }", 0),
        R.PovObject(_box([-W / 2, 0, -D / 2 - t], [W / 2, H, -D / 2]), "pigment { rgb <0.72, 0.68, 0.62> }", 0),
        R.PovObject(_box([-W / 2, 0, D / 2], [W / 2, H, D / 2 + t]), "pigment { rgb <0.68, 0.7, 0.66> }", 0),
    ]
    objs = [
        R.PovObject(
            object_shape(o),
            "pigment { rgb <%.4g, %.4g, %.4g> } finish { diffuse 0.8 specular 0.1 }" % COLOURS[o["class"]],
            int(o["id"]),
        )
        for o in layout["objects"]
    ]
    return room + objs


def lights(layout: dict) -> str:
    W, D, H = layout["room"]["width_m"], layout["room"]["depth_m"], layout["room"]["height_m"]
    return (
        f"light_source {{ {R.pov_vec([0.2 * W, H - 0.2, 0.2 * D])} color rgb 1.1 }}\n"
        f"light_source {{ {R.pov_vec([-0.25 * W, H - 0.2, -0.2 * D])} color rgb 0.5 shadowless }}\n"
    )


# --------------------------------------------------------------------------- questions


# --------------------------------------------------------------------------- writing a benchmark


def scene_rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(index), 2602_06037])


def render_one(folder: Path, index: int, seed: int, cfg: BenchConfig) -> tuple[dict, list[np.ndarray]]:
    """Generate and render scene ``index`` into ``folder`` (skipped when its cameras.json exists)."""
    rng = scene_rng(seed, index)
    layout = generate_layout(rng, cfg)
    cams = camera_path(rng, layout, cfg)
    if not (folder / "cameras.json").is_file():
        res = R.render_scene(
            pov_objects(layout),
            cams,
            lights=lights(layout),
            hdr=cfg.hdr,
            exposures_s=R.HDR_NERF_EXPOSURES_S if cfg.hdr else (),
            depth_max_m=32.0,
        )
        R.write_scene(folder, cams, layout, res)
    rs = R.read_scene(folder)
    return rs.scene, [rs.instances(i) for i in range(len(rs))]


SETTINGS_FILE = "make-bench.json"


def _settings(cfg: BenchConfig, seed: int, first_index: int) -> dict:
    # the scene count is left out: scene k depends only on (seed, first_index + k, config), so a rerun may ask for more
    conf = {k: v for k, v in cfg.__dict__.items() if k != "scenes"}
    return json.loads(json.dumps({"seed": int(seed), "first_index": int(first_index), "config": conf}))


def check_out(out_dir: str | Path, cfg: BenchConfig, *, seed: int, first_index: int = 0) -> None:
    """Refuse (InputError) an --out folder whose scenes were rendered with other settings: a scene
    folder is reused when its cameras.json exists (that is how a stopped make-bench resumes), so
    scenes of another seed, first index or config would be mixed in silently."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {str(out)!r} is a file; give a folder")
    f = out / SETTINGS_FILE
    if f.is_file():
        try:
            old = json.loads(f.read_text())
        except ValueError:
            old = None
        new = _settings(cfg, seed, first_index)
        if old != new:
            diff = sorted(k for k in set(new) | set(old or {}) if (old or {}).get(k) != new.get(k))
            raise InputError(
                f"--out {str(out)!r} holds a benchmark made with other settings ({', '.join(diff) or 'unreadable'}"
                f" differ); rerun with the same settings to resume it, or choose a new folder"
            )
    elif (out / "scenes").is_dir() and any((out / "scenes").iterdir()):
        raise InputError(
            f"--out {str(out)!r} holds scenes/ but no {SETTINGS_FILE} (not made by this version of make-bench, "
            f"or from elsewhere); choose a new folder"
        )


def build(out_dir: str | Path, cfg: BenchConfig, *, seed: int, first_index: int = 0) -> Iterator[dict]:
    """Render the scenes and write ``questions.jsonl`` and ``bench.json``; one ``step`` record
    per scene, then one ``result`` per task (question counts). Resumes scene by scene."""
    R.require_povray()
    out = Path(out_dir)
    check_out(out, cfg, seed=seed, first_index=first_index)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / SETTINGS_FILE, json.dumps(_settings(cfg, seed, first_index), indent=1))
    allq: list[dict] = []
    for s in range(cfg.scenes):
        idx = first_index + s
        name = f"scene_{idx:04d}"
        layout, inst = render_one(out / "scenes" / name, idx, seed, cfg)
        ff = first_appearance(inst, [o["id"] for o in layout["objects"]], cfg.min_pixels)
        qs = make_questions(layout, ff, scene_rng(seed + 1, idx), cfg)
        frames = [f"scenes/{name}/rgb/{i:03d}.png" for i in range(len(inst))]
        for k, q in enumerate(qs):
            allq.append(
                {
                    "id": f"{name}-{k:02d}",
                    "scene": name,
                    "task": q["task"],
                    "question_type": q["question_type"],
                    "question": q["question"],
                    **({"options": q["options"]} if "options" in q else {}),
                    "answer": q["answer"],
                    "frames": frames,
                    "objects": q["objects"],
                }
            )
        yield {
            "kind": "step",
            "scene": name,
            "views": len(inst),
            "objects": len(layout["objects"]),
            "questions": len(qs),
        }
    atomic_write_text(out / "questions.jsonl", "".join(to_json(q) + "\n" for q in allq))
    per: dict[str, int] = {}
    for q in allq:
        per[q["task"]] = per.get(q["task"], 0) + 1
    atomic_write_text(
        out / "bench.json",
        json.dumps(
            {"seed": seed, "first_index": first_index, "config": cfg.__dict__, "questions": len(allq), "per_task": per},
            indent=1,
        ),
    )
    for t, n in sorted(per.items()):
        yield {"kind": "result", "task": t, "questions": n}


def read_questions(bench_dir: str | Path) -> list[dict]:
    p = Path(bench_dir) / "questions.jsonl"
    if not p.is_file():
        raise InputError(
            f"{str(bench_dir)!r} is not a benchmark folder (no questions.jsonl; run `icml26 geo-fusion make-bench`)"
        )

    out = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{str(p)!r} line {i}"
        try:
            q = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(q, dict):
            raise InputError(f"{where}: expected a JSON object (one question), got {type(q).__name__}")
        for key in ("id", "scene", "task", "question_type", "answer"):
            if not isinstance(q.get(key), str):
                raise InputError(f"{where}: field {key!r} must be a string (got {q.get(key)!r})")
        if q["task"] not in TASKS:
            raise InputError(f"{where}: unknown task {q['task']!r} (VSI-Bench tasks: {', '.join(TASKS)})")
        if "options" in q and not (isinstance(q["options"], list) and all(isinstance(o, str) for o in q["options"])):
            raise InputError(f"{where}: field 'options' must be a list of strings")
        out.append(q)
    if not out:
        raise InputError(f"{str(p)!r} holds no questions (rerun `icml26 geo-fusion make-bench`)")
    return out
