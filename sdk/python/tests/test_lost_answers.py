"""Reports through a proxy that loses answers or stands in for a busy nqd:
the worker retries, and nqd's idempotent reports (complete and fail per
lease, events per Idempotency-Key) store each thing once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

import pytest
from conftest import Nqd
from helpers import Running

from nqd_worker import Context, SyncContext, Worker


class Proxy:
    """Forwards HTTP requests to nqd, one upstream connection each. By
    default it drops the first answer to each report path (nqd did the
    work, the worker never hears of it); with `busy`, it answers the first
    events call 429 (Retry-After: 1) and the first complete 503 itself,
    passing nothing on."""

    def __init__(self, upstream_port: int, busy: bool = False) -> None:
        self.upstream_port = upstream_port
        self.busy = busy
        self.dropped: list[str] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self) -> Proxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                path = head.split(b" ", 2)[1].decode()
                action = path.rsplit("/", 1)[-1]
                if self.busy and action in ("events", "complete") and action not in self.dropped:
                    self.dropped.append(action)
                    writer.write(
                        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"
                        if action == "events"
                        else b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
                    )
                    await writer.drain()
                    continue
                up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_w.write(head[:-2] + b"Connection: close\r\n\r\n" + body)
                answer = await up_r.read()
                up_w.close()
                report = action in ("events", "complete", "fail")
                if report and not self.busy and path not in self.dropped:
                    self.dropped.append(path)
                    return  # the answer is lost
                writer.write(answer)
                await writer.drain()
                return  # the answer says Connection: close
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def proxy(nqd: Nqd) -> Iterator[Proxy]:
    with Proxy(nqd.port) as p:
        yield p


def test_lost_answers_store_each_report_once(nqd: Nqd, proxy: Proxy) -> None:
    q = "py-lost"
    policy = {"attempts": 2, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow(
        q,
        {
            "entry": "first",
            "steps": {
                "first": {"queue": q, "emits": ["first.done"]},
                "second": {"queue": q, "subscribes": ["first.done"], "retryPolicy": policy},
            },
        },
    )
    calls: list[tuple[str, int]] = []
    w = Worker(f"http://127.0.0.1:{proxy.port}", queues=[q], claim_wait=1.0, retry_base=0.05, transport="http")

    @w.step("first", queue=q)
    async def first(input: Any, ctx: Context) -> str:
        calls.append(("first", ctx.attempt))
        ctx.logger.info("one line")
        await ctx.state.set("k", 1)
        await ctx.flow.emit("first.done", {"v": 1})
        return "first"

    @w.step("second", queue=q)
    def second(input: Any, ctx: SyncContext) -> str:
        calls.append(("second", ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("try again")
        return "second"

    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "completed"

    assert sorted(calls) == [("first", 1), ("second", 1), ("second", 2)]
    assert any(p.endswith("/complete") for p in proxy.dropped)
    assert any(p.endswith("/fail") for p in proxy.dropped)
    assert any(p.endswith("/events") for p in proxy.dropped)
    evs = nqd.events(run)

    def count(kind: str, step: str) -> int:
        return sum(1 for e in evs if e["kind"] == kind and e.get("step") == step)

    assert count("log", "first") == 1
    assert count("state.set", "first") == 1
    assert count("emit", "first") == 1
    assert count("step.started", "first") == 1
    assert count("step.completed", "first") == 1
    assert count("step.failed", "second") == 1
    assert count("step.retry", "second") == 1
    assert count("step.started", "second") == 2
    assert count("step.completed", "second") == 1
    assert nqd.run_state(run)["state"] == {"k": 1}


def test_a_busy_nqd_is_tried_again(nqd: Nqd) -> None:
    q = "py-busy-nqd"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})

    with Proxy(nqd.port, busy=True) as proxy:
        w = Worker(f"http://127.0.0.1:{proxy.port}", queues=[q], claim_wait=1.0, transport="http")

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            await ctx.logger.info("one line")
            return "done"

        with Running(w):
            run = nqd.start_run(q, {})
            assert nqd.wait_status(run) == "completed"
        assert proxy.dropped == ["events", "complete"]

    evs = nqd.events(run)
    assert [e["kind"] for e in evs if e.get("step") == "work"] == ["step.started", "log", "step.completed"]
    assert w.report_retries >= 2


def test_repeated_reports_are_stored_once(nqd: Nqd) -> None:
    """What the worker's retries rely on, asked of nqd directly."""
    q = "py-repeat"
    nqd.put_flow(q, {"entry": "once", "steps": {"once": {"queue": q}}})
    run = nqd.start_run(q, {})
    (job,) = nqd.ok("POST", "/api/_workers/claim", {"queues": [q], "max": 1})["jobs"]
    path = f"/api/_workers/jobs/{q}/{job['id']}"
    events = {"lease": job["lease"], "events": [{"kind": "step.started"}, {"kind": "log", "data": {"msg": "hi"}}]}
    key = {"Idempotency-Key": "py-repeat-1"}
    for _ in range(2):
        status, _ = nqd.call("POST", path + "/events", events, headers=key)
        assert status == 200
    for _ in range(2):
        status, _ = nqd.call("POST", path + "/complete", {"lease": job["lease"], "result": 1})
        assert status == 200
    assert [e["kind"] for e in nqd.events(run) if e.get("step") == "once"] == ["step.started", "log", "step.completed"]
