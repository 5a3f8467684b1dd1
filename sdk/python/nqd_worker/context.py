"""What a step handler gets besides its input: the job, the run's state,
a logger, emits and progress, all reported to nqd as the run's events."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Mapping, TypeVar
from urllib.parse import quote

from .errors import EncodeError, NqdError

if TYPE_CHECKING:
    from .worker import _Job

T = TypeVar("T")

LEVELS = ("debug", "info", "warn", "error")


def encoded(job: _Job, field: str, value: Any) -> Any:
    """value as the JSON nqd gets, taken now: a value that cannot be
    encoded (a set, NaN, an object) raises EncodeError naming field here,
    where the step made it, rather than in the task that sends it, and the
    job keeps the error to fail the step with. A copy, so that the step may
    change the value afterwards."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        err = EncodeError(field, e)
        if job.encode_error is None:
            job.encode_error = err
        raise err from None


class Logger:
    """Appends `log` events to the run. Calls do not wait for nqd; the step's
    completion waits until every log line was stored. Each call returns a
    future that an async handler may await to know it was stored."""

    def __init__(self, job: _Job) -> None:
        self._job = job

    def log(self, level: str, msg: str, meta: Mapping[str, Any] | None = None) -> asyncio.Future[None]:
        if level == "warning":
            level = "warn"
        # The meta's fields go beside level and msg, where nqd keeps them as
        # the log line's metadata.
        data: dict[str, Any] = encoded(self._job, "log meta", dict(meta or {}))
        data["level"], data["msg"] = level, str(msg)
        return self._job.reporter.add({"kind": "log", "data": data}, quiet=True)

    def debug(self, msg: str, meta: Mapping[str, Any] | None = None) -> asyncio.Future[None]:
        return self.log("debug", msg, meta)

    def info(self, msg: str, meta: Mapping[str, Any] | None = None) -> asyncio.Future[None]:
        return self.log("info", msg, meta)

    def warn(self, msg: str, meta: Mapping[str, Any] | None = None) -> asyncio.Future[None]:
        return self.log("warn", msg, meta)

    warning = warn

    def error(self, msg: str, meta: Mapping[str, Any] | None = None) -> asyncio.Future[None]:
        return self.log("error", msg, meta)


class State:
    """The run's key-value state, written as `state.*` events and read from
    nqd's fold of the run. A read waits for this step's earlier writes to be
    stored, so a get after a set in the same step sees it."""

    def __init__(self, job: _Job) -> None:
        self._job = job

    async def set(self, key: str, value: Any) -> None:
        value = encoded(self._job, f"state value {key!r}", value)
        await self._job.reporter.add({"kind": "state.set", "data": {"key": key, "value": value}})

    async def delete(self, key: str) -> None:
        await self._job.reporter.add({"kind": "state.delete", "data": {"key": key}})

    async def set_batch(self, values: Mapping[str, Any]) -> None:
        ops = [{"type": "set", "key": k, "value": encoded(self._job, f"state value {k!r}", v)} for k, v in values.items()]
        if ops:
            await self._job.reporter.add({"kind": "state.batch", "data": {"operations": ops}})

    async def get_all(self) -> dict[str, Any]:
        await self._job.reporter.flush()
        path = "/api/_events/flow/" + quote(self._job.run_id, safe="") + "/state"
        resp = await self._job.worker._request("GET", path)
        if resp.status != 200:
            raise NqdError(resp.status, resp.error_message())
        doc = resp.json() or {}
        folded = doc.get("state") or {}
        values = folded.get("state") if isinstance(folded, dict) else None
        return dict(values) if isinstance(values, dict) else {}

    async def get(self, key: str, default: Any = None) -> Any:
        return (await self.get_all()).get(key, default)

    async def has(self, key: str) -> bool:
        return key in await self.get_all()


class Flow:
    """The run the step belongs to."""

    def __init__(self, job: _Job) -> None:
        self._job = job

    def emit(self, event: str, payload: Any = None) -> asyncio.Future[None]:
        """Emits event: steps subscribed to it run once all their
        subscriptions were emitted. Await it to know nqd took it. An emit
        made while step.started still waits for company (the step's first
        0.1 s, before it reported anything) waits with it and is done at
        once: it goes with the step's first report or its outcome, which nqd
        refuses as a whole should it refuse the emit."""
        payload = encoded(self._job, f"emit payload {event!r}", payload)
        return self._job.reporter.emit({"kind": "emit", "data": {"event": event, "payload": payload}})

    # Nuxt Queue's era A name for the same.
    handle_trigger = emit


class Context:
    """A step handler's context (the async one; sync handlers get a SyncContext)."""

    def __init__(self, job: _Job) -> None:
        self._job = job
        self.job_id: str = job.id
        self.queue: str = job.queue
        self.flow_id: str = job.run_id
        self.flow_name: str = job.flow_name
        self.step_name: str = job.step
        self.attempt: int = job.attempt
        self.input: Any = job.input
        self.logger = Logger(job)
        self.state = State(job)
        self.flow = Flow(job)

    @property
    def resume(self) -> dict[str, Any] | None:
        """How the await the step declared resolved (`_resume` in the input):
        awaitType, triggerId, payload, event, timedOut; None without an await."""
        r = self.input.get("_resume") if isinstance(self.input, dict) else None
        return r if isinstance(r, dict) else None

    @property
    def trigger(self) -> Any:
        """What resolved the step's await, as Nuxt Queue v0.5 handed it to a
        step: a webhook's or a trigger's body, an event await's event data;
        None without an await."""
        r = self.resume
        if r is None:
            return None
        if r.get("awaitType") == "event":
            e = r.get("event")
            return e["data"] if isinstance(e, dict) and "data" in e else e
        return r.get("payload", r) if r.get("payload") is not None else r

    @property
    def canceled(self) -> bool:
        """True once nqd said the run ended or the lease was lost: stop working."""
        return self._job.gone

    def progress(self, value: Any) -> asyncio.Future[None]:
        """Reports how far the step is: a number, 0–100 by convention."""
        value = encoded(self._job, "progress", value)
        return self._job.reporter.add({"kind": "step.progress", "data": {"progress": value}})


class _SyncLogger:
    def __init__(self, ctx: SyncContext) -> None:
        self._ctx = ctx

    def log(self, level: str, msg: str, meta: Mapping[str, Any] | None = None) -> None:
        # Encoded here, so that a meta that cannot be raises in the step.
        data = encoded(self._ctx._async._job, "log meta", dict(meta or {}))
        self._ctx._loop.call_soon_threadsafe(self._ctx._async.logger.log, level, msg, data)

    def debug(self, msg: str, meta: Mapping[str, Any] | None = None) -> None:
        self.log("debug", msg, meta)

    def info(self, msg: str, meta: Mapping[str, Any] | None = None) -> None:
        self.log("info", msg, meta)

    def warn(self, msg: str, meta: Mapping[str, Any] | None = None) -> None:
        self.log("warn", msg, meta)

    warning = warn

    def error(self, msg: str, meta: Mapping[str, Any] | None = None) -> None:
        self.log("error", msg, meta)


class _SyncState:
    def __init__(self, ctx: SyncContext) -> None:
        self._ctx = ctx
        self._s = ctx._async.state

    def set(self, key: str, value: Any) -> None:
        self._ctx._wait(self._s.set(key, value))

    def delete(self, key: str) -> None:
        self._ctx._wait(self._s.delete(key))

    def set_batch(self, values: Mapping[str, Any]) -> None:
        self._ctx._wait(self._s.set_batch(values))

    def get_all(self) -> dict[str, Any]:
        values: dict[str, Any] = self._ctx._wait(self._s.get_all())
        return values

    def get(self, key: str, default: Any = None) -> Any:
        return self._ctx._wait(self._s.get(key, default))

    def has(self, key: str) -> bool:
        return bool(self._ctx._wait(self._s.has(key)))


class _SyncFlow:
    def __init__(self, ctx: SyncContext) -> None:
        self._ctx = ctx

    def emit(self, event: str, payload: Any = None) -> None:
        self._ctx._wait(_awaited(self._ctx._async.flow.emit, event, payload))

    handle_trigger = emit


async def _awaited(fn: Any, *args: Any) -> None:
    await fn(*args)


class SyncContext:
    """The context of a plain (non-async) handler, which runs in a thread:
    the same names as Context, and each call returns once nqd took it."""

    def __init__(self, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        self._async = ctx
        self._loop = loop
        self.job_id = ctx.job_id
        self.queue = ctx.queue
        self.flow_id = ctx.flow_id
        self.flow_name = ctx.flow_name
        self.step_name = ctx.step_name
        self.attempt = ctx.attempt
        self.input = ctx.input
        self.logger = _SyncLogger(self)
        self.state = _SyncState(self)
        self.flow = _SyncFlow(self)

    @property
    def resume(self) -> dict[str, Any] | None:
        return self._async.resume

    @property
    def trigger(self) -> Any:
        return self._async.trigger

    @property
    def canceled(self) -> bool:
        return self._async.canceled

    def progress(self, value: Any) -> None:
        self._wait(_awaited(self._async.progress, value))

    def _wait(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
