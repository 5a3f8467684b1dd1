"""The worker channel (docs/worker-protocol.md, The worker channel): one
WebSocket to nqd carrying the worker's hello, the jobs nqd offers it, and
its reports as requests answered like the HTTP calls."""

from __future__ import annotations

import asyncio
import http
import json
import logging
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

# The asyncio client websockets has had since 9.0 (Debian 12 ships 10.4); from
# 14.0 on, websockets.connect is a newer client with other arguments, while
# this one stays, deprecated, until 2030.
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatusCode, InvalidURI
from websockets.legacy.client import Connect, WebSocketClientProtocol

from ._http import Response, TransportError
from .errors import AuthError, NqdError

log = logging.getLogger("nqd_worker")

# The upgrade and the hello's answer get this long.
_OPEN_TIMEOUT = 10.0
# The closing handshake gets this long before the socket is cut.
_CLOSE_TIMEOUT = 2.0
# The largest message nqd may send: an offer holds at most one job per free
# slot, each with an input of at most nqd's body limit; beyond this the
# channel is closed (1009) and opened again.
_MAX_MESSAGE = 128 << 20


class Refused(Exception):
    """nqd (or a proxy) answered the upgrade with an HTTP status: the worker
    falls back to HTTP for it unless it is 429 or a 5xx but 502 (retried);
    401 and 403 are AuthErrors instead."""

    def __init__(self, response: Response) -> None:
        super().__init__(f"the worker channel's upgrade was answered {response.status} {_status_text(response.status)}")
        self.response = response

    @property
    def falls_back(self) -> bool:
        status = self.response.status
        return status != 429 and (status < 500 or status == 502)


class Redirected(Exception):
    """The upgrade was answered with a redirect. nqd never redirects it, so a
    proxy did: the worker does not follow it, as that would send its token
    to wherever the proxy points, and claims over HTTP instead."""

    def __init__(self, location: str) -> None:
        super().__init__(f"the worker channel's upgrade was redirected to {location!r}; not followed")
        self.location = location


class _ConnectNoRedirects(Connect):
    """The library's client without its redirects: it would send the
    upgrade's headers, the token among them, to the new location."""

    def handle_redirect(self, uri: str) -> None:
        raise Redirected(uri)


def channel_url(base: str) -> str:
    """The channel's ws:// (or wss://) URL on nqd's http:// (or https://) base."""
    u = urlsplit(base.rstrip("/"))
    scheme = "wss" if u.scheme == "https" else "ws"
    return urlunsplit((scheme, u.netloc, u.path + "/api/_workers/channel", "", ""))


class Channel:
    """An open, welcomed channel. Requests are answered in any order by
    their ref; offers go to the worker's on_offer as they come."""

    def __init__(self, ws: WebSocketClientProtocol, on_offer: Callable[[list[dict[str, Any]], Channel], None]) -> None:
        self.ws = ws
        self.welcome: dict[str, Any] = {}
        self.restart = False  # nqd said it shuts down: open again at once
        self._on_offer = on_offer
        self._pending: dict[str, tuple[asyncio.Future[Response], Callable[[Response], None] | None]] = {}
        self._seq = 0
        self.closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        # The frames tell() sends, until the socket took them.
        self._telling: set[asyncio.Task[None]] = set()

    def _start(self, welcome: dict[str, Any]) -> None:
        self.welcome = welcome
        self._reader = asyncio.create_task(self._read())

    @property
    def live(self) -> bool:
        return self.ws.open and not self.closed.is_set()

    async def request(
        self,
        call: str,
        queue: str,
        job_id: str,
        body: dict[str, Any],
        timeout: float,
        on_answer: Callable[[Response], None] | None = None,
    ) -> Response:
        """Sends a job call (heartbeat, events, complete, fail) and returns
        its answer as the HTTP call's would be; raises TransportError when
        no answer came within timeout or the channel closed first.
        on_answer sees the answer as it is read, before any later frame (an
        offer for the slot an outcome freed, say)."""
        if not self.live:
            raise TransportError("the worker channel is closed")
        self._seq += 1
        ref = str(self._seq)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[ref] = (fut, on_answer)
        text = json.dumps({"type": call, "ref": ref, "queue": queue, "jobId": job_id, **body}, separators=(",", ":"))

        async def exchange() -> Response:
            # The send waits while the socket's buffer is full (nqd reads
            # no more while it works on maxInFlight requests), within timeout.
            await self.ws.send(text)
            return await asyncio.shield(fut)

        try:
            return await asyncio.wait_for(exchange(), timeout)
        except ConnectionClosed as e:
            raise TransportError(f"the worker channel closed: {e}") from None
        except asyncio.TimeoutError:
            raise TransportError(f"no answer on the worker channel within {timeout:g}s") from None
        finally:
            self._pending.pop(ref, None)

    def tell(self, frame: dict[str, Any]) -> None:
        """Sends a frame that has no answer (slots, pause); nothing once the
        channel is closed."""
        if self.live:
            task = asyncio.create_task(self._tell(json.dumps(frame, separators=(",", ":"))))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)

    async def _tell(self, text: str) -> None:
        try:
            await self.ws.send(text)
        except ConnectionClosed:
            pass  # the channel's end is the reader's to note

    async def close(self) -> None:
        """Closes the channel (1000: the worker is done) and waits for it."""
        if self._telling:
            await asyncio.gather(*self._telling, return_exceptions=True)
        await self.ws.close(1000)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self._closed()

    def _closed(self) -> None:
        self.closed.set()
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(TransportError("the worker channel closed before nqd answered"))

    async def _read(self) -> None:
        try:
            while True:
                text = await self.ws.recv()
                if not isinstance(text, str):
                    continue  # the channel speaks text only
                try:
                    f = json.loads(text)
                except ValueError:
                    log.error("nqd sent a channel frame that is not JSON: %.100s", text)
                    continue
                if isinstance(f, dict):
                    self._frame(f)
        except ConnectionClosed as e:
            log.debug("the worker channel closed: %s", e)
        finally:
            self._closed()

    def _frame(self, f: dict[str, Any]) -> None:
        typ = f.get("type")
        if typ in ("ack", "error"):
            pending = self._pending.get(str(f.get("ref", "")))
            if pending is None:
                if typ == "error" and "ref" not in f:
                    log.error("nqd refused a frame of the worker channel: %s", _error_response(f).error_message())
                return
            fut, on_answer = pending
            if not fut.done():
                resp = _ack_response(f) if typ == "ack" else _error_response(f)
                if on_answer is not None:
                    on_answer(resp)
                fut.set_result(resp)
        elif typ == "offer":
            jobs = f.get("jobs")
            if isinstance(jobs, list):
                self._on_offer([j for j in jobs if isinstance(j, dict)], self)
        elif typ == "server-restart":
            self.restart = True
        # A frame of a later nqd is nothing this worker needs.


def _ack_response(f: dict[str, Any]) -> Response:
    return Response(200, {}, json.dumps(f.get("body")).encode())


def _error_response(f: dict[str, Any]) -> Response:
    headers: dict[str, str] = {}
    after = f.get("retryAfterMs")
    if isinstance(after, (int, float)) and after >= 0:
        headers["retry-after"] = str(after / 1000)
    status = f.get("status")
    return Response(status if isinstance(status, int) else 500, headers, json.dumps({"error": f.get("error") or {}}).encode())


async def open_channel(
    base: str,
    headers: dict[str, str],
    hello: Callable[[Channel], dict[str, Any]],
    on_offer: Callable[[list[dict[str, Any]], Channel], None],
) -> Channel:
    """Opens the channel with headers on the upgrade (the token's and the
    Nqd-Worker-* ones) and says hello; hello(channel) is asked for the
    hello once the upgrade is done, so that the slots it gives are those
    free as it is sent. Raises Refused or AuthError for an upgrade answered
    with an HTTP status, Redirected for one answered with a redirect,
    NqdError when nqd refuses the hello, TransportError when nqd cannot be
    reached or the channel breaks before its welcome."""
    try:
        ws = await _ConnectNoRedirects(
            channel_url(base),
            extra_headers=headers,
            open_timeout=_OPEN_TIMEOUT,
            close_timeout=_CLOSE_TIMEOUT,
            max_size=_MAX_MESSAGE,
            # Job data is JSON the worker's own network carries; deflating
            # each frame costs both sides more CPU than it saves there.
            compression=None,
        )
    except InvalidStatusCode as e:
        resp = Response(e.status_code, {k.lower(): v for k, v in e.headers.raw_items()}, b"")
        if e.status_code in (401, 403):
            raise AuthError(e.status_code, _status_text(e.status_code)) from None
        raise Refused(resp) from None
    except asyncio.TimeoutError:
        raise TransportError(f"the worker channel did not open within {_OPEN_TIMEOUT:g}s") from None
    except (OSError, InvalidHandshake, InvalidURI) as e:
        raise TransportError(f"the worker channel did not open: {type(e).__name__}: {e}") from None
    ch = Channel(ws, on_offer)
    try:
        await ws.send(json.dumps({"type": "hello", **hello(ch)}, separators=(",", ":")))
        text = await asyncio.wait_for(ws.recv(), _OPEN_TIMEOUT)
    except (ConnectionClosed, asyncio.TimeoutError) as e:
        await ws.close()
        raise TransportError(f"the worker channel broke before its welcome: {e or type(e).__name__}") from None
    except BaseException:
        ws.transport.abort()  # cancelled: the worker stops
        raise
    f: Any = None
    if isinstance(text, str):
        try:
            f = json.loads(text)
        except ValueError:
            pass
    if not isinstance(f, dict) or f.get("type") not in ("welcome", "error"):
        await ws.close(1002)
        raise TransportError(f"the worker channel's first frame is not a welcome: {text[:100]!r}")
    if f["type"] == "error":
        await ws.close(1008)
        resp = _error_response(f)
        raise NqdError(resp.status, f"nqd refused the channel's hello: {resp.error_message()}", resp.error_fields())
    ch._start(f)
    return ch


def _status_text(status: int) -> str:
    """The reason phrase of an HTTP status: the body of a refused upgrade is
    not read."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"
