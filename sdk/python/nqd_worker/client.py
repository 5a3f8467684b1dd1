"""A client for app code: start a flow, wait for its outcome, read its
state and follow its events, over nqd's HTTP API.

    from nqd_worker import Client

    nqd = Client("http://127.0.0.1:8080", token)
    run = nqd.start("pipeline", {"url": "https://example.com"}, idempotency_key="order-42")
    result = nqd.wait(run.run_id, timeout=60)   # RunFailedError, RunCancelledError, WaitTimeoutError

The calls and their names follow the TypeScript SDK's createClient.

Blocking and standard library only (http.client), so it fits a web handler,
a script or a thread; every call opens its own connection, so one Client
may be shared by threads.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar
from urllib.parse import quote, urlsplit

from .errors import AuthError, NqdError

# The largest answer read whole: a value kept by reference is at most 64 MiB.
_MAX_BODY = 65 << 20
# The longest line of an event stream: events are bounded by the server's
# event limit; large step data travels by reference.
_MAX_LINE = 16 << 20

# The statuses of a run that ended, as the run's state spells them.
_ENDED = ("completed", "failed", "cancelled")
_ENDED_KINDS = ("flow.completed", "flow.failed", "flow.cancelled")
# The key of a reference to a value kept in the server's bucket.
_REF = "$nqdRef"

T = TypeVar("T")


@dataclass(frozen=True)
class Started:
    """A run that start created, or found under the same idempotency key."""

    run_id: str
    flow: str
    # The entry step's job: "<run_id>:<step>", and its step and queue.
    job_id: str
    step: str
    queue: str
    # The start found a run that the same idempotency key started before.
    replayed: bool = False


class RunError(Exception):
    """The run ended without completing, or did not end in time."""

    def __init__(self, run_id: str, message: str, state: dict[str, Any] | None = None) -> None:
        self.run_id = run_id
        # The run's state when the error was raised (None for a timeout
        # before it was read).
        self.state = state
        super().__init__(message)


class RunFailedError(RunError):
    """The run failed: `error` is its reason."""

    def __init__(self, run_id: str, state: dict[str, Any]) -> None:
        self.error = str(state.get("error") or "")
        super().__init__(run_id, f"run {run_id} failed: {self.error or 'no reason given'}", state)


class RunCancelledError(RunError):
    """The run was cancelled: `reason` says why, when one was given."""

    def __init__(self, run_id: str, state: dict[str, Any]) -> None:
        self.reason = str(state.get("reason") or "")
        super().__init__(run_id, f"run {run_id} was cancelled" + (f": {self.reason}" if self.reason else ""), state)


class WaitTimeoutError(RunError, TimeoutError):
    """The run had not ended when wait's timeout passed; it goes on."""


@dataclass(frozen=True)
class StreamEvent:
    """One message of a run's event stream."""

    # "event" for an event of the run; "reset" when the position resumed
    # from is no longer in the stream (data holds the run's state and the
    # position); "truncated" when the backfill holds only the newest events.
    type: str
    # The event's id ("" for notices), its kind (e.g. "step.completed") and
    # its record in wire form, as GET /api/_events/flow/{id} lists them.
    id: str
    kind: str
    record: dict[str, Any]
    # The message's data as sent.
    data: dict[str, Any] = field(repr=False)


class _Retry(Exception):
    """An attempt that may be repeated, after `after` seconds when the
    server said so."""

    def __init__(self, cause: BaseException, after: float | None = None) -> None:
        self.cause = cause
        self.after = after
        super().__init__(str(cause))


@dataclass
class _Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Client:
    """Starts runs of nqd's flows and follows them.

    url is nqd's base URL (a path prefix is kept, for nqd behind a proxy);
    token a bearer token with the write scope (read suffices for all but
    start), or None on a server without tokens. A call that fails in a way
    a repeat may fix (no answer, 429, 5xx) is repeated up to retries times,
    after the Retry-After the server sent, otherwise after a growing
    pause; no pause exceeds max_delay seconds. timeout bounds each request.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        max_delay: float = 30.0,
    ) -> None:
        u = urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"nqd URL must be http:// or https://host[:port], got {url!r}")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.max_delay = max_delay
        # Tests replace it to see the pauses without taking them.
        self._sleep: Callable[[float], None] = time.sleep

    # The calls.

    def start(self, flow: str, input: Mapping[str, Any] | None = None, idempotency_key: str | None = None) -> Started:
        """Starts a run of flow with input (a JSON object; None is {}).

        Starts of flow with the same idempotency_key start one run: a repeat
        (by the caller, within the server's idempotency window) finds the
        run the first one started, and the key with another input is a 422.
        Without one the call makes a key of its own, so that its retries
        never start a second run.
        """
        body = json.dumps(dict(input or {}), separators=(",", ":")).encode()
        key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        path = f"/api/_flows/{quote(flow, safe='')}/start"
        ans = self._call("POST", path, body, headers, safe=True)
        doc = ans.json()
        return Started(
            run_id=str(doc["flowId"]),
            flow=flow,
            job_id=str(doc.get("id", "")),
            step=str(doc.get("step", "")),
            queue=str(doc.get("queue", "")),
            replayed=ans.headers.get("Idempotent-Replayed") == "true",
        )

    def run(
        self,
        flow: str,
        input: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """start and wait in one call: the run's result."""
        return self.wait(self.start(flow, input, idempotency_key).run_id, timeout)

    def cancel(self, flow: str, run_id: str) -> str:
        """Cancels the run (admin scope); nothing more of it is dispatched.
        Returns the status it had."""
        path = f"/api/_flows/{quote(flow, safe='')}/runs/{quote(run_id, safe='')}/cancel"
        doc = self._call("POST", path, b"{}", {"Content-Type": "application/json"}, safe=True).json()
        return str(doc.get("previousStatus", ""))

    def state(self, run_id: str) -> dict[str, Any]:
        """The run's state now: status, input, steps with their results,
        state, logs, emits; values kept by reference stay references (see
        resolve)."""
        doc = self._call("GET", self._run_path(run_id) + "/state", safe=True).json()
        return dict(doc["state"])

    def wait(self, run_id: str, timeout: float | None = None) -> Any:
        """Waits for the run to end (up to timeout seconds; None: as long as
        it takes) and returns its result: the result its flow.completed
        carried, else that of the step that completed last; a value kept by
        reference is fetched. Raises RunFailedError, RunCancelledError or
        WaitTimeoutError (the run goes on); NqdError (404) when nqd has no
        such run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.state(run_id)
            if st.get("status") in _ENDED:
                break
            if not st.get("eventCount"):
                # Every run has its flow.started by the time start answers.
                raise NqdError(404, f"nqd has no run {run_id}", code="not_found")
            # From the state's position on: the event that ends the run, or
            # a reset (the position was trimmed), sends us back to the state.
            for ev in self._stream(run_id, str(st.get("lastEventId") or "0"), deadline):
                if ev.type == "reset" or ev.kind in _ENDED_KINDS:
                    break
        status = st.get("status")
        if status == "failed":
            raise RunFailedError(run_id, st)
        if status == "cancelled":
            raise RunCancelledError(run_id, st)
        return self.resolve(result(st))

    def events(self, run_id: str, *, after: str | None = None, until_end: bool = False) -> Iterator[StreamEvent]:
        """The run's events: every event from its start (or after the event
        id after), then each new one as it is stored. A dropped connection
        resumes from the last event read (Last-Event-ID), so nothing is
        missed or repeated. It goes on until the caller stops, or with
        until_end after the run's flow.completed, flow.failed or
        flow.cancelled."""
        for ev in self._stream(run_id, after or "0", None):
            yield ev
            if until_end and ev.kind in _ENDED_KINDS:
                return

    def resolve(self, value: Any) -> Any:
        """The value a reference names ({"$nqdRef": {..., "url"}}: large step
        data kept in nqd's bucket), fetched; any other value as it is."""
        if not (isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REF), dict)):
            return value
        url = value[_REF].get("url")
        if not isinstance(url, str) or not url.startswith("/api/"):
            raise ValueError(f"a reference without a url of nqd's API: {value!r}")
        return self._call("GET", url, safe=True).json()

    # HTTP.

    def _run_path(self, run_id: str) -> str:
        return f"/api/_events/flow/{quote(run_id, safe='')}"

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        h = {"Accept": "application/json", **extra}
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        return h

    def _call(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, *, safe: bool
    ) -> _Answer:
        """One request, repeated as the class says; safe says whether a
        repeat can never store anything twice (a read, a keyed start)."""

        def once() -> _Answer:
            conn = self._connect(self.timeout)
            try:
                try:
                    conn.request(method, self._prefix + path, body=body, headers=self._headers(headers or {}))
                except ConnectionRefusedError as e:
                    raise _Retry(e) from e  # nothing was sent
                except OSError as e:
                    if safe:
                        raise _Retry(e) from e
                    raise
                try:
                    resp = conn.getresponse()
                    data = resp.read(_MAX_BODY + 1)
                except (OSError, http.client.HTTPException) as e:
                    if safe:
                        raise _Retry(e) from e
                    raise
                if len(data) > _MAX_BODY:
                    raise NqdError(resp.status, f"an answer over {_MAX_BODY} bytes")
                ans = _Answer(resp.status, resp.headers, data)
            finally:
                conn.close()
            if ans.status < 400:
                return ans
            err = _error(ans)
            if _repeatable(ans.status, err, safe):
                raise _Retry(err, _retry_after(ans.headers.get("Retry-After")))
            raise err

        return self._retrying(once)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        for n in range(self.retries + 1):
            try:
                return attempt()
            except _Retry as r:
                if n == self.retries:
                    raise r.cause from None
                self._sleep(self._pause(n, r.after))
        raise AssertionError("unreachable")

    def _pause(self, n: int, after: float | None) -> float:
        if after is None:
            after = min(0.2 * 2**n, 5.0) * (0.5 + random.random() / 2)
        return min(after, self.max_delay)

    def _stream(self, run_id: str, last_id: str, deadline: float | None) -> Iterator[StreamEvent]:
        """The run's event stream from after last_id, reconnecting after a
        drop; raises WaitTimeoutError once deadline (a monotonic time) passes."""
        failures = 0
        while True:
            conn: http.client.HTTPConnection | None = None
            try:
                conn, resp = self._open_stream(run_id, last_id, deadline)
                failures = 0
                for ev in _read_sse(resp, lambda: self._idle_timeout(conn, deadline, run_id)):
                    if ev.id:
                        last_id = ev.id
                    yield ev
            except _Retry as r:
                if failures == self.retries:
                    raise r.cause from None
                pause = self._pause(failures, r.after)
                failures += 1
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise WaitTimeoutError(run_id, f"run {run_id} did not end in time") from None
                self._sleep(pause)
            finally:
                if conn is not None:
                    conn.close()

    def _open_stream(
        self, run_id: str, last_id: str, deadline: float | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._connect(self._read_timeout(deadline, run_id))
        headers = self._headers({"Accept": "text/event-stream", "Last-Event-ID": last_id})
        try:
            conn.request("GET", self._prefix + self._run_path(run_id) + "/stream", headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeoutError(run_id, f"run {run_id} did not end in time") from None
            raise _Retry(e) from e
        if resp.status != 200:
            ans = _Answer(resp.status, resp.headers, resp.read(64 << 10))
            conn.close()
            err = _error(ans)
            if _repeatable(ans.status, err, True):
                raise _Retry(err, _retry_after(ans.headers.get("Retry-After")))
            raise err
        return conn, resp

    # A stream that says nothing for this long (the server's heartbeat is
    # 15 s by default) is taken as dropped and opened again.
    idle_timeout = 60.0

    def _read_timeout(self, deadline: float | None, run_id: str) -> float:
        if deadline is None:
            return self.idle_timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(run_id, f"run {run_id} did not end in time")
        return min(left, self.idle_timeout)

    def _idle_timeout(self, conn: http.client.HTTPConnection | None, deadline: float | None, run_id: str) -> None:
        if conn is not None and conn.sock is not None:
            conn.sock.settimeout(self._read_timeout(deadline, run_id))


def result(state: Mapping[str, Any]) -> Any:
    """The result a run ended with, from its state: the result its
    flow.completed carried, else that of the step that completed last (the
    step whose completion ended the run); None when no step completed."""
    if state.get("result") is not None:
        return state["result"]
    last: Mapping[str, Any] | None = None
    for s in (state.get("steps") or {}).values():
        if s.get("status") == "completed" and (last is None or str(s.get("completedAt") or "") >= str(last.get("completedAt") or "")):
            last = s
    return None if last is None else last.get("result")


def _read_sse(resp: http.client.HTTPResponse, before_read: Callable[[], None]) -> Iterator[StreamEvent]:
    """The messages of an event stream until it ends; a drop raises _Retry."""
    typ, ev_id, data = "event", "", list[str]()
    while True:
        before_read()
        try:
            raw = resp.readline(_MAX_LINE + 1)
        except (OSError, http.client.HTTPException) as e:
            raise _Retry(e) from e
        if not raw:
            raise _Retry(ConnectionError("the event stream ended"))
        if len(raw) > _MAX_LINE:
            raise NqdError(200, f"an event stream line over {_MAX_LINE} bytes")
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                doc = json.loads("\n".join(data))
                record = doc.get("record") if isinstance(doc, dict) else None
                yield StreamEvent(
                    type=typ,
                    id=ev_id,
                    kind=str(doc.get("event", "")) if typ == "event" else "",
                    record=record if isinstance(record, dict) else {},
                    data=doc,
                )
            typ, ev_id, data = "event", "", list[str]()
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            typ = "event" if value == "message" else value
        elif name == "id":
            ev_id = value


def _error(ans: _Answer) -> Exception:
    """The exception of an error answer in nqd's error shape."""
    try:
        doc = json.loads(ans.body)
        err = doc.get("error") if isinstance(doc, dict) else None
    except ValueError:
        err = None
    if not isinstance(err, dict):
        err = {"message": ans.body.decode("utf-8", "replace")[:500]}
    message = str(err.get("message") or http.client.responses.get(ans.status, ""))
    if ans.status in (401, 403):
        return AuthError(ans.status, message)
    fields = err.get("fields")
    return NqdError(
        ans.status,
        message,
        {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else None,
        str(err.get("code") or ""),
    )


def _repeatable(status: int, err: Exception, safe: bool) -> bool:
    """Whether an error answer may be repeated: 429 and 503 store nothing;
    any other 5xx (but a corrupt archive), 408 and a key still being served
    only where a repeat cannot store twice."""
    if status in (429, 503):
        return True
    code = err.code if isinstance(err, NqdError) else ""
    if not safe or code == "archive_corrupt":
        return False
    return status >= 500 or status == 408 or code == "idempotency_key_in_flight"


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of them, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

