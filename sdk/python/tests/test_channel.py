"""The worker channel against a real nqd: jobs offered over one WebSocket,
the fallback to HTTP when nqd or a proxy cannot upgrade, a channel dropped
with jobs in flight, and a worker process killed mid-step."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import SDK, Nqd
from helpers import Running, TunnelProxy, wait_for

from nqd_worker import Context, SyncContext, Worker


def test_the_channel_carries_the_jobs_and_the_worker_claims_nothing(nqd: Nqd) -> None:
    q = "py-ch-one"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    with TunnelProxy(nqd.url) as proxy:
        w = Worker(proxy.url, queues=[q])

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> int:
            ctx.logger.info("working", {"n": input["n"]})
            return int(input["n"]) * 2

        with Running(w):
            for n in (1, 2, 3):
                run = nqd.start_run(q, {"n": n})
                assert nqd.wait_status(run) == "completed"
                events = nqd.events(run)
                assert [e["kind"] for e in events] == ["flow.started", "step.started", "log", "step.completed", "flow.completed"]
                assert events[3]["data"]["result"] == n * 2
        assert w.transport == "channel"
        assert proxy.upgrades == 1
        assert proxy.requests == [], "every call went over the one channel"


@pytest.mark.parametrize("status", [404, 426, 502])
def test_an_upgrade_nqd_or_a_proxy_cannot_make_falls_back_to_http(nqd: Nqd, status: int) -> None:
    q = f"py-ch-fallback-{status}"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    with TunnelProxy(nqd.url, refuse=lambda n: status) as proxy:
        w = Worker(proxy.url, queues=[q], claim_wait=1.0)

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            return "over http"

        with Running(w):
            assert nqd.wait_status(nqd.start_run(q, {})) == "completed"
        assert w.transport == "http"
        assert proxy.upgrades == 1, "the channel is tried once"
        assert proxy.seen(r"^POST /api/_workers/claim$")


def test_an_upgrade_answered_503_is_tried_again(nqd: Nqd) -> None:
    q = "py-ch-busy"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    with TunnelProxy(nqd.url, refuse=lambda n: 503 if n <= 2 else None) as proxy:
        w = Worker(proxy.url, queues=[q], retry_base=0.05)

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            return "ok"

        with Running(w):
            assert nqd.wait_status(nqd.start_run(q, {})) == "completed"
        assert w.transport == "channel"
        assert proxy.upgrades == 3
        assert not proxy.seen("/claim")


def test_a_channel_dropped_with_jobs_in_flight_loses_nothing(own_nqd: Callable[..., Nqd]) -> None:
    """The steps report over HTTP until the channel is back (heartbeats
    keep their leases meanwhile); each step runs once, on attempt 1."""
    srv = own_nqd({"NQ_JOB_LEASE": "3s"})
    q = "py-ch-drop"
    srv.put_flow(
        q,
        {
            "entry": "first",
            "steps": {"first": {"queue": q, "emits": ["first.done"]}, "second": {"queue": q, "subscribes": ["first.done"]}},
        },
    )
    refusing = threading.Event()
    release = threading.Event()
    running: list[str] = []
    attempts: list[tuple[str, str, int]] = []
    with TunnelProxy(srv.url, refuse=lambda n: 503 if n > 1 and refusing.is_set() else None) as proxy:
        w = Worker(proxy.url, queues=[q], retry_base=0.05, retry_cap=1.0)

        @w.step("first", queue=q)
        def first(input: Any, ctx: SyncContext) -> str:
            attempts.append((ctx.flow_id, "first", ctx.attempt))
            running.append(ctx.flow_id)
            release.wait(30)
            ctx.logger.info("after the drop")
            ctx.state.set("k", ctx.flow_id)
            ctx.flow.emit("first.done", {"ok": True})
            return "first"

        @w.step("second", queue=q)
        async def second(input: Any, ctx: Context) -> str:
            attempts.append((ctx.flow_id, "second", ctx.attempt))
            return "second"

        with Running(w):
            runs = [srv.start_run(q, {}), srv.start_run(q, {})]
            wait_for("both steps running", lambda: len(running) == 2)
            refusing.set()
            proxy.cut()
            wait_for("a refused reconnect", lambda: proxy.upgrades >= 2)
            # Longer than the lease: heartbeats go over HTTP meanwhile.
            time.sleep(3.5)
            release.set()
            wait_for("a completion over HTTP", lambda: proxy.seen(r"/complete$"))
            refusing.clear()
            for run in runs:
                assert srv.wait_status(run, timeout=30) == "completed"
                steps = sorted((e["kind"], e["step"], e.get("attempt")) for e in srv.events(run) if e["kind"].startswith("step."))
                assert steps == [
                    ("step.completed", "first", 1),
                    ("step.completed", "second", 1),
                    ("step.started", "first", 1),
                    ("step.started", "second", 1),
                ]
                state = srv.run_state(run)
                assert state["state"] == {"k": run}
            wait_for("the channel back", lambda: w._channel is not None and w._channel.live)
        assert sorted(a[1:] for a in attempts) == [("first", 1), ("first", 1), ("second", 1), ("second", 1)]
        assert proxy.seen(r"/heartbeat$"), "heartbeats went over HTTP while there was no channel"
        assert not proxy.seen("/claim"), "a worker with a channel to come back to claims nothing"


_CHILD = """
import asyncio, sys
sys.path.insert(0, {sdk!r})
from nqd_worker import Worker
w = Worker({url!r}, queues=[{q!r}], transport={transport!r})

@w.step("work", queue={q!r})
async def work(input, ctx):
    await ctx.state.set("before", ctx.attempt)
    print("running", flush=True)
    await asyncio.Event().wait()

w.run_forever()
"""


def test_a_worker_killed_mid_step_loses_nothing(own_nqd: Callable[..., Nqd], transport: str, tmp_path: Path) -> None:
    """kill -9 of a worker: its job is delivered again once the lease ends,
    and completed by another worker."""
    srv = own_nqd({"NQ_JOB_LEASE": "1500ms"})
    q = f"py-killed-{transport}"
    srv.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q, "retryPolicy": {"attempts": 2}}}})
    script = _CHILD.format(sdk=str(SDK), url=srv.url, q=q, transport=transport)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        run = srv.start_run(q, {})
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "running"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        attempts: list[int] = []
        w = Worker(srv.url, queues=[q], claim_wait=1.0, transport=transport)

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            attempts.append(ctx.attempt)
            return "done"

        with Running(w):
            assert srv.wait_status(run, timeout=30) == "completed"
        assert attempts == [2]
        assert srv.run_state(run)["state"] == {"before": 1}
        assert [e.get("attempt") for e in srv.events(run) if e["kind"] == "step.completed"] == [2]
    finally:
        child.kill()
        child.wait(10)
