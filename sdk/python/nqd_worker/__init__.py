"""nqd_worker: run Python step handlers of nqd flows, and start and follow
their runs from app code (Client).

    from nqd_worker import Worker

    worker = Worker("http://127.0.0.1:8080", queues=["default"], concurrency=4)

    @worker.step("fetch_data")
    async def fetch_data(input, ctx):
        ctx.logger.info("fetching", {"url": input["url"]})
        await ctx.state.set("rows", 42)
        await ctx.flow.emit("fetch_data.completed", {"rows": 42})
        return {"rows": 42}

    worker.run_forever()
"""

from __future__ import annotations

from typing import Callable

from .client import (
    Client,
    RunCancelledError,
    RunError,
    RunFailedError,
    Started,
    StreamEvent,
    WaitTimeoutError,
    result,
)
from .context import Context, SyncContext
from .errors import AuthError, EncodeError, JobCanceled, LeaseLost, NqdError, PermanentError
from .worker import Backoff, Handler, Registration, Worker

__all__ = [
    "AuthError",
    "Backoff",
    "Client",
    "Context",
    "EncodeError",
    "Handler",
    "JobCanceled",
    "LeaseLost",
    "NqdError",
    "PermanentError",
    "Registration",
    "RunCancelledError",
    "RunError",
    "RunFailedError",
    "Started",
    "StreamEvent",
    "SyncContext",
    "WaitTimeoutError",
    "Worker",
    "registered",
    "result",
    "step",
]

_registry: dict[str, Registration] = {}


def step(name: str, queue: str = "default", *, flow: str | None = None) -> Callable[[Handler], Handler]:
    """Registers the decorated function as the handler of step name (of
    that flow's step only, with flow) in the module-wide registry that
    `nqd-worker-py` runs (and that `Worker(handlers=registered())` takes)."""

    def register(fn: Handler) -> Handler:
        reg = Registration(name, fn, queue, flow)
        old = _registry.get(reg.key)
        if old is not None and old.handler is not fn:
            raise ValueError(f"step {reg.key!r} has a handler already")
        _registry[reg.key] = reg
        return fn

    return register


def registered() -> list[Registration]:
    """The handlers registered with @step so far."""
    return list(_registry.values())
