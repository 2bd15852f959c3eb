"""Whole ``icml26 quantize`` runs, one thread, for the figures in docs/quantize.md: the run's CPU
time against its printed estimate (measured / estimated, CPU and wall), and its records.

Each named run writes its records to ``<dir>/quantize_<name>.jsonl`` and one row to
``<dir>/quantize_runs.jsonl`` (args, CPU time from the summary and from the OS, estimate, load
average); a run already there is skipped (resumable). Runs:

- ``validation``: rtn, gptq, fptquant-merged and fptquant-merged-local at W4A16 / W4A8, scored on
  the validation split (the default's design choices judged without the evaluation text);
- ``tiny``: the tiny recipe (every method at W4A8, 256 tokens);
- ``default``: ``icml26 quantize --model llama --bits 4`` (the first run users type).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/quantize_runs.py validation tiny default
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "validation": [
        "--model",
        "llama",
        "--bits",
        "4",
        "--method",
        "rtn,gptq,fptquant-merged,fptquant-merged-local",
        "--set",
        "eval_split=validation",
    ],
    "tiny": ["-r", "icml26/recipes/quantize/tiny.yaml"],
    "default": ["--model", "llama", "--bits", "4"],
}


def main() -> None:
    names = sys.argv[1:] or list(RUNS)
    out = Path(os.environ.get("QUANTIZE_RUNS_DIR", ROOT / "benchmarks/results"))
    out.mkdir(parents=True, exist_ok=True)
    table = out / "quantize_runs.jsonl"
    done = {json.loads(x)["name"] for x in table.read_text().splitlines() if x.strip()} if table.exists() else set()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for name in names:
        if name in done:
            print(f"{name}: already in {table}")
            continue
        args = [sys.executable, "-m", "icml26", "quantize", *RUNS[name], "-q"]
        rec_file = out / f"quantize_{name}.jsonl"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.time()
        load0 = os.getloadavg()[0]
        with open(str(rec_file) + ".tmp", "w", encoding="utf-8") as f:
            p = subprocess.run(args, stdout=f, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            print(f"{name}: exit {p.returncode}\n{p.stderr[-2000:]}", file=sys.stderr)
            continue
        os.replace(str(rec_file) + ".tmp", rec_file)
        recs = [json.loads(x) for x in rec_file.read_text().splitlines() if x.strip()]
        summ = recs[-1]
        est = next(r for r in recs if r.get("stage") == "estimate")
        os_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        row = {
            "name": name,
            "args": " ".join(["icml26", "quantize", *RUNS[name]]),
            "threads": 1,
            "cpu_s": summ["cpu_s"],
            "os_cpu_s": round(os_cpu, 1),
            "estimated_cpu_s": est["estimated_cpu_s"],
            "cpu_ratio_measured_over_estimated": round(summ["cpu_s"] / est["estimated_cpu_s"], 3),
            "wall_s": summ["time_s"],
            "estimated_wall_s": est["estimated_s"],
            "wall_ratio_measured_over_estimated": round(summ["time_s"] / est["estimated_s"], 3),
            "loadavg_start_end": [round(load0, 1), round(os.getloadavg()[0], 1)],
            "when": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)),
        }
        with table.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
