"""Steps that must end, one way or the other, and workers that must stop:
values that cannot be encoded, an outcome held up by a busy nqd for longer
than a lease, a short lease with a second worker waiting, a cancelled run,
handlers found by flow and step."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, cast

import pytest
from conftest import Nqd
from helpers import CountingProxy, Running

from nqd_worker import Context, EncodeError, SyncContext, Worker


def failures(nqd: Nqd, run: str) -> list[str]:
    return [str(e["data"]["error"]) for e in nqd.events(run) if e["kind"] == "step.failed"]


async def bad_state(input: Any, ctx: Context) -> Any:
    await ctx.state.set("k", {1, 2})


async def bad_log(input: Any, ctx: Context) -> Any:
    try:
        ctx.logger.info("x", {"s": {1, 2}})
    except EncodeError:
        pass  # let through: the step fails all the same
    return "ok"


def bad_log_sync(input: Any, ctx: SyncContext) -> Any:
    ctx.logger.info("x", {"s": {1, 2}})


async def bad_emit(input: Any, ctx: Context) -> Any:
    await ctx.flow.emit("done", float("nan"))


async def bad_result(input: Any, ctx: Context) -> Any:
    return {"s": {1, 2}}


@pytest.mark.parametrize(
    "handler, field",
    [
        (bad_state, "state value 'k'"),
        (bad_log, "log meta"),
        (bad_log_sync, "log meta"),
        (bad_emit, "emit payload 'done'"),
        (bad_result, "result"),
    ],
    ids=["state-value", "log-meta", "log-meta-sync", "emit-payload", "result"],
)
def test_a_value_that_cannot_be_encoded_fails_the_step(nqd: Nqd, handler: Callable[..., Any], field: str) -> None:
    """The step fails at once with a message naming the value, retried as
    its policy says and no more, and nothing of the value is stored."""
    q = "py-unencodable-" + handler.__name__.replace("_", "-")
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q, "emits": ["done"], "retryPolicy": {"attempts": 2}}}})
    w = Worker(nqd.url, queues=[q], claim_wait=1.0)
    w.register("work", handler, q)
    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "failed"
    got = failures(nqd, run)
    assert len(got) == 2, got
    for msg in got:
        assert msg.startswith(f"{field} cannot be encoded as JSON"), msg
    kinds = [e["kind"] for e in nqd.events(run)]
    assert not {"state.set", "log", "emit"} & set(kinds), kinds


def test_an_outcome_through_5xx_longer_than_a_lease(own_nqd: object) -> None:
    """The job is heartbeaten until its outcome is acknowledged."""
    srv = cast(Callable[..., Nqd], own_nqd)({"NQ_JOB_LEASE": "1500ms"})
    q = "py-outage"
    srv.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    with CountingProxy(srv.url, fail_completes=4.0) as proxy:
        w = Worker(proxy.url, queues=[q], claim_wait=1.0, transport="http")

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            return "ok"

        with Running(w):
            run = srv.start_run(q, {})
            assert srv.wait_status(run) == "completed"
    evs = srv.events(run)
    (done,) = [e for e in evs if e["kind"] == "step.completed"]
    assert done["attempt"] == 1 and not failures(srv, run)
    assert len([c for c in proxy.of("complete") if c.status == 503]) >= 2


def test_a_short_lease_with_a_second_worker_waiting(own_nqd: object) -> None:
    """A 3 s lease, the worker's defaults, a step longer than the lease and
    a second worker waiting on the queue: the step runs once."""
    srv = cast(Callable[..., Nqd], own_nqd)({"NQ_JOB_LEASE": "3s"})
    q = "py-short-lease"
    srv.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q, "retryPolicy": {"attempts": 3}}}})
    ran: list[int] = []

    async def work(input: Any, ctx: Context) -> str:
        ran.append(ctx.attempt)
        await asyncio.sleep(5)  # longer than the lease
        return "done"

    first, second = Worker(srv.url, queues=[q]), Worker(srv.url, queues=[q])
    for w in (first, second):
        w.register("work", work, q)
    with Running(first), Running(second):
        run = srv.start_run(q, {})
        assert srv.wait_status(run) == "completed"
    assert ran == [1]
    assert [e["kind"] for e in srv.events(run)].count("step.started") == 1


def test_a_cancelled_run_stops_its_step(own_nqd: object) -> None:
    srv = cast(Callable[..., Nqd], own_nqd)({"NQ_JOB_LEASE": "3s"})
    q = "py-cancel"
    srv.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    entered = threading.Event()
    cancelled = threading.Event()
    w = Worker(srv.url, queues=[q], grace=1.0, claim_wait=1.0)

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> None:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with Running(w):
        run = srv.start_run(q, {})
        assert entered.wait(20)
        srv.ok("POST", f"/api/_flows/{q}/runs/{run}/cancel")
        assert cancelled.wait(20), "the step was not told its run was cancelled"
        assert srv.wait_status(run, ("cancelled", "canceled")) in ("cancelled", "canceled")
    kinds = [e["kind"] for e in srv.events(run)]
    assert "step.failed" not in kinds and "step.completed" not in kinds, kinds


def test_a_stop_while_an_outcome_is_retried_ends_within_the_grace_period(nqd: Nqd) -> None:
    q = "py-stop-outage"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    with CountingProxy(nqd.url, fail_completes=3600.0) as proxy:
        w = Worker(proxy.url, queues=[q], grace=1.0, claim_wait=1.0, transport="http")

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> str:
            return "ok"

        r = Running(w, stop_timeout=10.0)
        with r:
            nqd.start_run(q, {})
            nqd.wait_until("nqd to refuse the completion", lambda: proxy.of("complete"))


def test_handlers_by_flow_and_step(nqd: Nqd) -> None:
    """Two flows with a step of the same name on one queue: each job gets
    its flow's handler, a third flow the one for the step's name alone."""
    q = "py-by-flow"
    for f in ("py-by-flow-a", "py-by-flow-b", "py-by-flow-c"):
        nqd.put_flow(f, {"entry": "work", "steps": {"work": {"queue": q}}})
    w = Worker(nqd.url, queues=[q], claim_wait=1.0)
    for flow, who in (("py-by-flow-a", "a"), ("py-by-flow-b", "b"), (None, "any")):

        def by(who: str) -> Callable[[Any, SyncContext], str]:
            return lambda input, ctx: who

        w.register("work", by(who), q, flow=flow)
    with Running(w):
        for f, want in (("py-by-flow-a", "a"), ("py-by-flow-b", "b"), ("py-by-flow-c", "any")):
            run = nqd.start_run(f, {})
            assert nqd.wait_status(run) == "completed"
            assert nqd.run_state(run)["steps"]["work"]["result"] == want
