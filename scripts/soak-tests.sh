#!/usr/bin/env bash
# Runs the test packages that start servers, browsers, Redis or timers N
# times in a row with the race detector, and stops at the first failure.
# A test that fails once in ten runs is a bug; this finds it.
#
#   scripts/soak-tests.sh [N] [package ...]
#
# N defaults to 10; packages default to the list below. Redis and Chromium
# are required (NQD_REQUIRE_REDIS=1, NQD_REQUIRE_BROWSER=1), so a missing one
# fails instead of skipping half of what is being soaked.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-10}
shift || true
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	pkgs=(./e2e ./faults ./handlers ./stream ./engine ./web/webtest ./wiring ./workertest
		./metrics ./sweeper ./store/redisstore ./internal/redistest ./internal/outage ./internal/testkit)
fi
case $n in '' | *[!0-9]*) echo "usage: $0 [N] [package ...]" >&2; exit 2 ;; esac

export NQD_REQUIRE_REDIS=1 NQD_REQUIRE_BROWSER=1
logs=$(mktemp -d "${TMPDIR:-/tmp}/nqd-soak.XXXXXX")

echo "soak: ${pkgs[*]}, $n runs, logs in $logs"
build_start=$(date +%s)
go test -race -count=1 -run '^$' "${pkgs[@]}" >"$logs/build.log" 2>&1 || {
	cat "$logs/build.log"
	exit 1
}
echo "build: $(($(date +%s) - build_start))s"

times=()
failures=0
for i in $(seq "$n"); do
	start=$(date +%s)
	status=0
	# One package at a time, as make test runs them.
	go test -race -count=1 -p 1 -timeout 20m "${pkgs[@]}" >"$logs/run-$i.log" 2>&1 || status=$?
	took=$(($(date +%s) - start))
	times+=("${took}s")
	load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
	if [ "$status" -ne 0 ]; then
		failures=1
		echo "run $i: FAIL after ${took}s (load $load)"
		grep -E '^(--- FAIL|FAIL|panic:|ok )|_test\.go:[0-9]+:' "$logs/run-$i.log" | head -60 || true
		echo "full output: $logs/run-$i.log"
		break
	fi
	echo "run $i: ok in ${took}s (load $load)"
done

echo "summary: ${#times[@]} runs, $failures failures, wall time per run: ${times[*]}"
exit "$failures"
