"""Measures no-op steps per second of the Python worker against a running nqd.

Stores the one-step flow `bench-py` (queue bench-py, step noop), queues
NQD_RUNS runs (default 2000), then times a worker of NQD_CONCURRENCY slots
(default 64) draining them, and the CPU time the worker used for it. Start
nqd without rate limits for it, e.g.

    NQ_RATE_PER_ADDR=0 NQ_DATA_DIR=$(mktemp -d) bin/nqd &
    NQD_URL=http://127.0.0.1:8080 /usr/bin/python3 sdk/python/bench/measure.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nqd_worker import Context, Worker  # noqa: E402
from nqd_worker._http import HTTPClient  # noqa: E402


async def main() -> None:
    url = os.environ.get("NQD_URL", "http://127.0.0.1:8080")
    token = os.environ.get("NQD_TOKEN") or None
    runs = int(os.environ.get("NQD_RUNS", "2000"))
    concurrency = int(os.environ.get("NQD_CONCURRENCY", "64"))
    http = HTTPClient(url, token)
    resp = await http.request(
        "PUT", "/api/_flows/bench-py", {"name": "bench-py", "entry": "noop", "steps": {"noop": {"queue": "bench-py"}}}
    )
    assert resp.status == 200, resp.error_message()

    sem = asyncio.Semaphore(32)

    async def start() -> None:
        async with sem:
            r = await http.request("POST", "/api/_flows/bench-py/start", {})
            assert r.status // 100 == 2, r.error_message()

    t0 = time.monotonic()
    await asyncio.gather(*(start() for _ in range(runs)))
    print(f"queued {runs} runs in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    await http.close()

    worker = Worker(url, token, ["bench-py"], concurrency)

    @worker.step("noop", queue="bench-py")
    async def noop(input: Any, ctx: Context) -> None:
        return None

    t0, cpu0 = time.monotonic(), time.process_time()
    task = asyncio.create_task(worker.run())
    while worker.completed + worker.failed < runs:
        if task.done():
            task.result()
            raise SystemExit("the worker stopped early")
        await asyncio.sleep(0.01)
    took, cpu = time.monotonic() - t0, time.process_time() - cpu0
    worker.stop()
    await task
    print(f"{worker.completed} no-op steps in {took:.2f}s: {worker.completed / took:.0f} steps/s "
          f"(concurrency {concurrency}, {worker.failed} failed); the worker's CPU "
          f"{cpu * 1e6 / max(worker.completed, 1):.0f} µs per step")


if __name__ == "__main__":
    asyncio.run(main())
