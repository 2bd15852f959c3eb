"""``icml26 traffic`` on a few weeks of a user's wide CSV: 35 days of synthetic 15-minute travel
times of 8 road segments with no rows from 22:00 to 06:00 (tests/methods/traffic_synth.py,
``travel_times_frame``), run with the default splits and lane fractions (14 pre-training days
of pseudo-roads | 5 fine-tuning | 2 validation | 14 test days).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/traffic_user_csv.py [--out runs/traffic-user-csv]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.methods.traffic_synth import travel_times_frame, write_csv  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/traffic-user-csv")
    ap.add_argument("--models", default="persistence,ridge,ha,minitraffic,minitraffic-nopretrain")
    ap.add_argument("--seeds", default="1")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    csv = write_csv(travel_times_frame(days=35, n=8), out / "travel_times.csv")
    cmd = [sys.executable, "-m", "icml26", "traffic", "run", "--data", str(csv), "--model", a.models]
    cmd += ["--seeds", a.seeds, "--out", str(out / "run")]
    print("$", " ".join(cmd), flush=True)
    sys.exit(subprocess.call(cmd, cwd=ROOT))


if __name__ == "__main__":
    main()
