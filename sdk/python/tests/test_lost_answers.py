"""Every report's first answer lost on the way back: the worker retries, and
nqd's idempotent reports (complete and fail per lease, events per
Idempotency-Key) store each thing once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

import pytest
from conftest import Nqd
from helpers import Running

from nqd_worker import Context, SyncContext, Worker


class DroppingProxy:
    """Forwards HTTP requests to nqd, one upstream connection each, and
    drops the first answer to each report path: nqd did the work, the
    worker never hears of it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.dropped: list[str] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self) -> DroppingProxy:
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
                up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_w.write(head[:-2] + b"Connection: close\r\n\r\n" + body)
                answer = await up_r.read()
                up_w.close()
                report = path.rsplit("/", 1)[-1] in ("events", "complete", "fail")
                if report and path not in self.dropped:
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
def proxy(nqd: Nqd) -> Iterator[DroppingProxy]:
    with DroppingProxy(nqd.port) as p:
        yield p


def test_lost_answers_store_each_report_once(nqd: Nqd, proxy: DroppingProxy) -> None:
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
    w = Worker(f"http://127.0.0.1:{proxy.port}", queues=[q], claim_wait=1.0, retry_base=0.05)

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
