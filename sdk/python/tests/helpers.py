"""Running a Worker beside a synchronous test."""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType
from typing import Any, Callable

from nqd_worker import Worker


class Running:
    """Runs worker.run() in a thread of its own with its own event loop;
    leaving the block stops the worker gracefully and waits for it."""

    def __init__(self, worker: Worker, stop_timeout: float = 30.0) -> None:
        self.worker = worker
        self.stop_timeout = stop_timeout
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
