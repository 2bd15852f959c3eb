"""fed-lora as a Flower deployment: the Flower App bundle (icml26/methods/federated/flower_app),
the run config (recipe / set / JSON config), the ServerApp's round loop on a grid, and (slow) a
real two-process loopback deployment -- ``flower-superlink`` plus two ``flower-supernode``
processes on 127.0.0.1 and ``flwr run`` of the app -- whose records equal the in-process run's."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("peft")

from conftest import need_debian  # noqa: E402

from icml26.core.errors import InputError  # noqa: E402
from icml26.methods.federated import apps, deploy, harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "icml26" / "methods" / "federated" / "flower_app"
TINY = "recipes/fed-lora/tiny.yaml"
# 2 clients, 2 rounds of Het-CPFLoRA: round 2 uses each client's personal slots kept in its
# Context between two ClientApp processes
SETS = "clients=2 ranks=[4,8] personal_ranks=[1,2] rounds=2 strategies=[het-cpflora]"


@pytest.fixture(scope="module")
def debian():
    need_debian("wordnet-base", "bible-kjv", "fortunes")


def test_flower_app_bundle_validates_builds_and_names_the_apps(monkeypatch):
    from flwr.cli.build import build_fab_from_disk
    from flwr.cli.config_utils import load_and_validate

    config, warnings = load_and_validate(APP / "pyproject.toml")
    assert config is not None, warnings
    comp = config["tool"]["flwr"]["app"]["components"]
    assert comp == {"serverapp": "fed_lora_app:server_app", "clientapp": "fed_lora_app:client_app"}
    assert set(config["tool"]["flwr"]["app"]["config"]) == {"recipe", "set", "config", "seed", "out", "wait_nodes_s"}
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(APP))).namelist()
    assert "fed_lora_app.py" in names and "pyproject.toml" in names
    monkeypatch.syspath_prepend(str(APP))
    import fed_lora_app

    assert fed_lora_app.server_app is deploy.server_app and fed_lora_app.client_app is apps.client_app


def test_run_config_from_recipe_set_or_json():
    from icml26.core.recipe import config_dict, resolve

    text = apps.run_config_text({"recipe": TINY, "set": "clients=2 ranks=[4,8] personal_ranks=[1,2]", "config": ""})
    cfg = apps._config(text)
    assert (cfg.clients, cfg.ranks, cfg.personal_ranks, cfg.model) == (2, (4, 8), (1, 2), "tiny-llama")
    want = resolve(harness.Config, "fed-lora", TINY, ["clients=2", "ranks=[4,8]", "personal_ranks=[1,2]"])
    assert json.loads(text) == config_dict(want)
    js = json.dumps(config_dict(harness.Config(model="tiny-llama", clients=1, ranks=(4,), personal_ranks=(1,))))
    assert apps.run_config_text({"recipe": TINY, "config": js}) == js  # the JSON config wins
    with pytest.raises(InputError):
        apps.run_config_text({"recipe": TINY, "set": "clients=2"})  # 3 ranks for 2 clients
    with pytest.raises(InputError):
        apps.run_config_text({"recipe": "recipes/fed-lora/no-such.yaml"})


class _Grid:
    def __init__(self, ids):
        self.ids = ids

    def get_node_ids(self):
        return self.ids


def test_wait_for_nodes():
    assert deploy.wait_for_nodes(_Grid([5, 7]), 2, 0.0) == [5, 7]
    with pytest.raises(RuntimeError, match="1 SuperNodes connected .* needs 2"):
        deploy.wait_for_nodes(_Grid([5]), 2, 0.0, poll_s=0.0)


def _strip(rec):
    return {k: v for k, v in rec.items() if k not in ("wall_s", "round_s")}


def test_server_loop_on_a_grid_writes_the_simulation_records(debian, tmp_path):
    """The ServerApp's ``serve`` (what ``flwr run`` starts) on an in-process grid of the same
    ClientApp: the same records.jsonl as ``icml26 fed-lora`` in one process."""
    rc = {
        "recipe": TINY,
        "set": "clients=2 ranks=[4,8] personal_ranks=[1,2] rounds=1 strategies=[het-cpflora]",
        "seed": 3,
        "out": str(tmp_path / "dep"),
        "wait_nodes_s": 0,
    }
    cfg = apps._config(apps.run_config_text(rc))
    got = deploy.serve(apps.InProcessGrid.for_run(cfg, 3), rc)
    lines = [json.loads(x) for x in (tmp_path / "dep" / "records.jsonl").read_text().splitlines()]
    assert [_strip(r) for r in lines] == [_strip(r) for r in got]
    want = list(harness.run(cfg, seed=3))
    assert [r["kind"] for r in lines] == ["config", "round", "result", "summary"]
    assert [_strip(r) for r in lines[1:]] == [_strip(r) for r in want]
    assert lines[0]["seed"] == 3 and lines[0]["clients"] == 2


# ----------------------------------------------------------------------------- loopback deployment


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _descendants(pid):
    """Every process below ``pid`` (from /proc): Flower starts SuperExec, ServerApp and ClientApp
    processes in sessions of their own."""
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _flower_pids(procs, seen):
    """Add to ``seen`` the live Flower processes below ``procs`` (sampled while the run goes on:
    ClientApp processes come and go, SuperExec outlives its parent for a moment)."""
    for p in procs:
        for pid in _descendants(p.pid) + [p.pid]:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"flwr" in cmd or b"flower" in cmd:
                seen.add(pid)
    return seen


def _stop(procs, seen):
    """SIGTERM to every Flower process started (directly or not) by the test, SIGKILL after 15 s."""
    _flower_pids(procs, seen)

    def signal_all(sig):
        for pid in sorted(seen):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue  # gone
            if b"flwr" in cmd or b"flower" in cmd:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    signal_all(signal.SIGTERM)
    t0 = time.monotonic()
    for p in procs:
        try:
            p.wait(timeout=max(0.1, 15 - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            pass
    _flower_pids(procs, seen)
    signal_all(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=15)


def _diagnosis(logs):
    text = {k: v.read_text(errors="replace") for k, v in logs.items()}
    why = ""
    if any("task-token authentication failed" in t for t in text.values()):
        why = (
            "ClientApp processes did not start within Flower's 30 s task window (HEARTBEAT_DEFAULT_INTERVAL; the "
            "machine is "
            f"too loaded: {os.getloadavg()}) -- "
        )
    return why + repr({k: t[-2500:] for k, t in text.items()})


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to tear the Flower processes down")
def test_two_process_loopback_deployment(debian, tmp_path):
    """flower-superlink + 2 flower-supernode (--insecure, free 127.0.0.1 ports), ``flwr run`` of
    the Flower App: 2 rounds of Het-CPFLoRA on the tiny recipe. The deployed run's records equal
    the in-process run's with the same seed (bytes and train losses, perplexities to float
    summation order), on the SuperNodes' own node ids; the processes are always torn down."""
    bindir = Path(sys.executable).parent
    link_port, *node_ports = _free_ports(3)
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
        f'address = "127.0.0.1:{link_port}"\ninsecure = true\n'
    )
    out = tmp_path / "out"
    (tmp_path / "run.toml").write_text(
        f'recipe = "{TINY}"\nset = "{SETS}"\nseed = 1\nout = "{out}"\nwait_nodes_s = 600\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    logs = {}

    def start(name, *args):
        logs[name] = tmp_path / f"{name}.log"
        return subprocess.Popen(
            [str(bindir / args[0]), *args[1:]],
            cwd=ROOT,
            env=env,
            stdout=logs[name].open("wb"),
            stderr=subprocess.STDOUT,
        )

    procs, seen = [], set()
    deadline = time.monotonic() + 1200
    try:
        procs.append(
            start(
                "superlink",
                "flower-superlink",
                "--insecure",
                "--port",
                str(link_port),
                "--disable-runtime-dependency-installation",
            )
        )
        for i, port in enumerate(node_ports):
            procs.append(
                start(
                    f"supernode{i}",
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{link_port}",
                    "--port",
                    str(port),
                    "--node-config",
                    f"partition-id={i}",
                )
            )
        # flwr run submits the app (retrying while the SuperLink starts); the ServerApp waits for both nodes
        while True:
            r = subprocess.run(
                [str(bindir / "flwr"), "run", str(APP), "loopback", "--run-config", str(tmp_path / "run.toml")],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if r.returncode == 0:
                break
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), r.stdout + r.stderr
            time.sleep(3)
        assert "Successfully started run" in r.stdout, r.stdout + r.stderr
        rec_file = out / "records.jsonl"
        while not (rec_file.is_file() and '"kind": "summary"' in rec_file.read_text()):
            assert all(p.poll() is None for p in procs), _diagnosis(logs)
            assert not (out / "interrupted.json").is_file(), _diagnosis(logs)  # the ServerApp failed
            assert time.monotonic() < deadline, _diagnosis(logs)
            _flower_pids(procs, seen)
            time.sleep(2)
        dep = [json.loads(x) for x in rec_file.read_text().splitlines()]
        node_ids = set()
        for i in range(2):
            text = logs[f"supernode{i}"].read_text()
            node_ids |= {int(line.rsplit(":", 1)[1]) for line in text.splitlines() if "SuperNode ID:" in line}
    finally:
        _stop(procs, seen)
    assert all(p.returncode is not None for p in procs)

    cfg = apps._config(apps.run_config_text({"recipe": TINY, "set": SETS}))
    sim = list(harness.run(cfg, seed=1))
    assert [r["kind"] for r in dep] == ["config", "round", "round", "result", "summary"]
    assert [r["kind"] for r in dep[1:]] == [r["kind"] for r in sim]
    assert dep[0]["seed"] == 1 and dep[0]["clients"] == 2 and dep[0]["strategies"] == ["het-cpflora"]
    for d, s in zip(dep[1:3], sim[:2]):
        assert set(d) == set(s)
        assert (d["round"], d["strategy"], d["upload_bytes"], d["download_bytes"]) == (
            s["round"],
            s["strategy"],
            s["upload_bytes"],
            s["download_bytes"],
        )
        assert d["mean_train_loss"] == pytest.approx(s["mean_train_loss"], rel=1e-5)
    d, s = dep[3], sim[2]
    assert set(d) == set(s) and d["comm_bytes_total"] == s["comm_bytes_total"] > 0
    assert d["rounds"] == 2 and d["download_bytes_total"] == s["download_bytes_total"]
    for k in ("local_perplexity", "global_perplexity"):
        assert math.isfinite(d[k]) and d[k] == pytest.approx(s[k], rel=1e-4)
    dpc = sorted(d["per_client"], key=lambda c: c["partition_id"])
    spc = sorted(s["per_client"], key=lambda c: c["partition_id"])
    assert [c["partition_id"] for c in dpc] == [0, 1] and [c["rank"] for c in dpc] == [4, 8]
    assert {c["node_id"] for c in dpc} == node_ids and len(node_ids) == 2  # the deployed SuperNodes, not in-process ids
    for a, b in zip(dpc, spc):
        assert set(a) == set(b)
        for k in ("local_perplexity", "global_perplexity", "sigma_local", "sigma_global"):
            assert a[k] == pytest.approx(b[k], rel=1e-3)


def _raising_app(partition: int, kind: str = "train"):
    """A ClientApp whose node with ``partition`` raises on ``kind`` messages."""

    def app(msg, ctx):
        if int(ctx.node_config["partition-id"]) == partition and msg.metadata.message_type == kind:
            raise ValueError("disk full")
        return apps.client_app(msg, ctx)

    return app


@pytest.mark.parametrize("accept", [True, False])
def test_a_client_that_raises_is_accepted_or_not(debian, accept):
    """Flower's accept_failures: with it, a round aggregates the clients that replied and the run
    goes on (the failure counted in the round record); without it, a round with a failure is not
    aggregated. The raising ClientApp becomes an error reply, as in Flower's runtime."""
    cfg = apps._config(apps.run_config_text({"recipe": TINY, "set": SETS + f" accept_failures={accept}"}))
    cfg = __import__("dataclasses").replace(cfg, rounds=1, strategies=("fedit",))
    recs = list(harness.run_on_grid(cfg, 0, lambda: apps.InProcessGrid.for_run(cfg, 0, app=_raising_app(1))))
    rnd = [r for r in recs if r["kind"] == "round"][0]
    res = [r for r in recs if r["kind"] == "result"][0]
    assert rnd["failures"] == 1 and rnd["aggregated"] is accept
    assert res["failed_rounds"] == 1 and len(res["per_client"]) == 2 and math.isfinite(res["local_perplexity"])
    assert rnd["upload_bytes"] > 0 and math.isfinite(rnd["mean_train_loss"])  # the healthy client's upload


def test_min_available_clients(debian):
    """A node that cannot even answer the query: with min_available_clients 1 the run goes on with
    the other client; with every client required (0) it stops with a clear error."""
    cfg = apps._config(apps.run_config_text({"recipe": TINY, "set": SETS + " min_available_clients=1"}))
    cfg = __import__("dataclasses").replace(cfg, rounds=1, strategies=("fedit",))
    recs = list(harness.run_on_grid(cfg, 0, lambda: apps.InProcessGrid.for_run(cfg, 0, app=_raising_app(0, "query"))))
    res = [r for r in recs if r["kind"] == "result"][0]
    assert [p["partition_id"] for p in res["per_client"]] == [1]
    strict = __import__("dataclasses").replace(cfg, min_available_clients=0)
    with pytest.raises(RuntimeError, match="1 nodes answered, the run needs 2"):
        list(
            harness.run_on_grid(strict, 0, lambda: apps.InProcessGrid.for_run(strict, 0, app=_raising_app(0, "query")))
        )
    with pytest.raises(ValueError, match="min_available_clients"):
        harness.Config(model="tiny-llama", clients=2, ranks=(4, 8), personal_ranks=(1, 2), min_available_clients=3)


# ----------------------------------------------------------------------------- flwr run (local simulation)


def _pids_with(arg: bytes):
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if arg in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to tear the Flower processes down")
def test_flwr_run_local_simulation_from_the_app_folder(debian, tmp_path):
    """``flwr run . --stream`` in icml26/methods/federated/flower_app, the documented path: flwr
    1.42 starts a local SuperLink in simulation mode (Ray backend: ``flwr[simulation]``) that runs
    the app in this environment (FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1: no isolated env
    without icml26 / torch / peft); 2 simulated SuperNodes, 1 round of Het-CPFLoRA on the tiny
    recipe; the records land in ``out``. Every process it started is torn down."""
    pytest.importorskip("ray", reason="pip install 'flwr[simulation]==1.42.0' (the Ray backend)")
    http, ctl = _free_ports(2)
    out = tmp_path / "out"
    (tmp_path / "run.toml").write_text(
        f'recipe = "{ROOT / TINY}"\nset = "{SETS.replace("rounds=2", "rounds=1")}"\nseed = 1\nout = "{out}"\n'
        "wait_nodes_s = 120\n"
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(tmp_path / "flwr-home"),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http),
        "FLWR_LOCAL_CONTROL_API_PORT": str(ctl),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = [
        str(Path(sys.executable).parent / "flwr"),
        "run",
        ".",
        "--stream",
        "--run-config",
        str(tmp_path / "run.toml"),
    ]
    try:
        r = subprocess.run(cmd, cwd=APP, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        assert [x["kind"] for x in recs] == ["config", "round", "result", "summary"], r.stdout[-3000:]
        assert recs[2]["strategy"] == "het-cpflora" and len(recs[2]["per_client"]) == 2
        assert math.isfinite(recs[2]["local_perplexity"]) and recs[1]["aggregated"] is True
    finally:
        link = _pids_with(f"127.0.0.1:{ctl}".encode())
        procs = sorted({p for pid in link for p in [pid, *_descendants(pid)]})
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in procs:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(3)
