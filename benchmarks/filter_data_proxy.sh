#!/usr/bin/env bash
# The proxy tables of docs/filter-data.md ("Proxy experiments", "Data-conditioning"), measured with
# `proxy` selecting only pool documents the classifier did not fit on.
#
#   nice -n 10 benchmarks/filter_data_proxy.sh [DIR]      # default DIR: runs/filter-proxy
#
# Resumable: a step whose folder already holds a summary record is skipped; an unfinished one
# is removed and rerun. Each step's CPU seconds (user + system) go to DIR/cpu.tsv.
# Then: python benchmarks/filter_data.py --proxy-records DIR/proxy_sel/records.jsonl DIR/proxy_long/records.jsonl
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/runs/filter-proxy}"
R="$ROOT/recipes/filter-data/cqf-proxy.yaml"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
mkdir -p "$DIR"
cd "$DIR"

done_() { [ -f "$1/records.jsonl" ] && grep -q '"kind": *"summary"' "$1/records.jsonl"; }

step() {  # step NAME ARGS...: run `icml26 filter-data ARGS --out NAME` unless NAME is complete
  local name="$1"
  shift
  if done_ "$name"; then
    echo "skip $name (complete)" >&2
    return
  fi
  rm -rf "$name"
  echo "run  $name" >&2
  /usr/bin/time -f "$name	%U	%S	%e" -a -o cpu.tsv "$PY" -m icml26 filter-data "$@" --out "$name" -q >/dev/null
}

step corpus make-corpus -r "$R"
step ngram train -r "$R" --hq corpus/hq.jsonl --pool corpus/pool.jsonl --classifier ngram
step dsir train -r "$R" --hq corpus/hq.jsonl --pool corpus/pool.jsonl --classifier dsir
step proxy_sel proxy -r "$R" --corpus corpus --model ngram --dsir dsir
step proxy_cond proxy -r "$R" --corpus corpus --model ngram --experiment conditioning
step proxy_long proxy -r "$R" --corpus corpus --model ngram --tokens 1200000 --set seeds=1
step proxy_perm proxy -r "$R" --corpus corpus --model ngram --experiment conditioning --set family=perm
echo "done: $DIR" >&2
