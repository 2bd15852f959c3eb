"""Peer venvs (icml26.core.peers, ``make peers``): located under the user cache by name and
version, ready only once stamped for their row of the table, found by the benchmarks and the
parity tests by themselves; no machine's absolute paths in code, docs, benchmarks or tests."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from icml26.core import peers as P

ROOT = Path(__file__).resolve().parents[2]


def _fake_venv(name: str, stamp: dict | None) -> Path:
    venv = P.peer_dir(name)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    if stamp is not None:
        (venv / P.STAMP).write_text(json.dumps(stamp))
    return venv / "bin" / "python"


def test_peer_venvs_live_in_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    assert P.peer_dir("kvpress") == tmp_path / "peers" / "kvpress-0.5.5"
    assert P.peer_dir("mctx") == tmp_path / "peers" / f"mctx-{P.PEERS['mctx'].version}"
    with pytest.raises(KeyError, match="unknown peer 'nosuch'"):
        P.peer_dir("nosuch")


def test_find_peer_needs_the_stamp_of_its_row(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    monkeypatch.delenv("ICML26_PEER_KVPRESS_PYTHON", raising=False)
    assert P.find_peer("kvpress") is None  # nothing built
    py = _fake_venv("kvpress", None)
    assert P.find_peer("kvpress") is None  # a build stopped half-way (no stamp)
    want = P.wanted("kvpress")
    (py.parent.parent / P.STAMP).write_text(json.dumps({**want, "specs": ["kvpress==0.5.4"]}))
    assert P.find_peer("kvpress") is None  # built for another row
    drift = {**want, "requirements": want["requirements"][:-1]}
    (py.parent.parent / P.STAMP).write_text(json.dumps(drift))
    assert P.find_peer("kvpress") == py  # the project's dependencies moved: usable ...
    assert P.find_peer("kvpress", exact=True) is None  # ... but `make peers` reinstalls
    (py.parent.parent / P.STAMP).write_text(json.dumps(want))
    assert P.find_peer("kvpress", exact=True) == py
    monkeypatch.setenv("ICML26_PEER_KVPRESS_PYTHON", sys.executable)
    assert P.find_peer("kvpress") == Path(sys.executable)


def test_rows_pin_their_peer_and_hold_torch():
    kv = P.wanted("kvpress")
    assert kv["torch"] == "torch==2.13.0" and "kvpress==0.5.5" in kv["requirements"]
    # the project's dependencies (base + llm + test extras) go in, so our code runs there
    assert any(r.startswith("transformers") for r in kv["requirements"]) and any(
        r.startswith("pytest") for r in kv["requirements"]
    )
    assert not any(r.startswith("icml26") for r in kv["requirements"])
    mc = P.wanted("mctx")
    assert mc["torch"] is None and any(r.startswith("mctx==") for r in mc["requirements"])
    for p in P.PEERS.values():
        assert any(s.startswith(f"{p.name}==") for s in p.specs), p


def test_project_requirements_expand_self_references():
    reqs = P.project_requirements(("all",))
    assert any(r.startswith("gymnasium") for r in reqs) and any(r.startswith("transformers") for r in reqs)
    assert not any(r.startswith("icml26") for r in reqs)


def test_peer_env_runs_this_checkout():
    env = P.peer_env("kvpress", base={"PYTHONPATH": "elsewhere", "VIRTUAL_ENV": "x"})
    assert env["PYTHONPATH"].split(":")[0] == str(ROOT) and "VIRTUAL_ENV" not in env


def test_list_reports_each_peer(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "icml26.core.peers", "--list"],
        capture_output=True,
        text=True,
        env={"ICML26_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [(x[0], x[1]) for x in rows] == [(n, "missing") for n in P.PEERS]
    assert rows[0][2] == str(tmp_path / "peers" / "kvpress-0.5.5")


def test_benchmarks_find_their_peers_by_themselves():
    ev = (ROOT / "benchmarks" / "evict_kv.py").read_text()
    assert 'find_peer("kvpress")' in ev and "--kvpress-python" in ev
    mc = (ROOT / "benchmarks" / "mcts.py").read_text()
    assert 'find_peer("mctx")' in mc and "--mctx-python" in mc


def test_no_absolute_machine_paths_in_code_docs_benchmarks_tests():
    pat = re.compile(r"(?<![\w.])/(?:tmp|work|root)/")
    me = Path(__file__).resolve()
    files = [ROOT / "README.md"] + [
        f
        for d in ("icml26", "docs", "benchmarks", "tests")
        for f in (ROOT / d).rglob("*")
        if f.is_file() and f.suffix in (".py", ".md", ".sh", ".yaml", ".cpp", ".cu", ".h") and f != me
    ]
    hits = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in files
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if pat.search(line)
    ]
    assert not hits, hits
