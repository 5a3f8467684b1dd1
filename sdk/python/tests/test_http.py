"""The HTTP client against small scripted servers: answers in each framing,
connection reuse, a keep-alive connection the server closed, timeouts."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest

from nqd_worker._http import HTTPClient, TransportError

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


async def serve(script: Script) -> tuple[asyncio.Server, str, list[int]]:
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(len(conns))
        try:
            await script(reader, writer, len(conns))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    return srv, f"http://127.0.0.1:{port}", conns


def test_chunked_and_content_length_answers_on_one_connection() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        req = await read_request(reader)
        assert req.startswith(b"POST /api/x HTTP/1.1\r\n")
        assert b"Authorization: Bearer t0k\r\n" in req and req.endswith(b'{"a":1}')
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"ok\"\r\n5;x=y\r\n:true\r\n1\r\n}\r\n0\r\nX-T: 1\r\n\r\n")
        await read_request(reader)
        body = b'{"error":{"code":"conflict","message":"no","fields":{"lease":"lost"}}}'
        writer.write(b"HTTP/1.1 409 Conflict\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await reader.read()

    async def main() -> None:
        srv, url, conns = await serve(script)
        c = HTTPClient(url, "t0k")
        first = await c.request("POST", "/api/x", {"a": 1})
        assert (first.status, first.json()) == (200, {"ok": True})
        second = await c.request("GET", "/api/y")
        assert second.status == 409 and second.error_message() == 'no {"lease": "lost"}'
        assert second.error_fields() == {"lease": "lost"}
        assert len(conns) == 1
        await c.close()
        srv.close()

    asyncio.run(main())


def test_a_closed_idle_connection_is_replaced() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        # then close the keep-alive connection, as an idle timeout would

    async def main() -> None:
        srv, url, conns = await serve(script)
        c = HTTPClient(url)
        for _ in range(3):
            assert (await c.request("POST", "/api/x", {})).status == 200
        assert len(conns) == 3
        await c.close()
        srv.close()

    asyncio.run(main())


def test_connection_close_and_unframed_answers() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\nbusy")
        await writer.drain()

    async def main() -> None:
        srv, url, conns = await serve(script)
        c = HTTPClient(url)
        r = await c.request("POST", "/api/x", {})
        assert (r.status, r.body) == (503, b"busy")
        r = await c.request("POST", "/api/x", {})
        assert r.status == 503 and len(conns) == 2
        await c.close()
        srv.close()

    asyncio.run(main())


def test_no_answer_and_no_server_are_transport_errors() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def main() -> None:
        srv, url, _ = await serve(script)
        c = HTTPClient(url)
        with pytest.raises(TransportError, match="no answer"):
            await c.request("POST", "/api/x", {}, timeout=0.2)
        srv.close()
        await srv.wait_closed()
        with pytest.raises(TransportError, match="cannot connect"):
            await HTTPClient(url).request("GET", "/healthz")
        await c.close()

    asyncio.run(main())


def test_urls_it_refuses() -> None:
    for bad in ("127.0.0.1:8080", "ftp://host", "http://"):
        with pytest.raises(ValueError):
            HTTPClient(bad)
