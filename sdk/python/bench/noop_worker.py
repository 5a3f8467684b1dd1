"""A worker serving the step `noop`, which returns at once: the Python side
of the SDK benchmark (scripts/bench-sdks.sh).

Environment: NQD_URL (default http://127.0.0.1:8080), NQD_QUEUE (default
bench-py), NQD_CONCURRENCY (default 64), NQD_TOKEN (optional),
NQD_TRANSPORT (channel, the default, or http). Runs until
SIGINT or SIGTERM; prints the steps it completed when it stops.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nqd_worker import Context, Worker  # noqa: E402


def main() -> None:
    queue = os.environ.get("NQD_QUEUE", "bench-py")
    worker = Worker(
        os.environ.get("NQD_URL", "http://127.0.0.1:8080"),
        token=os.environ.get("NQD_TOKEN") or None,
        queues=[queue],
        concurrency=int(os.environ.get("NQD_CONCURRENCY", "64")),
        transport=os.environ.get("NQD_TRANSPORT") or "channel",
    )

    @worker.step("noop", queue=queue)
    async def noop(input: Any, ctx: Context) -> None:
        return None

    worker.run_forever()
    print(f"noop_worker: {worker.completed} steps completed, {worker.failed} failed", file=sys.stderr)


if __name__ == "__main__":
    main()
