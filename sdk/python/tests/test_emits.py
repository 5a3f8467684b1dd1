"""Emits made as a step begins wait with its step.started and go with the
step's completion (docs/worker-protocol.md, Complete), against a real nqd
through a proxy that records the worker's calls."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Nqd
from helpers import CountingProxy, Running, emits

from nqd_worker import Context, PermanentError, Worker


def chain_flow(nqd: Nqd, q: str) -> None:
    nqd.put_flow(
        q,
        {
            "entry": "first",
            "steps": {
                "first": {"queue": q, "emits": ["first.done"]},
                "second": {"queue": q, "subscribes": ["first.done"]},
            },
        },
    )


def chain_worker(url: str, q: str, inputs: list[Any]) -> Worker:
    # Through a proxy of HTTP calls: the worker speaks HTTP.
    w = Worker(url, queues=[q], concurrency=1, claim_wait=1.0, transport="http")

    @w.step("first", queue=q)
    async def first(input: Any, ctx: Context) -> str:
        await ctx.flow.emit("first.done", {"rows": 2})
        return "first"

    @w.step("second", queue=q)
    async def second(input: Any, ctx: Context) -> str:
        inputs.append(input)
        return "second"

    return w


def kinds(nqd: Nqd, run: str) -> list[str]:
    return [e["kind"] + (" " + e["step"] if e.get("step") else "") for e in nqd.events(run)]


def test_a_quick_emit_goes_with_the_completion(nqd: Nqd) -> None:
    q = "py-emit-quick"
    chain_flow(nqd, q)
    inputs: list[Any] = []
    runs = 3
    with CountingProxy(nqd.url) as proxy, Running(chain_worker(proxy.url, q, inputs)):
        for _ in range(runs):
            run = nqd.start_run(q)
            assert nqd.wait_status(run) == "completed"
            assert kinds(nqd, run) == [
                "flow.started",
                "step.started first",
                "emit first",
                "step.completed first",
                "step.started second",
                "step.completed second",
                "flow.completed",
            ]
    assert all(i == {"first.done": {"rows": 2}} for i in inputs), inputs
    # A step held up past step.started's wait sends its emit at once: each
    # emit goes one way, and a machine that stalls every step is unlikely.
    apart = [c for c in proxy.of("events") if emits(c)]
    with_completion = [c for c in proxy.of("complete") if emits(c)]
    assert len(apart) + len(with_completion) == runs
    assert with_completion


@pytest.mark.parametrize("ending", ["raises", "too-large-result"])
def test_a_quick_emit_before_a_failure_is_stored_first(nqd: Nqd, ending: str) -> None:
    """A step that emits and then fails, raising or with a result nqd
    refuses (too large), has its emit stored before the failure."""
    q = "py-emit-fail-" + ending
    chain_flow(nqd, q)
    w = Worker(nqd.url, queues=[q], concurrency=1, claim_wait=1.0)

    @w.step("first", queue=q)
    async def first(input: Any, ctx: Context) -> str:
        await ctx.flow.emit("first.done", None)
        if ending == "raises":
            raise PermanentError("bad input")
        return "x" * 300_000

    with Running(w):
        run = nqd.start_run(q)
        assert nqd.wait_status(run) == "failed"
    got = kinds(nqd, run)
    assert got[:3] == ["flow.started", "step.started first", "emit first"], got
    assert "step.failed first" in got


def test_an_emit_nqd_refuses_for_itself_fails_its_step(nqd: Nqd) -> None:
    """An emit without a name fails the step whose completion carried it,
    and is no sign of an older nqd: later emits still go with completions."""
    q = "py-emit-bad"
    chain_flow(nqd, q)
    with CountingProxy(nqd.url) as proxy:
        w = Worker(proxy.url, queues=[q], concurrency=1, claim_wait=1.0, transport="http")

        @w.step("first", queue=q)
        async def first(input: Any, ctx: Context) -> str:
            await ctx.flow.emit(input["name"], None)
            return "first"

        @w.step("second", queue=q)
        async def second(input: Any, ctx: Context) -> str:
            return "second"

        with Running(w):
            bad = nqd.start_run(q, {"name": ""})
            assert nqd.wait_status(bad) == "failed"
            # The call nqd refused carried step.started too: it is stored all the same.
            seen = kinds(nqd, bad)
            assert "step.started first" in seen, seen
            assert seen.index("step.started first") < seen.index("step.failed first"), seen
            for run in [nqd.start_run(q, {"name": "first.done"}) for _ in range(3)]:
                assert nqd.wait_status(run) == "completed"
    assert [c for c in proxy.of("complete") if emits(c) and c.status == 200]

