"""Multi-exposure multi-view scenes rendered here with POV-Ray (offline), in the scene-folder
layout of :mod:`icml26.core.data.renders` (cameras.json, hdr/, ldr/<t>/, depth/, rgb/).

RECON data plan (docs/hdr-gs.md, "Data plan"): a floor and two walls, three
primitives of seeded colours, sizes and positions, an emissive lamp with a point light inside it
and no ambient light, so lit faces, the lamp and the shadows span more than 10 stops; views on an
arc around the objects; LDR images synthesized from the HDR at HDR-NeRF's five exposures by the
documented camera response of renders.py. Even views train, odd views test (HDR-NeRF).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from icml26.core.data import renders as R


def _rgb(c) -> str:
    return f"rgb <{c[0]:.4f}, {c[1]:.4f}, {c[2]:.4f}>"


def scene_objects(seed: int):
    """(objects, lights, scene_json) of scene ``seed``."""
    rng = np.random.default_rng([20260128, seed])
    diff = "finish { ambient 0.004 diffuse 0.75 specular 0.05 }"
    # world coordinates are right-handed; shapes are written through pov_vec (x, y, -z)
    objs = [
        R.PovObject(
            f"box {{ {R.pov_vec((-3, -0.1, -3))}, {R.pov_vec((3, 0, 3))} }}",
            f"pigment {{ {_rgb(0.4 + 0.4 * rng.random(3))} }} {diff}",
            1,
        ),
        R.PovObject(
            f"box {{ {R.pov_vec((-3, 0, -3.0))}, {R.pov_vec((3, 4, -2.9))} }}",
            f"pigment {{ {_rgb(0.3 + 0.5 * rng.random(3))} }} {diff}",
            2,
        ),
        R.PovObject(
            f"union {{ box {{ {R.pov_vec((-3.0, 0, -3))}, {R.pov_vec((-2.9, 4, 3))} }} "
            f"box {{ {R.pov_vec((2.9, 0, -3))}, {R.pov_vec((3.0, 4, 3))} }} }}",
            f"pigment {{ {_rgb(0.3 + 0.5 * rng.random(3))} }} {diff}",
            3,
        ),
    ]
    info = []
    pos = [
        (-0.8 + 0.3 * rng.standard_normal(), 0, -0.2 + 0.3 * rng.standard_normal()),
        (0.8 + 0.3 * rng.standard_normal(), 0, -0.4 + 0.3 * rng.standard_normal()),
        (0.1 + 0.3 * rng.standard_normal(), 0, 0.7 + 0.2 * rng.standard_normal()),
    ]
    r = 0.35 + 0.15 * rng.random()
    c = (pos[0][0], r, pos[0][2])
    objs.append(
        R.PovObject(
            f"sphere {{ {R.pov_vec(c)}, {r:.4f} }}", f"pigment {{ {_rgb(0.2 + 0.7 * rng.random(3))} }} {diff}", 4
        )
    )
    info.append({"id": 4, "class": "sphere", "size": [2 * r] * 3, "position": list(c)})
    h = 0.4 + 0.3 * rng.random()
    b0, b1 = (pos[1][0] - 0.3, 0, pos[1][2] - 0.3), (pos[1][0] + 0.3, h, pos[1][2] + 0.3)
    objs.append(
        R.PovObject(
            f"box {{ {R.pov_vec(b0)}, {R.pov_vec(b1)} rotate <0, {20 + 40 * rng.random():.2f}, 0> }}",
            f"pigment {{ {_rgb(0.2 + 0.7 * rng.random(3))} }} {diff}",
            5,
        )
    )
    info.append({"id": 5, "class": "box", "size": [0.6, h, 0.6], "position": [pos[1][0], h / 2, pos[1][2]]})
    ch = 0.5 + 0.4 * rng.random()
    objs.append(
        R.PovObject(
            f"cylinder {{ {R.pov_vec(pos[2])}, {R.pov_vec((pos[2][0], ch, pos[2][2]))}, 0.22 }}",
            f"pigment {{ {_rgb(0.2 + 0.7 * rng.random(3))} }} {diff}",
            6,
        )
    )
    info.append({"id": 6, "class": "cylinder", "size": [0.44, ch, 0.44], "position": [pos[2][0], ch / 2, pos[2][2]]})
    lamp = (1.2 * rng.standard_normal() * 0.5, 1.6 + 0.3 * rng.random(), 0.3 * rng.standard_normal())
    emit = 6.0 + 4.0 * rng.random()
    objs.append(
        R.PovObject(
            f"sphere {{ {R.pov_vec(lamp)}, 0.12 no_shadow }}",
            f"pigment {{ rgb <1, 0.9, 0.75> }} finish {{ ambient 0 diffuse 0 emission {emit:.3f} }}",
            7,
        )
    )
    info.append({"id": 7, "class": "lamp", "size": [0.24] * 3, "position": list(lamp), "emission": emit})
    power = 0.3 + 0.15 * rng.random()
    lights = (
        f"light_source {{ {R.pov_vec(lamp)} color rgb <{power:.3f}, {0.9 * power:.3f}, {0.75 * power:.3f}> }}\n"
        "background { rgb 0 }"
    )
    return (
        objs,
        lights,
        {"units": "m", "up": "y", "objects": info, "seed": seed, "generator": "icml26.methods.splatting.scenes"},
    )


def arc_cameras(
    n_views: int,
    size: int,
    *,
    radius: float = 3.6,
    height: float = 1.4,
    hfov_deg: float = 55.0,
    spread_deg: float = 100.0,
):
    """``n_views`` cameras on an arc of ``spread_deg`` degrees around the origin, looking at (0, 0.45, 0)."""
    K = R.intrinsics(size, size, hfov_deg)
    cams = []
    for i in range(n_views):
        a = math.radians(-spread_deg / 2 + spread_deg * i / max(1, n_views - 1))
        eye = (radius * math.sin(a), height, radius * math.cos(a))
        cams.append(R.Camera(size, size, K, R.look_at(eye, (0.0, 0.45, 0.0))))
    return cams


def make_scene(folder: str | Path, seed: int, *, views: int = 16, size: int = 64) -> Path:
    """Render scene ``seed`` into ``folder`` (renders layout, HDR + 5 LDR exposures + depth).
    Raises MissingDataError (exit 2, with the install command) without povray."""
    R.require_povray()
    objs, lights, info = scene_objects(seed)
    cams = arc_cameras(views, size)
    res = R.render_scene(objs, cams, lights=lights, exposures_s=R.HDR_NERF_EXPOSURES_S, depth_max_m=16.0)
    info["split"] = {"train": "even views", "test": "odd views"}
    return R.write_scene(folder, cams, info, res)
