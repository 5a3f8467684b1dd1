"""Opening the worker channel and reading it, against a scripted WebSocket
server in the test: what the upgrade carries, the hello and its welcome,
answers matched to requests by ref, refusals of the upgrade and of the
hello, and a message over the bound."""

from __future__ import annotations

import asyncio
import http
import json
from typing import Any, Awaitable, Callable

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.legacy.server import WebSocketServerProtocol, serve

from nqd_worker import AuthError, NqdError, _channel
from nqd_worker._channel import Channel, Redirected, Refused, open_channel
from nqd_worker._http import TransportError

WELCOME = json.dumps({"type": "welcome", "leaseMs": 30000, "heartbeatMs": 10000, "maxFrameBytes": 1 << 20, "maxInFlight": 32})

Handler = Callable[[WebSocketServerProtocol], Awaitable[None]]
Refusal = Callable[[str, Headers], Awaitable[tuple[http.HTTPStatus, list[tuple[str, str]], bytes] | None]]


def serving(handler: Handler, client: Callable[[str], Awaitable[None]], refuse: Refusal | None = None) -> None:
    """Runs client(nqd's base URL) against a server that upgrades to
    handler, or answers what refuse gives."""

    async def main() -> None:
        failures: list[BaseException] = []

        async def handle(ws: WebSocketServerProtocol) -> None:
            try:
                await handler(ws)
            except BaseException as e:  # noqa: BLE001 - re-raised by the test
                failures.append(e)
                raise

        async with serve(handle, "127.0.0.1", 0, process_request=refuse, compression=None) as server:
            port = list(server.sockets)[0].getsockname()[1]
            await asyncio.wait_for(client(f"http://127.0.0.1:{port}"), 10)
        if failures:
            raise failures[0]

    asyncio.run(main())


def no_offers(jobs: list[dict[str, Any]], ch: Channel) -> None:
    raise AssertionError(f"offered {jobs}")


def test_the_upgrade_carries_the_headers_the_hello_is_welcomed_and_answers_find_their_requests() -> None:
    seen: dict[str, Any] = {}
    offered: list[dict[str, Any]] = []

    async def handler(ws: WebSocketServerProtocol) -> None:
        seen["authorization"] = ws.request_headers.get("Authorization")
        seen["worker"] = ws.request_headers.get("Nqd-Worker-Id")
        seen["hello"] = json.loads(await ws.recv())
        await ws.send(WELCOME)
        requests = {f["type"]: f for f in (json.loads(await ws.recv()), json.loads(await ws.recv()))}
        seen["requests"] = requests
        # Answered in the other order, with a binary message and an offer between.
        await ws.send(json.dumps({"type": "ack", "ref": requests["events"]["ref"], "body": {"events": []}}))
        await ws.send(b"\x00binary")
        await ws.send(json.dumps({"type": "offer", "jobs": [{"id": "j1"}, "not a job"]}))
        error = {"code": "conflict", "message": "lease lost"}
        await ws.send(json.dumps({"type": "error", "ref": requests["heartbeat"]["ref"], "status": 409, "error": error}))
        await ws.wait_closed()
        seen["close"] = ws.close_code

    async def client(base: str) -> None:
        headers = {"Authorization": "Bearer t", "Nqd-Worker-Id": "box-1-42-ab"}
        ch = await open_channel(base, headers, lambda c: {"workerId": "box-1-42-ab", "queues": ["q"], "concurrency": 2}, lambda jobs, c: offered.extend(jobs))
        assert ch.welcome["leaseMs"] == 30000 and ch.live
        refused, events = await asyncio.gather(
            ch.request("heartbeat", "q", "j0", {"lease": "l"}, 5), ch.request("events", "q", "j0", {"lease": "l", "events": []}, 5)
        )
        assert (events.status, events.json()) == (200, {"events": []})
        assert refused.status == 409 and refused.error_message() == "lease lost"
        assert offered == [{"id": "j1"}]
        await ch.close()
        assert not ch.live

    serving(handler, client)
    assert seen["authorization"] == "Bearer t" and seen["worker"] == "box-1-42-ab"
    assert seen["hello"] == {"type": "hello", "workerId": "box-1-42-ab", "queues": ["q"], "concurrency": 2}
    beat, events = seen["requests"]["heartbeat"], seen["requests"]["events"]
    assert beat == {"type": "heartbeat", "ref": beat["ref"], "queue": "q", "jobId": "j0", "lease": "l"}
    assert events["ref"] != beat["ref"] and events["events"] == []
    assert seen["close"] == 1000


@pytest.mark.parametrize("status", [400, 401, 403, 404, 426, 429, 502, 503])
def test_an_upgrade_answered_with_a_status_is_refused_with_it(status: int) -> None:
    async def refuse(path: str, headers: Headers) -> tuple[http.HTTPStatus, list[tuple[str, str]], bytes]:
        return http.HTTPStatus(status), [("Retry-After", "3"), ("Content-Type", "application/json")], b'{"error":{"code":"x","message":"no"}}'

    async def handler(ws: WebSocketServerProtocol) -> None:
        raise AssertionError("upgraded")

    async def client(base: str) -> None:
        with pytest.raises((Refused, AuthError)) as e:
            await open_channel(base, {}, lambda c: {}, no_offers)
        if status in (401, 403):
            assert isinstance(e.value, AuthError) and e.value.status == status
            return
        assert isinstance(e.value, Refused)
        assert e.value.response.status == status and e.value.response.headers["retry-after"] == "3"
        # nqd without the channel (404) or a proxy that cannot upgrade: HTTP.
        assert e.value.falls_back == (status in (400, 404, 426, 502))

    serving(handler, client, refuse)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirected_upgrade_is_not_followed_and_the_token_goes_nowhere_else(status: int) -> None:
    elsewhere: list[Headers] = []

    async def main() -> None:
        async def record(path: str, headers: Headers) -> tuple[http.HTTPStatus, list[tuple[str, str]], bytes]:
            elsewhere.append(headers)
            return http.HTTPStatus.NOT_FOUND, [], b""

        async def upgraded(ws: WebSocketServerProtocol) -> None:
            raise AssertionError("upgraded elsewhere")

        async with serve(upgraded, "127.0.0.1", 0, process_request=record) as other:
            other_port = list(other.sockets)[0].getsockname()[1]

            async def redirect(path: str, headers: Headers) -> tuple[http.HTTPStatus, list[tuple[str, str]], bytes]:
                return http.HTTPStatus(status), [("Location", f"ws://127.0.0.1:{other_port}/api/_workers/channel")], b""

            async def handler(ws: WebSocketServerProtocol) -> None:
                raise AssertionError("upgraded")

            async with serve(handler, "127.0.0.1", 0, process_request=redirect) as server:
                port = list(server.sockets)[0].getsockname()[1]
                with pytest.raises(Redirected) as e:
                    await asyncio.wait_for(open_channel(f"http://127.0.0.1:{port}", {"Authorization": "Bearer secret"}, lambda c: {}, no_offers), 10)
                assert e.value.location == f"ws://127.0.0.1:{other_port}/api/_workers/channel"

    asyncio.run(main())
    assert elsewhere == []


def test_a_refused_hello_is_an_nqd_error_and_closes_the_channel() -> None:
    closed: list[int | None] = []

    async def handler(ws: WebSocketServerProtocol) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "error", "status": 400, "error": {"code": "invalid", "message": "bad hello", "fields": {"queues": "required"}}}))
        await ws.wait_closed()
        closed.append(ws.close_code)

    async def client(base: str) -> None:
        with pytest.raises(NqdError) as e:
            await open_channel(base, {}, lambda c: {"workerId": "w"}, no_offers)
        assert e.value.status == 400 and e.value.fields == {"queues": "required"}

    serving(handler, client)
    assert closed == [1008]


def test_a_message_over_the_bound_closes_the_channel_and_fails_what_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_channel, "_MAX_MESSAGE", 1000)
    closed: list[int | None] = []

    async def handler(ws: WebSocketServerProtocol) -> None:
        await ws.recv()
        await ws.send(WELCOME)
        await ws.recv()  # the heartbeat, answered with too much
        await ws.send(json.dumps({"type": "ack", "ref": "1", "body": {"pad": "x" * 2000}}))
        try:
            await ws.recv()
        except ConnectionClosed as e:
            closed.append(e.code)

    async def client(base: str) -> None:
        ch = await open_channel(base, {}, lambda c: {"workerId": "w"}, no_offers)
        with pytest.raises(TransportError):
            await ch.request("heartbeat", "q", "j", {"lease": "l"}, 5)
        await asyncio.wait_for(ch.closed.wait(), 5)
        assert not ch.live
        await ch.close()

    serving(handler, client)
    assert closed == [1009]


def test_a_101_that_is_not_a_websocket_handshake_is_a_transport_error() -> None:
    async def main() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: d3JvbmcK\r\n\r\n")
            await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(TransportError):
                await open_channel(f"http://127.0.0.1:{port}", {}, lambda c: {}, no_offers)
        finally:
            server.close()
            await server.wait_closed()
        # Nothing listens there any more.
        with pytest.raises(TransportError):
            await open_channel(f"http://127.0.0.1:{port}", {}, lambda c: {}, no_offers)

    asyncio.run(main())
