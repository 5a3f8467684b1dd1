"""The client for app code against a real nqd: start, wait, state, events,
and its retries through a proxy that answers what a busy or failing server
would."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

import pytest
from conftest import Nqd
from helpers import LocalServer, Running, wait_for

from nqd_worker import (
    Client,
    Context,
    NqdError,
    PermanentError,
    RunCancelledError,
    RunFailedError,
    StreamEvent,
    WaitTimeoutError,
    Worker,
)

# What the proxy does with one request: "pass" forwards it; "busy <status>
# <retry-after>" answers that status (503 or 429) without forwarding;
# "lost <status>" forwards it and answers the status instead of nqd's
# answer, as a gateway that lost the answer does.
Plan = Callable[[str, str], str]


class FaultProxy(LocalServer):
    """An HTTP proxy in front of nqd that answers each request as plan says
    and, for event streams, ends the first cut_stream_after messages' stream
    by closing the connection. It records the requests (method, path,
    Last-Event-ID)."""

    def __init__(self, upstream: str, plan: Plan, cut_stream_after: int = 0) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.plan = plan
        self.cut_stream_after = cut_stream_after
        self.requests: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def count(self, method: str, suffix: str) -> int:
        with self._lock:
            return sum(1 for m, p, _ in self.requests if m == method and p.split("?")[0].endswith(suffix))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve(None)

            def do_POST(self) -> None:
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, raw: bytes | None) -> None:
                with proxy._lock:
                    proxy.requests.append((self.command, self.path, self.headers.get("Last-Event-ID")))
                    streams = sum(1 for _, p, _ in proxy.requests if p.split("?")[0].endswith("/stream"))
                action = proxy.plan(self.command, self.path).split()
                if action[0] == "busy":
                    self._answer(int(action[1]), {"error": {"code": "unavailable", "message": "busy"}}, action[2])
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=raw, headers=headers)
                    resp = conn.getresponse()
                    if self.path.split("?")[0].endswith("/stream"):
                        self._stream(resp, proxy.cut_stream_after if streams == 1 else 0)
                        return
                    data = resp.read()
                finally:
                    conn.close()
                if action[0] == "lost":
                    code = {"error": {"code": "outcome_unknown", "message": "the answer was lost"}}
                    self._answer(int(action[1]), code, "0")
                    return
                self.send_response(resp.status)
                for k in ("Content-Type", "Idempotent-Replayed", "Retry-After"):
                    if resp.getheader(k):
                        self.send_header(k, str(resp.getheader(k)))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, resp: http.client.HTTPResponse, cut_after: int) -> None:
                # Read to the end of the body, so no Content-Length: the
                # connection's close ends it, and a cut is a close.
                self.send_response(resp.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                sent = 0
                while True:
                    line = resp.readline()
                    if not line:
                        return
                    self.wfile.write(line)
                    self.wfile.flush()
                    if line.startswith(b"data:"):
                        sent += 1
                    if cut_after and sent >= cut_after and line == b"\n":
                        return

            def _answer(self, status: int, doc: Any, retry_after: str) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def two_steps(nqd: Nqd, q: str) -> Worker:
    """A flow of two steps on queue q, and a worker that runs them: first
    emits "firsted" and returns its input's n, second returns n + 1."""
    nqd.put_flow(
        q,
        {
            "entry": "first",
            "steps": {
                "first": {"queue": q, "emits": ["firsted"]},
                "second": {"queue": q, "subscribes": ["firsted"]},
            },
        },
    )
    w = Worker(nqd.url, queues=[q], claim_wait=1.0)

    @w.step("first", queue=q)
    async def first(input: Any, ctx: Context) -> Any:
        if input.get("fail"):
            raise PermanentError("asked to fail")
        await ctx.flow.emit("firsted", {"n": input["n"]})
        return {"n": input["n"]}

    @w.step("second", queue=q)
    async def second(input: Any, ctx: Context) -> Any:
        return {"n": input["firsted"]["n"] + 1}

    return w


def runs_of(nqd: Nqd, flow: str) -> int:
    return int(nqd.ok("GET", f"/api/_flows/{flow}/runs?limit=100")["total"])


def test_start_wait_state(nqd: Nqd) -> None:
    q = "pyc-wait"
    client = Client(nqd.url)
    with Running(two_steps(nqd, q)):
        run = client.start(q, {"n": 1})
        assert (run.flow, run.step, run.queue, run.job_id, run.replayed) == (q, "first", q, f"{run.run_id}:first", False)
        assert client.wait(run.run_id, timeout=30) == {"n": 2}  # the last step's result
        assert client.run(q, {"n": 5}, timeout=30) == {"n": 6}
    st = client.state(run.run_id)
    assert st["status"] == "completed" and st["input"] == {"n": 1}
    assert st["steps"]["first"]["result"] == {"n": 1}
    # A run that has ended answers at once.
    assert client.wait(run.run_id, timeout=1) == {"n": 2}


def test_wait_raises_for_failed_canceled_and_late_runs(nqd: Nqd) -> None:
    q = "pyc-outcomes"
    client = Client(nqd.url)
    w = two_steps(nqd, q)
    with Running(w):
        failed = client.start(q, {"fail": True})
        with pytest.raises(RunFailedError) as fe:
            client.wait(failed.run_id, timeout=30)
    assert fe.value.run_id == failed.run_id and "asked to fail" in fe.value.error

    # No worker now: the run waits for one.
    late = client.start(q, {"n": 1})
    with pytest.raises(WaitTimeoutError):
        client.wait(late.run_id, timeout=0.3)

    got: list[BaseException] = []
    with FaultProxy(nqd.url, lambda m, p: "pass") as proxy:
        watching = Client(proxy.url)

        def waiter() -> None:
            try:
                watching.wait(late.run_id, timeout=30)
            except BaseException as e:  # noqa: BLE001 - looked at below
                got.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        # The cancel reaches the waiter live, on the stream it follows.
        wait_for("the waiter to follow the stream", lambda: proxy.count("GET", "/stream"))
        assert client.cancel(q, late.run_id) == "running"
        t.join(30)
    assert len(got) == 1 and isinstance(got[0], RunCancelledError), got

    with pytest.raises(NqdError) as ne:
        client.wait("no-such-run", timeout=1)
    assert ne.value.status == 404


def test_idempotent_start(nqd: Nqd) -> None:
    q = "pyc-idem"
    nqd.put_flow(q, {"entry": "a", "steps": {"a": {"queue": q}}})
    client = Client(nqd.url)
    one = client.start(q, {"n": 1}, idempotency_key="order-1")
    two = client.start(q, {"n": 1}, idempotency_key="order-1")
    assert two.run_id == one.run_id and two.replayed and not one.replayed
    with pytest.raises(NqdError) as e:
        client.start(q, {"n": 2}, idempotency_key="order-1")
    assert e.value.status == 422 and e.value.code == "idempotency_key_reused"
    assert runs_of(nqd, q) == 1


def test_retries_respect_retry_after_and_never_start_twice(nqd: Nqd) -> None:
    q = "pyc-retry"
    nqd.put_flow(q, {"entry": "a", "steps": {"a": {"queue": q}}})
    starts: list[str] = []

    def plan(method: str, path: str) -> str:
        if not path.endswith("/start"):
            return "pass"
        starts.append(path)
        # Busy twice (nothing stored), then stored with its answer lost,
        # then through.
        return {1: "busy 503 2", 2: "busy 429 1", 3: "lost 504"}.get(len(starts), "pass")

    with FaultProxy(nqd.url, plan) as proxy:
        client = Client(proxy.url, max_delay=1.5)
        pauses: list[float] = []
        client._sleep = pauses.append
        run = client.start(q, {"n": 1}, idempotency_key="retry-1")
        assert run.replayed  # the fourth attempt found the third's run
        assert pauses[:2] == [1.5, 1.0]  # Retry-After, capped at max_delay
        assert len(starts) == 4 and runs_of(nqd, q) == 1

        # Without a key the call makes one of its own: an answer lost after
        # the start is repeated, and finds the run.
        starts.clear()
        starts.extend(["", ""])
        again = client.start(q, {"n": 2})
        assert again.replayed and len(starts) == 4
        assert runs_of(nqd, q) == 2

    # Bounded: a server that stays busy is tried retries + 1 times.
    with FaultProxy(nqd.url, lambda m, p: "busy 503 0") as proxy:
        client = Client(proxy.url, retries=3)
        client._sleep = lambda s: None
        with pytest.raises(NqdError) as e:
            client.state("any")
        assert e.value.status == 503 and proxy.count("GET", "/state") == 4


def test_events_backfill_then_live_and_resume_after_a_drop(nqd: Nqd) -> None:
    q = "pyc-events"
    w = two_steps(nqd, q)
    client = Client(nqd.url)
    run = client.start(q, {"n": 1})
    with FaultProxy(nqd.url, lambda m, p: "pass", cut_stream_after=2) as proxy:
        events = Client(proxy.url).events(run.run_id, until_end=True)
        first = next(events)  # backfill: the run waits for a worker
        assert first.kind == "flow.started" and first.record["data"]["input"] == {"n": 1}
        seen: list[StreamEvent] = [first]
        with Running(w):
            seen.extend(events)  # live, ends after flow.completed
        streams = [h for m, p, h in proxy.requests if p.endswith("/stream")]
    stored = [e["id"] for e in nqd.events(run.run_id)]
    assert [e.id for e in seen] == stored
    assert seen[-1].kind == "flow.completed"
    # The first connection was cut after two events; the second resumed
    # from the second.
    assert len(streams) >= 2 and streams[1] == seen[1].id
