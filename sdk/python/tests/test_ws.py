"""The WebSocket client against a scripted server in the test: the
handshake, masking, fragmentation, pings, the closing handshake, the bound
on a message's size, and what it refuses."""

from __future__ import annotations

import asyncio
import struct
from typing import Awaitable, Callable

import pytest

from nqd_worker import _ws
from nqd_worker._http import TransportError

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, accept: str | None = None) -> dict[str, str]:
    """Reads the client's upgrade and answers 101; returns its headers."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    key = accept if accept is not None else _ws.accept_key(headers["sec-websocket-key"])
    writer.write(
        f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {key}\r\n\r\n".encode()
    )
    return headers


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One frame of the client's: opcode, unmasked payload, whether it was masked."""
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", await reader.readexactly(8))
    masked = bool(b1 & 0x80)
    key = await reader.readexactly(4) if masked else b""
    payload = await reader.readexactly(n)
    return b0 & 0x0F, _ws.mask(payload, key) if masked else payload, masked


def server_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    return _ws.frame(opcode, payload, fin=fin, masked=False)


def run(script: Script, client: Callable[[str], Awaitable[None]]) -> None:
    async def main() -> None:
        done = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await script(reader, writer)
                done.set_result(None)
            except BaseException as e:  # noqa: BLE001 - re-raised by the test
                done.set_exception(e)
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await asyncio.wait_for(client(f"ws://127.0.0.1:{port}/api/_workers/channel"), 10)
            await asyncio.wait_for(done, 10)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_text_both_ways_masked_fragmented_with_a_ping_between() -> None:
    big = "é" * 40_000  # 80,000 bytes: a 64-bit length

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        headers = await handshake(reader, writer)
        assert headers["authorization"] == "Bearer t"
        assert headers["upgrade"] == "websocket" and headers["sec-websocket-version"] == "13"
        op, payload, masked = await read_frame(reader)
        assert (op, payload.decode(), masked) == (_ws.OP_TEXT, big, True)
        op, payload, masked = await read_frame(reader)
        assert (op, payload, masked) == (_ws.OP_TEXT, b"short", True)
        # One message in three frames, a ping between them.
        writer.write(server_frame(_ws.OP_TEXT, b"hel", fin=False))
        writer.write(server_frame(_ws.OP_PING, b"p1"))
        writer.write(server_frame(_ws.OP_CONT, b"lo ", fin=False))
        writer.write(server_frame(_ws.OP_CONT, "wörld".encode()))
        op, payload, masked = await read_frame(reader)
        assert (op, payload, masked) == (_ws.OP_PONG, b"p1", True)
        # The closing handshake, started by the client.
        op, payload, _ = await read_frame(reader)
        assert op == _ws.OP_CLOSE and struct.unpack("!H", payload[:2])[0] == 1000
        writer.write(server_frame(_ws.OP_CLOSE, payload[:2]))

    async def client(url: str) -> None:
        ws = await _ws.connect(url, {"Authorization": "Bearer t"})
        await ws.send(big)
        await ws.send("short")
        assert await ws.recv() == "hello wörld"
        await ws.close()
        assert not ws.open

    run(script, client)


def test_a_close_from_the_server_is_answered() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        writer.write(server_frame(_ws.OP_CLOSE, struct.pack("!H", 1001) + b"restart"))
        op, payload, _ = await read_frame(reader)
        assert op == _ws.OP_CLOSE and struct.unpack("!H", payload[:2])[0] == 1001

    async def client(url: str) -> None:
        ws = await _ws.connect(url, {})
        with pytest.raises(_ws.Closed) as e:
            await ws.recv()
        assert (e.value.code, e.value.reason) == (1001, "restart")
        with pytest.raises(_ws.Closed):
            ws.send_nowait("after the close")

    run(script, client)


def test_a_message_over_the_bound_fails_the_connection_with_1009() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        # Over the bound in fragments: none alone is too large.
        writer.write(server_frame(_ws.OP_TEXT, b"x" * 600, fin=False))
        writer.write(server_frame(_ws.OP_CONT, b"x" * 600))
        op, payload, _ = await read_frame(reader)
        assert op == _ws.OP_CLOSE and struct.unpack("!H", payload[:2])[0] == _ws.TOO_BIG

    async def client(url: str) -> None:
        ws = await _ws.connect(url, {}, max_message=1000)
        with pytest.raises(_ws.Closed) as e:
            await ws.recv()
        assert e.value.code == _ws.TOO_BIG

    run(script, client)


@pytest.mark.parametrize(
    "bad",
    [
        _ws.frame(_ws.OP_TEXT, b"masked", masked=True),  # a server's frame is never masked
        bytes([0x80 | 0x40 | _ws.OP_TEXT, 1]) + b"x",  # RSV1 without an extension
        server_frame(_ws.OP_CONT, b"nothing to continue"),
        server_frame(_ws.OP_PING, b"p", fin=False),  # a fragmented control frame
        server_frame(_ws.OP_TEXT, b"\xff\xfe"),  # not UTF-8
    ],
)
def test_a_broken_frame_fails_the_connection(bad: bytes) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        writer.write(bad)
        op, payload, _ = await read_frame(reader)
        assert op == _ws.OP_CLOSE and struct.unpack("!H", payload[:2])[0] in (_ws.PROTOCOL_ERROR, _ws.INVALID_DATA)

    async def client(url: str) -> None:
        ws = await _ws.connect(url, {})
        with pytest.raises(_ws.Closed):
            await ws.recv()

    run(script, client)


def test_an_upgrade_answered_with_a_status_is_refused_with_it() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"error":{"code":"not_found","message":"no such route"}}'
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    async def client(url: str) -> None:
        with pytest.raises(_ws.UpgradeRefused) as e:
            await _ws.connect(url, {})
        assert e.value.status == 404 and b"no such route" in e.value.body

    run(script, client)


def test_a_101_with_the_wrong_accept_key_is_not_taken() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer, accept="d3JvbmcK")

    async def client(url: str) -> None:
        with pytest.raises(TransportError):
            await _ws.connect(url, {})

    run(script, client)


def test_accept_key_and_mask() -> None:
    # RFC 6455, 1.3.
    assert _ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    # RFC 6455, 5.7: "Hello" masked with 37 fa 21 3d.
    assert _ws.mask(b"Hello", bytes.fromhex("37fa213d")) == bytes.fromhex("7f9f4d5158")
    assert _ws.mask(b"", b"abcd") == b""
