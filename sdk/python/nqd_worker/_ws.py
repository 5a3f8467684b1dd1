"""A small asyncio WebSocket client (RFC 6455), for the worker channel.

It does what the channel needs and no more: the opening handshake with the
worker's headers, text messages (fragmented or not) both ways, masked
frames from the client, answers to pings, the closing handshake, and a
bound on the size of a message it takes. No extensions are offered, so a
frame with a reserved bit set is an error.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import ssl
import struct
from urllib.parse import urlsplit

from ._http import TransportError

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEADER_LINE = 64 << 10
_MAX_REFUSAL_BODY = 64 << 10

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# Close codes (RFC 6455, 7.4.1).
NORMAL, GOING_AWAY, PROTOCOL_ERROR, INVALID_DATA, POLICY, TOO_BIG = 1000, 1001, 1002, 1007, 1008, 1009


class UpgradeRefused(Exception):
    """The server answered the upgrade with an HTTP status, not 101."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(f"the upgrade was answered {status}")
        self.status = status
        self.headers = headers
        self.body = body


class Closed(Exception):
    """The connection is closed: by a close frame (code and reason), or cut."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class ProtocolError(Exception):
    """The peer broke RFC 6455; the connection is failed with code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server answers to key."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")


def mask(payload: bytes, key: bytes) -> bytes:
    """payload XOR the repeated 4-byte key, as one big-integer operation
    rather than a loop over bytes."""
    n = len(payload)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True) -> bytes:
    """One frame; a client's frames are masked."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    bit = 0x80 if masked else 0
    if n < 126:
        head.append(bit | n)
    elif n < 1 << 16:
        head.append(bit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(bit | 127)
        head += struct.pack("!Q", n)
    if not masked:
        return bytes(head) + payload
    key = os.urandom(4)
    return bytes(head) + key + mask(payload, key)


class WebSocket:
    """One open WebSocket connection. recv() is called by one reader at a
    time; send() and send_nowait() from anywhere on the loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_message: int) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_message
        self._close_sent = False
        self._closed: Closed | None = None
        # Set once the connection ended, for a close() that waits while
        # another task reads.
        self._ended = asyncio.Event()
        self._reading = False

    @property
    def open(self) -> bool:
        return self._closed is None and not self._close_sent and not self._writer.is_closing()

    def send_nowait(self, text: str) -> None:
        """Writes a text message without waiting for the socket to take it;
        raises Closed once the connection is closing."""
        if not self.open:
            raise self._closed or Closed(NORMAL, "closing")
        self._writer.write(frame(OP_TEXT, text.encode("utf-8")))

    async def send(self, text: str) -> None:
        """Writes a text message and waits while the socket's buffer is full."""
        self.send_nowait(text)
        try:
            await self._writer.drain()
        except (OSError, ConnectionError) as e:
            raise Closed(1006, str(e)) from None

    async def recv(self) -> str:
        """The next text message. Answers pings on the way; raises Closed
        when the connection ends (a close frame, or the socket cut), after
        failing it for a protocol error or a message over the bound."""
        if self._closed is not None:
            raise self._closed
        self._reading = True
        try:
            return await self._recv()
        except ProtocolError as e:
            self._fail(e.code, str(e))
            raise self._closed or Closed(e.code, str(e)) from None
        except (asyncio.IncompleteReadError, OSError, ConnectionError) as e:
            self._closed = Closed(1006, f"the connection was cut: {type(e).__name__}")
            self._writer.close()
            raise self._closed from None
        finally:
            self._reading = False
            if self._closed is not None:
                self._ended.set()

    async def _recv(self) -> str:
        parts: list[bytes] = []
        size = 0
        opcode = None
        while True:
            fin, op, payload = await self._frame()
            if op >= 0x8:
                await self._control(op, payload)
                continue
            if op == OP_CONT:
                if opcode is None:
                    raise ProtocolError(PROTOCOL_ERROR, "a continuation frame with no message to continue")
            elif opcode is not None:
                raise ProtocolError(PROTOCOL_ERROR, "a new message inside a fragmented one")
            elif op in (OP_TEXT, OP_BINARY):
                opcode = op
            else:
                raise ProtocolError(PROTOCOL_ERROR, f"unknown opcode {op:#x}")
            size += len(payload)
            if size > self._max:
                raise ProtocolError(TOO_BIG, f"a message over {self._max} bytes")
            parts.append(payload)
            if not fin:
                continue
            data = b"".join(parts)
            if opcode == OP_BINARY:
                # The channel speaks text only: a binary message is skipped.
                parts, size, opcode = [], 0, None
                continue
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError(INVALID_DATA, "a text message that is not UTF-8") from None

    async def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = await self._reader.readexactly(2)
        if b0 & 0x70:
            raise ProtocolError(PROTOCOL_ERROR, "a reserved bit is set, and no extension was agreed")
        fin, op = bool(b0 & 0x80), b0 & 0x0F
        if b1 & 0x80:
            raise ProtocolError(PROTOCOL_ERROR, "a server's frame is masked")
        n = b1 & 0x7F
        if op >= 0x8 and (n > 125 or not fin):
            raise ProtocolError(PROTOCOL_ERROR, "a control frame that is fragmented or over 125 bytes")
        if n == 126:
            (n,) = struct.unpack("!H", await self._reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self._reader.readexactly(8))
        if n > self._max:
            raise ProtocolError(TOO_BIG, f"a frame of {n} bytes, over {self._max}")
        return fin, op, await self._reader.readexactly(n)

    async def _control(self, op: int, payload: bytes) -> None:
        if op == OP_PING:
            if self.open:
                self._writer.write(frame(OP_PONG, payload))
            return
        if op == OP_PONG:
            return
        if op != OP_CLOSE:
            raise ProtocolError(PROTOCOL_ERROR, f"unknown control opcode {op:#x}")
        code, reason = 1005, ""
        if len(payload) == 1:
            raise ProtocolError(PROTOCOL_ERROR, "a close frame with a one-byte payload")
        if len(payload) >= 2:
            (code,) = struct.unpack("!H", payload[:2])
            reason = payload[2:].decode("utf-8", "replace")
        # The closing handshake: answer the close with the same code, then
        # the server ends the TCP connection.
        if not self._close_sent and not self._writer.is_closing():
            self._close_sent = True
            self._writer.write(frame(OP_CLOSE, payload[:2]))
        self._closed = Closed(code, reason)
        self._writer.close()
        raise self._closed

    def _fail(self, code: int, why: str) -> None:
        if self._closed is None:
            self._closed = Closed(code, why)
        if not self._close_sent and not self._writer.is_closing():
            self._close_sent = True
            self._writer.write(frame(OP_CLOSE, struct.pack("!H", code) + why.encode("utf-8")[:120]))
        self._writer.close()

    def abort(self) -> None:
        """Cuts the connection without the closing handshake."""
        if self._closed is None:
            self._closed = Closed(1006, "aborted")
        self._writer.close()

    async def close(self, code: int = NORMAL, reason: str = "", timeout: float = 2.0) -> None:
        """The closing handshake: sends a close frame and waits (at most
        timeout) for the server's, read by the task that reads or else here,
        then closes the socket. Safe to repeat."""
        if self._closed is None and not self._close_sent and not self._writer.is_closing():
            self._close_sent = True
            self._writer.write(frame(OP_CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:120]))

            async def until_closed() -> None:
                if self._reading:
                    await self._ended.wait()
                    return
                while True:
                    await self.recv()  # messages after our close are dropped

            try:
                await asyncio.wait_for(until_closed(), timeout)
            except (Closed, asyncio.TimeoutError):
                pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError, ssl.SSLError):
            pass


async def connect(url: str, headers: dict[str, str], *, timeout: float = 10.0, max_message: int = 64 << 20) -> WebSocket:
    """Opens a WebSocket to url (ws://, wss://, or http(s):// for the same
    thing). Raises UpgradeRefused when the server answers with another
    status than 101, TransportError when it cannot be reached or breaks the
    handshake."""
    u = urlsplit(url)
    tls = u.scheme in ("wss", "https")
    if u.scheme not in ("ws", "wss", "http", "https") or not u.hostname:
        raise ValueError(f"not a WebSocket URL: {url!r}")
    port = u.port or (443 if tls else 80)
    host = u.hostname if ":" not in u.hostname else f"[{u.hostname}]"
    if u.port is not None:
        host = f"{host}:{u.port}"
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(u.hostname, port, ssl=ssl.create_default_context() if tls else None, limit=_MAX_HEADER_LINE),
            timeout,
        )
    except asyncio.TimeoutError:
        raise TransportError(f"could not connect within {timeout:g}s") from None
    except OSError as e:
        raise TransportError(f"cannot connect to {u.hostname}:{port}: {e}") from None
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status, answer = await asyncio.wait_for(_read_head(reader), timeout)
        if status != 101:
            body = b""
            n = answer.get("content-length", "")
            if n.isdigit() and int(n) <= _MAX_REFUSAL_BODY:
                body = await asyncio.wait_for(reader.readexactly(int(n)), timeout)
            writer.close()
            raise UpgradeRefused(status, answer, body)
        if answer.get("upgrade", "").lower() != "websocket" or answer.get("sec-websocket-accept") != accept_key(key):
            raise TransportError("the server's 101 is not a WebSocket handshake")
        if answer.get("sec-websocket-extensions"):
            raise TransportError("the server agreed to an extension that was not offered")
    except UpgradeRefused:
        raise
    except BaseException as e:
        writer.close()
        if isinstance(e, TransportError) or not isinstance(e, Exception):
            raise
        if isinstance(e, asyncio.TimeoutError):
            raise TransportError(f"no handshake answer within {timeout:g}s") from None
        raise TransportError(f"the handshake failed: {type(e).__name__}: {e}") from None
    return WebSocket(reader, writer, max_message)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {line[:80]!r}")
    headers: dict[str, str] = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n"):
            return int(parts[1]), headers
        if not h:
            raise asyncio.IncompleteReadError(h, None)
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
