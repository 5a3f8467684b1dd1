"""A small asyncio HTTP/1.1 client with a pool of keep-alive connections.

The worker only speaks JSON to one nqd, so this needs no more than
Content-Length request bodies, Content-Length or chunked answers, and a
pool of idle connections to reuse (a new TCP connection per report would
cap a worker's throughput well below what nqd can take).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_MAX_BODY = 16 << 20
_MAX_HEADER_LINE = 64 << 10


class TransportError(Exception):
    """The request got no complete answer: connection refused, reset, or timed out."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        if not self.body:
            return None
        return json.loads(self.body)

    def error_fields(self) -> dict[str, str]:
        """The fields of nqd's error shape: what was wrong, by JSON path."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return {}
        err = doc.get("error") if isinstance(doc, dict) else None
        fields = err.get("fields") if isinstance(err, dict) else None
        return {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {}

    def error_message(self) -> str:
        """The message of nqd's error shape, or the body as text."""
        try:
            doc = json.loads(self.body)
            err = doc.get("error") if isinstance(doc, dict) else None
            if isinstance(err, dict) and err.get("message"):
                msg = str(err["message"])
                if err.get("fields"):
                    msg += " " + json.dumps(err["fields"], sort_keys=True)
                return msg
        except ValueError:
            pass
        return self.body.decode("utf-8", "replace")[:500]


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class HTTPClient:
    """Sends requests to one base URL over pooled keep-alive connections."""

    def __init__(self, base_url: str, token: str | None = None, *, max_idle: int = 64) -> None:
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"nqd URL must be http:// or https://host[:port], got {base_url!r}")
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if u.scheme == "https" else None
        self._prefix = u.path
        default_port = (u.scheme == "https" and self._port == 443) or (u.scheme == "http" and self._port == 80)
        host_header = self._host if ":" not in self._host else f"[{self._host}]"
        self._host_header = host_header if default_port else f"{host_header}:{self._port}"
        self._token = token
        self._idle: list[_Conn] = []
        self._max_idle = max_idle
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Sends one request and reads its whole answer within timeout seconds.

        A request on a reused connection that the server had closed while it
        sat idle is sent again once on a new connection: nothing was read.
        """
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [f"{method} {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}", "Accept: application/json"]
        if body is not None or method in ("POST", "PUT"):
            head.append("Content-Type: application/json")
            head.append(f"Content-Length: {len(data)}")
        if self._token:
            head.append(f"Authorization: Bearer {self._token}")
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
        for fresh in (False, True):
            conn, reused = await self._get(fresh, timeout)
            try:
                resp, keep = await asyncio.wait_for(self._exchange(conn, raw, method), timeout)
            except _StaleConnection:
                conn.close()
                if reused:
                    continue
                raise TransportError("connection closed before an answer") from None
            except asyncio.CancelledError:
                conn.close()
                raise
            except asyncio.TimeoutError:
                conn.close()
                raise TransportError(f"no answer within {timeout:g}s") from None
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                conn.close()
                raise TransportError(f"{type(e).__name__}: {e}") from None
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
            else:
                conn.close()
            return resp
        raise TransportError("unreachable")  # pragma: no cover

    async def _get(self, fresh: bool, timeout: float) -> tuple[_Conn, bool]:
        if not fresh:
            while self._idle:
                conn = self._idle.pop()
                if conn.reader.at_eof() or conn.writer.is_closing():
                    conn.close()
                    continue
                return conn, True
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=_MAX_HEADER_LINE), timeout
            )
        except asyncio.TimeoutError:
            raise TransportError(f"could not connect within {timeout:g}s") from None
        except OSError as e:
            raise TransportError(f"cannot connect to {self._host}:{self._port}: {e}") from None
        return _Conn(reader, writer), False

    async def _exchange(self, conn: _Conn, raw: bytes, method: str) -> tuple[Response, bool]:
        conn.writer.write(raw)
        await conn.writer.drain()
        line = await conn.reader.readline()
        if not line:
            raise _StaleConnection()
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"not an HTTP answer: {line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            h = await conn.reader.readline()
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                raise asyncio.IncompleteReadError(h, None)
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(conn.reader)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n > _MAX_BODY:
                raise ValueError(f"answer of {n} bytes is too large")
            body = await conn.reader.readexactly(n)
        else:
            body = await conn.reader.read(_MAX_BODY)
            keep = False
        return Response(status, headers, body), keep

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass


class _StaleConnection(Exception):
    pass


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise asyncio.IncompleteReadError(bytes(out), None)
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, up to the blank line
                t = await reader.readline()
                if t in (b"\r\n", b"\n", b""):
                    return bytes(out)
        if len(out) + size > _MAX_BODY:
            raise ValueError("chunked answer is too large")
        out += await reader.readexactly(size)
        await reader.readexactly(2)
