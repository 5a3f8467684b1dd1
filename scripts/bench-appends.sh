#!/usr/bin/env bash
# Appends through nqd's HTTP handler on Redis, against a baseline of plain
# XADD from redis-benchmark at the same concurrency on the same Redis, in one
# run. Prints both rates and their ratio per concurrency.
set -euo pipefail
cd "$(dirname "$0")/.."

benchtime=${BENCHTIME:-3s}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

payload=$(head -c 256 /dev/zero | tr '\0' x)
procs=$(nproc)
out=$(REDIS_ADDR="127.0.0.1:$port" go test -run='^$' -bench='BenchmarkAppendHTTP/redis' -benchtime="$benchtime" ./handlers/)

printf '%-8s %14s %14s %8s\n' clients nqd-appends/s xadd/s ratio
for clients in $((1 * procs)) $((32 * procs)); do
  nqd=$(awk -v c="clients=$clients" '$1 ~ c { for (i=1;i<=NF;i++) if ($(i+1)=="appends/s") print $i }' <<<"$out" | head -1)
  base=$(redis-benchmark -p "$port" -c "$clients" -n 200000 -q XADD nqbench:baseline '*' e "$payload" | awk '/requests per second/ { for (i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }')
  ratio=$(awk -v a="$nqd" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  printf '%-8s %14s %14s %8s\n' "$clients" "$nqd" "$base" "$ratio"
done
