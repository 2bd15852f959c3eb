"""The ServerApp of ``icml26 fed-lora`` for Flower deployments and ``flwr run`` (local simulation or
SuperLinks): waits for the SuperNodes, then the same round loop as the in-process runs
(harness.run_on_grid); the ClientApp is apps.client_app."""

from __future__ import annotations

import time

from icml26.core.output import stream
from icml26.core.preamble import Run
from icml26.methods.federated.apps import _config, run_config_text
from icml26.methods.federated.harness import run_on_grid

try:
    from flwr.serverapp import ServerApp
except ImportError:  # pragma: no cover
    ServerApp = None


def wait_for_nodes(grid, n: int, timeout_s: float, poll_s: float = 0.5) -> list[int]:
    """Node ids once at least ``n`` SuperNodes are connected; RuntimeError after ``timeout_s`` s."""
    t0 = time.monotonic()
    while True:
        ids = list(grid.get_node_ids())
        if len(ids) >= n:
            return ids
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"{len(ids)} SuperNodes connected after {timeout_s:.0f} s; the run needs {n}")
        time.sleep(poll_s)


def serve(grid, run_config: dict) -> list[dict]:
    """The deployment's round loop: every strategy of the run config on ``grid`` (Flower's grid of
    the connected SuperNodes), after waiting for the recipe's number of nodes; the records are the
    simulation's (``config`` first, ``summary`` last), on stdout and, when ``out`` is set, in
    ``out/records.jsonl`` and ``out/config.yaml``. Returns the records."""
    cfg = _config(run_config_text(run_config))
    seed = int(run_config.get("seed", 0))
    out = str(run_config.get("out", "") or "") or None
    wait_for_nodes(grid, cfg.min_clients, float(run_config.get("wait_nodes_s", 300)))
    return stream(run_on_grid(cfg, seed, lambda: grid), Run("fed-lora", cfg=cfg, seed=seed, out=out), quiet=True)


if ServerApp is not None:
    server_app = ServerApp()

    @server_app.main()
    def _server_main(grid, context) -> None:
        """Deployment entry (``flwr run`` against a SuperLink): :func:`serve`."""
        serve(grid, dict(context.run_config))
else:  # pragma: no cover
    server_app = None
