"""Running a Worker beside a synchronous test."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from nqd_worker import Context, Worker

if TYPE_CHECKING:
    from conftest import Nqd


class Running:
    """Runs worker.run() in a thread of its own with its own event loop;
    leaving the block stops the worker gracefully and waits for it."""

    def __init__(self, worker: Worker, stop_timeout: float | None = None) -> None:
        self.worker = worker
        # A worker stops within its grace period; the slack is for a machine
        # under load, the bound for a worker that hangs.
        self.stop_timeout = worker.grace + 10.0 if stop_timeout is None else stop_timeout
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._ready = threading.Event()

    def _main(self) -> None:
        async def go() -> None:
            task = asyncio.create_task(self.worker.run())
            await asyncio.sleep(0)  # run() has set up its loop and stop event
            self._ready.set()
            await task

        try:
            asyncio.run(go())
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            self.error = e
        finally:
            self._ready.set()

    def __enter__(self) -> Running:
        self._thread.start()
        assert self._ready.wait(10), "the worker did not start"
        return self

    def stop(self) -> None:
        self.worker.stop()
        self._thread.join(self.stop_timeout)
        assert not self._thread.is_alive(), f"the worker did not stop within {self.stop_timeout}s"
        if self.error is not None:
            raise self.error

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if typ is None:
            self.stop()
        else:
            self.worker.stop()
            self._thread.join(self.stop_timeout)


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Call:
    """A request the proxy passed on (or answered itself), and its answer."""

    path: str
    body: Any
    status: int = 0
    answer: Any = None

    @property
    def action(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def jobs(self) -> list[dict[str, Any]]:
        """The jobs the answer handed out."""
        jobs = self.answer.get("jobs") if isinstance(self.answer, dict) else None
        return list(jobs) if isinstance(jobs, list) else []


def emits(call: Call) -> bool:
    """Whether the call carried an emit."""
    evs = call.body.get("events") if isinstance(call.body, dict) else None
    return isinstance(evs, list) and any(isinstance(e, dict) and e.get("kind") == "emit" for e in evs)


_Server = TypeVar("_Server", bound="LocalServer")


class LocalServer:
    """An HTTP server on a free loopback port, serving from a thread of its
    own between __enter__ and __exit__. Its url is known from the start."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self: _Server) -> _Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class CountingProxy(LocalServer):
    """An HTTP proxy between a worker and nqd that records every call in the
    order they arrived, with their answers, and counts the jobs the worker
    holds as nqd sees them: from the answer that handed a job out until the
    answer to its complete or fail.

    fail_completes, when set, is how many seconds completions are answered
    with a 503 (and not passed on), from the first one. hold_claims, when
    set, holds completions that carry `claim` until release is set (held is
    set once one is held)."""

    def __init__(
        self,
        upstream: str,
        hold_claims: bool = False,
        fail_completes: float | None = None,
    ) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.fail_completes = fail_completes
        self.first_complete: float | None = None
        self.hold_claims = hold_claims
        self.held = threading.Event()
        self.release = threading.Event()
        self.calls: list[Call] = []
        self.holding: set[str] = set()
        self.max_holding = 0
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        super().__exit__(*exc)

    def of(self, action: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.action == action]

    def claiming_completions(self) -> list[Call]:
        return [c for c in self.of("complete") if isinstance(c.body, dict) and "claim" in c.body]

    def claims_between_jobs(self, after_empty_completions: bool = True) -> int:
        """The worker's claim calls that arrived after the call that brought
        its first job and before its last completion; without
        after_empty_completions, only those that did not follow a completion
        that brought no job."""
        with self._lock:
            calls = list(self.calls)
        first = min((i for i, c in enumerate(calls) if c.jobs()), default=len(calls))
        last = max((i for i, c in enumerate(calls) if c.action == "complete"), default=0)
        n, prev = 0, calls[first] if first < len(calls) else None
        for c in calls[first + 1 : last]:
            if c.action == "complete":
                prev = c
            elif c.action == "claim" and (after_empty_completions or prev is None or prev.jobs()):
                n += 1
        return n

    def _record(self, call: Call) -> None:
        job_id = call.path.rsplit("/", 2)[-2] if call.action in ("complete", "fail") else None
        with self._lock:
            if job_id is not None and (200 <= call.status < 300 or call.status == 409):
                self.holding.discard(job_id)
            if call.status == 200:
                self.holding.update(str(j["id"]) for j in call.jobs())
            self.max_holding = max(self.max_holding, len(self.holding))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            do_PUT = do_POST

            def _forward(self, raw: bytes | None) -> None:
                body = json.loads(raw) if raw else None
                call = Call(self.path, body)
                with proxy._lock:
                    proxy.calls.append(call)
                claiming = call.action == "complete" and isinstance(body, dict) and "claim" in body
                if call.action == "complete" and proxy.fail_completes is not None:
                    with proxy._lock:
                        now = time.monotonic()
                        proxy.first_complete = proxy.first_complete or now
                        failing = now - proxy.first_complete < proxy.fail_completes
                    if failing:
                        busy = {"error": {"code": "unavailable", "message": "Try again."}}
                        self._answer(call, 503, json.dumps(busy).encode(), "application/json")
                        return
                if claiming and proxy.hold_claims:
                    proxy.held.set()
                    proxy.release.wait(60)
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=raw, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self._answer(call, resp.status, data, resp.getheader("Content-Type") or "application/json")
                finally:
                    conn.close()

            def _answer(self, call: Call, status: int, data: bytes, ctype: str) -> None:
                call.status = status
                try:
                    call.answer = json.loads(data) if data else None
                except ValueError:
                    call.answer = None
                proxy._record(call)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def retried_by_another_worker(nqd: Nqd, queue: str, step: str, run: str, transport: str = "channel") -> None:
    """A fresh worker takes the step a stopped one gave back, as its second
    attempt, and the run completes with that attempt's result."""
    w = Worker(nqd.url, queues=[queue], claim_wait=1.0, transport=transport)

    @w.step(step, queue=queue)
    async def again(input: Any, ctx: Context) -> int:
        return ctx.attempt

    with Running(w):
        assert nqd.wait_status(run) == "completed"
    assert nqd.run_state(run)["steps"][step]["result"] == 2


class TunnelProxy:
    """A TCP proxy in front of nqd for the worker channel's tests. It passes
    connections on as bytes, noting the HTTP requests it sees in them; an
    upgrade to the channel is answered by the proxy itself with the status
    refuse(nth upgrade) gives, when it gives one. cut() cuts every
    connection passed on so far."""

    def __init__(self, upstream: str, refuse: Callable[[int], int | None] = lambda n: None) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self.refuse = refuse
        self.upgrades = 0
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> TunnelProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def cut(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def seen(self, pattern: str) -> bool:
        with self._lock:
            return any(re.search(pattern, r) for r in self.requests)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            head += chunk
        upgrade = b"\r\nupgrade: websocket" in head.lower()
        if upgrade:
            with self._lock:
                self.upgrades += 1
                n = self.upgrades
            status = self.refuse(n)
            if status is not None:
                body = b'{"error":{"code":"proxy","message":"refused by the test proxy"}}'
                conn.sendall(
                    b"HTTP/1.1 %d Refused\r\nContent-Type: application/json\r\nRetry-After: 0\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (status, len(body), body)
                )
                conn.close()
                return
        try:
            up = socket.create_connection(self._upstream)
        except OSError:
            conn.close()
            return
        with self._lock:
            self._socks |= {conn, up}
        threading.Thread(target=self._pipe, args=(up, conn, False), daemon=True).start()
        self._pipe(conn, up, not upgrade, head)

    def _pipe(self, src: socket.socket, dst: socket.socket, note: bool, first: bytes = b"") -> None:
        data = first
        try:
            while True:
                if data:
                    if note:
                        # A request is written in one piece: its request line
                        # is whole in the chunk it starts.
                        with self._lock:
                            self.requests += [m.decode() for m in re.findall(rb"(?:GET|POST|PUT) \S+(?= HTTP/1\.1\r\n)", data)]
                    dst.sendall(data)
                data = src.recv(65536)
                if not data:
                    break
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
