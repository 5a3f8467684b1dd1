#!/usr/bin/env bash
# No-op steps per second through each SDK's worker, side by side in one run.
# Builds nqd, starts it on the embedded store in a temp directory on a free
# port, and for each SDK stores a one-step flow (queue bench-<sdk>, step
# noop), starts RUNS runs, then starts the SDK's worker (env NQD_URL,
# NQD_QUEUE, NQD_CONCURRENCY) and times it until every run has completed.
# An SDK whose bench worker is not in the tree is skipped with a note.
#
#   scripts/bench-sdks.sh                 # RUNS=2000 CONCURRENCY=32
#   RUNS=500 SDKS="go ts" scripts/bench-sdks.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-2000}
concurrency=${CONCURRENCY:-32}
sdks=${SDKS:-go ts py}
dir=$(mktemp -d)
nqd_pid=
worker_pid=
cleanup() {
  [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  [ -n "$nqd_pid" ] && kill "$nqd_pid" 2>/dev/null && wait "$nqd_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

go build -o "$dir/nqd" ./cmd/server
go build -o "$dir/noop-worker" ./cmd/noop-worker
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
NQ_ADDR="127.0.0.1:$port" NQ_DATA_DIR="$dir/data" NQ_LOG_LEVEL=warn NQ_LOG_FORMAT=json \
  NQ_RATE_PER_ADDR=0 NQ_RATE_PER_TOKEN=0 "$dir/nqd" >"$dir/nqd.log" 2>&1 &
nqd_pid=$!
for _ in $(seq 100); do curl -sf "$url/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "$url/healthz" >/dev/null || { echo "nqd did not start:" >&2; cat "$dir/nqd.log" >&2; exit 1; }

# worker_cmd prints the command of an SDK's bench worker, or nothing when it
# is not in the tree.
worker_cmd() {
  case $1 in
    go) echo "$dir/noop-worker" ;;
    ts) [ -f sdk/typescript/bench/noop-worker.mjs ] && echo "node sdk/typescript/bench/noop-worker.mjs" ;;
    py) [ -f sdk/python/bench/noop_worker.py ] && echo "python3 sdk/python/bench/noop_worker.py" ;;
  esac
}

completed() {
  curl -sf "$url/api/_flows/bench-$1/runs?status=completed&limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])'
}

declare -A rate
for sdk in $sdks; do
  cmd=$(worker_cmd "$sdk" || true)
  if [ -z "$cmd" ]; then
    rate[$sdk]="skipped (no bench worker yet)"
    continue
  fi
  flow="bench-$sdk"
  curl -sf -XPUT "$url/api/_flows/$flow" -H 'content-type: application/yaml' \
    --data-binary "entry: noop
steps:
  noop: {queue: $flow}" >/dev/null
  # Queue every run before the worker starts, so only the worker is timed.
  for _ in $(seq "$runs"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$url/api/_flows/$flow/start"; done >"$dir/starts"
  curl -sf --no-progress-meter --parallel --parallel-max 16 -K "$dir/starts" -XPOST -H 'content-type: application/json' -d '{}'
  start=$(date +%s.%N)
  NQD_URL="$url" NQD_QUEUE="$flow" NQD_CONCURRENCY="$concurrency" $cmd >"$dir/$sdk.log" 2>&1 &
  worker_pid=$!
  deadline=$(( $(date +%s) + 300 ))
  while [ "$(completed "$sdk")" -lt "$runs" ]; do
    if ! kill -0 "$worker_pid" 2>/dev/null || [ "$(date +%s)" -gt "$deadline" ]; then
      echo "$sdk: worker stopped or timed out with $(completed "$sdk")/$runs runs completed:" >&2
      cat "$dir/$sdk.log" >&2
      exit 1
    fi
    sleep 0.05
  done
  end=$(date +%s.%N)
  kill "$worker_pid" 2>/dev/null; wait "$worker_pid" 2>/dev/null || true
  worker_pid=
  rate[$sdk]=$(awk -v n="$runs" -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", n / (b - a) }')
done

printf '%-6s %s\n' sdk "no-op steps/s ($runs runs, concurrency $concurrency, embedded store, $(nproc) cores)"
for sdk in $sdks; do printf '%-6s %s\n' "$sdk" "${rate[$sdk]}"; done
