"""What the hdr-gs command calls in this package (commands/hdr_gs.py).

Every method package has an ``api`` module: the one door a command file goes through (beside
the package's torch-free config module). tests/test_house.py checks it.
"""

from icml26.methods.splatting.hdr_gs import (
    LPIPS_NOTE,
    evaluate,
    load_ckpt,
    load_scene,
    open_scene,
    render_views,
    run,
    scene_folders,
)

__all__ = ["LPIPS_NOTE", "evaluate", "load_ckpt", "load_scene", "open_scene", "render_views", "run", "scene_folders"]
