"""The SDK scenario list, each against a real nqd built from this repository.

Workers here long-poll their claims for 1 s instead of 5 s: a stop waits
for the claim in flight, and the tests stop many workers."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import pytest
from conftest import Nqd, sdk_version
from helpers import Running, retried_by_another_worker, wait_for

from nqd_worker import AuthError, Context, NqdError, PermanentError, SyncContext, Worker


def kinds(events: list[dict[str, Any]], step: str | None = None) -> list[str]:
    return [str(e["kind"]) for e in events if step is None or e.get("step") == step]


def of_kind(events: list[dict[str, Any]], kind: str, step: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind and (step is None or e.get("step") == step)]


def test_claim_and_complete(nqd: Nqd, transport: str) -> None:
    nqd.put_flow("py-claim", {"entry": "hello", "steps": {"hello": {"queue": "py-claim"}}})
    seen: list[tuple[Any, ...]] = []
    w = Worker(nqd.url, queues=["py-claim"], transport=transport)

    @w.step("hello", queue="py-claim")
    async def hello(input: Any, ctx: Context) -> Any:
        seen.append((ctx.job_id, ctx.queue, ctx.flow_id, ctx.flow_name, ctx.step_name, ctx.attempt, input))
        ctx.logger.info("greeting", {"n": input["n"]})
        await ctx.progress(50)
        return {"greeting": f"hello {input['n']}"}

    with Running(w):
        run = nqd.start_run("py-claim", {"n": 7})
        assert nqd.wait_status(run) == "completed"

    assert seen == [(f"{run}:hello", "py-claim", run, "py-claim", "hello", 1, {"n": 7})]
    assert nqd.run_state(run)["steps"]["hello"]["result"] == {"greeting": "hello 7"}
    evs = nqd.events(run)
    ks = kinds(evs, "hello")
    assert ks.index("step.started") < ks.index("log") < ks.index("step.progress") < ks.index("step.completed")
    (logged,) = of_kind(evs, "log")
    data = dict(logged["data"])
    assert data.pop("message", "greeting") == "greeting"  # nqd may add the era A spelling
    assert data == {"level": "info", "msg": "greeting", "n": 7}
    assert of_kind(evs, "step.progress")[0]["data"] == {"progress": 50}
    assert w.completed == 1 and w.failed == 0


def test_large_reports_go_in_batches_nqd_takes(nqd: Nqd, transport: str) -> None:
    q = "py-batches"
    nqd.put_flow(q, {"entry": "chatty", "steps": {"chatty": {"queue": q}}})
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("chatty", queue=q)
    async def chatty(input: Any, ctx: Context) -> None:
        # 1.2 MB of logs at once, over nqd's 1 MiB body if sent in one call.
        for i in range(6):
            ctx.logger.info(f"{i}:" + "x" * 200_000)

    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "completed"

    logs = of_kind(nqd.events(run), "log")
    assert [e["data"]["msg"].split(":")[0] for e in logs] == ["0", "1", "2", "3", "4", "5"]


def test_retriable_failure_then_success(nqd: Nqd, transport: str) -> None:
    policy = {"attempts": 3, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow("py-retry", {"entry": "flaky", "steps": {"flaky": {"queue": "py-retry", "retryPolicy": policy}}})
    attempts: list[int] = []
    w = Worker(nqd.url, queues=["py-retry"], claim_wait=1.0, transport=transport)

    @w.step("flaky", queue="py-retry")
    def flaky(input: Any, ctx: SyncContext) -> Any:  # a sync handler, run in a thread
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream timed out")
        return {"ok": ctx.attempt}

    with Running(w):
        run = nqd.start_run("py-retry", {})
        assert nqd.wait_status(run) == "completed"

    assert attempts == [1, 2]
    evs = nqd.events(run)
    # Each attempt starts with step.started, even one that reported nothing else.
    assert [(e["kind"], e["attempt"]) for e in evs if e["kind"] in ("step.started", "step.failed", "step.completed")] == [
        ("step.started", 1),
        ("step.failed", 1),
        ("step.started", 2),
        ("step.completed", 2),
    ]
    (failed,) = of_kind(evs, "step.failed")
    assert failed["attempt"] == 1
    assert failed["data"]["willRetry"] is True
    assert failed["data"]["error"] == "ConnectionError: upstream timed out"
    assert len(of_kind(evs, "step.retry")) == 1
    (done,) = of_kind(evs, "step.completed")
    assert done["attempt"] == 2 and done["data"]["result"] == {"ok": 2}


def test_non_retriable_failure(nqd: Nqd, transport: str) -> None:
    policy = {"attempts": 3, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow("py-perm", {"entry": "strict", "steps": {"strict": {"queue": "py-perm", "retryPolicy": policy}}})
    calls: list[int] = []
    w = Worker(nqd.url, queues=["py-perm"], claim_wait=1.0, transport=transport)

    @w.step("strict", queue="py-perm")
    async def strict(input: Any, ctx: Context) -> Any:
        calls.append(ctx.attempt)
        raise PermanentError("the order does not exist")

    with Running(w):
        run = nqd.start_run("py-perm", {})
        assert nqd.wait_status(run) == "failed"

    assert calls == [1]
    evs = nqd.events(run)
    assert kinds(evs, "strict") == ["step.started", "step.failed"]
    (failed,) = of_kind(evs, "step.failed")
    assert failed["data"]["willRetry"] is False
    assert failed["data"]["error"] == "the order does not exist"
    assert of_kind(evs, "flow.failed") and not of_kind(evs, "step.retry")


def test_a_result_nqd_refuses_fails_the_step(nqd: Nqd, transport: str) -> None:
    q = "py-big"
    policy = {"attempts": 3, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow(q, {"entry": "big", "steps": {"big": {"queue": q, "retryPolicy": policy}}})
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("big", queue=q)
    async def big(input: Any, ctx: Context) -> str:
        return "x" * 1_100_000  # over nqd's largest request body (1 MiB)

    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "failed"

    (failed,) = of_kind(nqd.events(run), "step.failed")
    assert failed["data"]["willRetry"] is False
    assert failed["data"]["error"].startswith("the step's result was refused: nqd answered 413")


def test_fan_in_with_emits_from_two_steps(nqd: Nqd, transport: str) -> None:
    q = "py-fanin"
    nqd.put_flow(
        q,
        {
            "entry": "start",
            "steps": {
                "start": {"queue": q, "emits": ["start.done"]},
                "left": {"queue": q, "subscribes": ["start.done"], "emits": ["left.done"]},
                "right": {"queue": q, "subscribes": ["start.done"], "emits": ["right.done"]},
                "join": {"queue": q, "subscribes": ["left.done", "right.done"]},
            },
        },
    )
    joined: list[Any] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, concurrency=4, transport=transport)

    @w.step("start", queue=q)
    async def start(input: Any, ctx: Context) -> None:
        await ctx.flow.emit("start.done", {"n": input["n"]})

    @w.step("left", queue=q)
    def left(input: Any, ctx: SyncContext) -> None:
        ctx.flow.emit("left.done", {"l": input["start.done"]["n"] + 1})

    @w.step("right", queue=q)
    async def right(input: Any, ctx: Context) -> None:
        await ctx.flow.handle_trigger("right.done", {"r": input["start.done"]["n"] + 2})

    @w.step("join", queue=q)
    async def join(input: Any, ctx: Context) -> Any:
        joined.append(input)
        return input

    with Running(w):
        run = nqd.start_run(q, {"n": 10})
        assert nqd.wait_status(run) == "completed"

    assert joined == [{"left.done": {"l": 11}, "right.done": {"r": 12}}]
    evs = nqd.events(run)
    assert sorted(e["data"]["event"] for e in of_kind(evs, "emit")) == ["left.done", "right.done", "start.done"]
    assert len(of_kind(evs, "step.completed", "join")) == 1


def test_state_writes_read_back(nqd: Nqd, transport: str) -> None:
    q = "py-state"
    nqd.put_flow(
        q,
        {
            "entry": "write",
            "steps": {
                "write": {"queue": q, "emits": ["write.done"]},
                "read": {"queue": q, "subscribes": ["write.done"]},
            },
        },
    )
    in_write: dict[str, Any] = {}
    in_read: dict[str, Any] = {}
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("write", queue=q)
    async def write(input: Any, ctx: Context) -> None:
        in_write["before"] = await ctx.state.get("count", "unset")
        await ctx.state.set("count", 1)
        in_write["after_set"] = await ctx.state.get("count")
        await ctx.state.set_batch({"name": "ada", "tmp": [1, 2]})
        in_write["has_tmp"] = await ctx.state.has("tmp")
        await ctx.state.delete("tmp")
        in_write["has_tmp_after_delete"] = await ctx.state.has("tmp")
        in_write["all"] = await ctx.state.get_all()
        await ctx.flow.emit("write.done")

    @w.step("read", queue=q)
    def read(input: Any, ctx: SyncContext) -> None:
        in_read["all"] = ctx.state.get_all()
        ctx.state.set("count", ctx.state.get("count") + 1)
        in_read["count"] = ctx.state.get("count")
        in_read["has_name"] = ctx.state.has("name")

    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "completed"

    assert in_write == {
        "before": "unset",
        "after_set": 1,
        "has_tmp": True,
        "has_tmp_after_delete": False,
        "all": {"count": 1, "name": "ada"},
    }
    assert in_read == {"all": {"count": 1, "name": "ada"}, "count": 2, "has_name": True}
    assert nqd.run_state(run)["state"] == {"count": 2, "name": "ada"}


def test_approval_await_resumed_by_a_trigger(nqd: Nqd, transport: str) -> None:
    q = "py-approval"
    nqd.put_flow(
        q,
        {
            "entry": "prepare",
            "steps": {
                "prepare": {"queue": q, "emits": ["prepare.done"]},
                "approve": {
                    "queue": q,
                    "subscribes": ["prepare.done"],
                    "await": {"type": "trigger", "triggerType": "user", "timeout": 60000},
                },
            },
        },
    )
    resumed: list[Any] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("prepare", queue=q)
    async def prepare(input: Any, ctx: Context) -> None:
        await ctx.flow.emit("prepare.done", {"amount": 12})

    @w.step("approve", queue=q)
    async def approve(input: Any, ctx: Context) -> Any:
        resumed.append((ctx.resume, input.get("prepare.done")))
        return {"approved": (ctx.resume or {}).get("payload", {}).get("approved")}

    with Running(w):
        run = nqd.start_run(q, {})

        def waiting() -> Any:
            items = nqd.ok("GET", f"/api/_flows/waits?kind=trigger&flowName={q}")["items"]
            return [i for i in items if i["runId"] == run]

        (wait,) = nqd.wait_until("the approval await", waiting)
        assert nqd.run_state(run)["status"] == "awaiting"
        assert resumed == []
        status, fired = nqd.call("POST", f"/api/_flows/triggers/{wait['triggerId']}", {"approved": True, "by": "ops"})
        assert status == 200 and fired["status"] == "fired"
        assert nqd.wait_status(run) == "completed"

    ((resume, prepared),) = resumed
    assert resume is not None and resume["awaitType"] == "trigger"
    assert resume["payload"] == {"approved": True, "by": "ops"}
    assert prepared == {"amount": 12}
    assert nqd.run_state(run)["steps"]["approve"]["result"] == {"approved": True}


def test_lease_expires_and_is_redelivered(short_lease_nqd: Nqd, transport: str) -> None:
    nqd = short_lease_nqd
    lease = nqd.lease()
    q = "py-lease"
    nqd.put_flow(q, {"entry": "once", "steps": {"once": {"queue": q, "retryPolicy": {"attempts": 2}}}})
    run = nqd.start_run(q, {})
    # A worker that claims the job and dies: no heartbeat, no report.
    claimed = nqd.ok("POST", "/api/_workers/claim", {"queues": [q], "max": 1})["jobs"]
    assert [j["runId"] for j in claimed] == [run]
    dead_lease = claimed[0]["lease"]
    attempts: list[int] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("once", queue=q)
    async def once(input: Any, ctx: Context) -> str:
        attempts.append(ctx.attempt)
        return "done"

    with Running(w):
        assert nqd.wait_status(run, timeout=lease + 30) == "completed"

    assert attempts == [2]
    status, _ = nqd.call("POST", f"/api/_workers/jobs/{q}/{run}:once/complete", {"lease": dead_lease})
    assert status == 409  # the dead worker's lease is gone


def test_lease_expires_and_is_redelivered_across_instances(own_nqd: Callable[..., Nqd], redis_url: str, transport: str) -> None:
    """Two nqd instances sharing a Redis: a job claimed on one and left to
    expire goes to the worker of the other."""
    env = {"NQ_REDIS_URL": redis_url, "NQ_JOB_LEASE": "5s"}
    a, b = own_nqd(env), own_nqd(env)
    lease = a.lease()
    q = "py-lease-redis"
    a.put_flow(q, {"entry": "once", "steps": {"once": {"queue": q, "retryPolicy": {"attempts": 2}}}})
    run = a.start_run(q, {})
    claimed = a.ok("POST", "/api/_workers/claim", {"queues": [q], "max": 1})["jobs"]
    assert [j["runId"] for j in claimed] == [run]
    attempts: list[int] = []
    w = Worker(b.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("once", queue=q)
    async def once(input: Any, ctx: Context) -> str:
        attempts.append(ctx.attempt)
        return "done"

    with Running(w):
        assert b.wait_status(run, timeout=lease + 30) == "completed"

    assert attempts == [2]
    status, _ = a.call("POST", f"/api/_workers/jobs/{q}/{run}:once/complete", {"lease": claimed[0]["lease"]})
    assert status == 409


def test_tokens(own_nqd: Callable[..., Nqd], transport: str) -> None:
    admin, writer, reader = ("a" * 40, "w" * 40, "r" * 40)
    srv = own_nqd({"NQ_TOKENS": f"admin:admin:{admin},worker:write:{writer},ui:read:{reader}"})
    srv.admin_token = admin
    q = "py-tokens"
    srv.put_flow(q, {"entry": "guarded", "steps": {"guarded": {"queue": q}}})

    def handler(input: Any, ctx: SyncContext) -> str:
        ctx.state.set("seen", True)
        return "ok"

    for token, status in ((None, 401), ("x" * 40, 401), (reader, 403)):
        w = Worker(srv.url, token=token, queues=[q], handlers=[], transport=transport)
        w.register("guarded", handler, q)
        with pytest.raises(AuthError) as caught:
            asyncio.run(asyncio.wait_for(w.run(), 10))
        assert caught.value.status == status
        assert "token" in str(caught.value)

    w = Worker(srv.url, token=writer, queues=[q], claim_wait=1.0, transport=transport)
    w.register("guarded", handler, q)
    with Running(w):
        run = srv.start_run(q, {})
        assert srv.wait_status(run) == "completed"
    assert srv.run_state(run)["state"] == {"seen": True}


def test_nqd_restarted_mid_step_loses_nothing(own_nqd: Callable[..., Nqd], transport: str) -> None:
    """nqd is killed (kill -9) twice while two steps run: once before the
    first's complete, once before the second's events; each report is
    retried until nqd is back, on the same lease, and the run completes
    with every step run once."""
    srv = own_nqd()
    q = "py-restart"
    srv.put_flow(
        q,
        {
            "entry": "first",
            "steps": {
                "first": {"queue": q, "emits": ["first.done"]},
                "second": {"queue": q, "subscribes": ["first.done"]},
            },
        },
    )
    entered = {"first": threading.Event(), "second": threading.Event()}
    release = {"first": threading.Event(), "second": threading.Event()}
    calls: list[tuple[str, int]] = []
    w = Worker(srv.url, queues=[q], claim_wait=1.0, concurrency=2, retry_cap=0.5, transport=transport)

    @w.step("first", queue=q)
    def first(input: Any, ctx: SyncContext) -> Any:
        calls.append(("first", ctx.attempt))
        ctx.flow.emit("first.done", {"v": 1})
        entered["first"].set()
        assert release["first"].wait(30)
        return {"first": True}  # completed while nqd is down

    @w.step("second", queue=q)
    def second(input: Any, ctx: SyncContext) -> Any:
        calls.append(("second", ctx.attempt))
        entered["second"].set()
        assert release["second"].wait(30)
        ctx.logger.info("written while nqd is down")
        ctx.state.set("second", input["first.done"]["v"] + 1)  # returns once nqd took it
        return {"second": True}

    def outage(step: str) -> None:
        # Both steps are held before nqd dies: a claim answered as nqd dies
        # would leave its job leased to no one until the lease ran out.
        assert entered["first"].wait(20) and entered["second"].wait(20)
        srv.kill()
        retried = w.report_retries
        release[step].set()
        # The step's reports fail while nqd is down and are retried...
        wait_for(f"a report of {step} to be retried", lambda: w.report_retries >= retried + 2)
        srv.start()

    with Running(w):
        run = srv.start_run(q, {})
        outage("first")
        outage("second")
        # ...and taken once it is back, on the same lease.
        assert srv.wait_status(run, timeout=30) == "completed"

    assert sorted(calls) == [("first", 1), ("second", 1)]
    evs = srv.events(run)
    assert not of_kind(evs, "flow.failed") and not of_kind(evs, "step.failed")
    assert len(of_kind(evs, "emit")) == 1
    assert [e["data"]["msg"] for e in of_kind(evs, "log")] == ["written while nqd is down"]
    assert of_kind(evs, "step.completed", "first")[0]["data"]["result"] == {"first": True}
    assert of_kind(evs, "step.completed", "second")[0]["data"]["result"] == {"second": True}
    assert srv.run_state(run)["state"] == {"second": 2}


def test_busy_worker_holds_no_more_jobs_than_slots(short_lease_nqd: Nqd, transport: str) -> None:
    """Concurrency 1 and more runs than slots: the first step outlives a
    lease, so it lives only by its heartbeats, and a job claimed without a
    free slot would have lost its lease before it could start."""
    nqd = short_lease_nqd
    lease = nqd.lease()
    q = "py-busy"
    nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    first = threading.Event()
    order: list[int] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, concurrency=1, transport=transport)

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> Any:
        order.append(input["i"])
        if not first.is_set():
            first.set()
            await asyncio.sleep(lease + 2)
        else:
            await asyncio.sleep(0.2)
        return input["i"]

    with Running(w):
        runs = [nqd.start_run(q, {"i": i}) for i in range(3)]
        for run in runs:
            assert nqd.wait_status(run, timeout=lease + 30) == "completed"

    assert w.max_held == 1
    assert sorted(order) == [0, 1, 2]
    for run in runs:
        evs = nqd.events(run)
        assert [e["attempt"] for e in of_kind(evs, "step.started")] == [1]
        assert not of_kind(evs, "step.failed")


def test_stop_lets_running_steps_finish(nqd: Nqd, transport: str) -> None:
    q = "py-stop"
    nqd.put_flow(q, {"entry": "s", "steps": {"s": {"queue": q}}})
    entered = threading.Event()
    w = Worker(nqd.url, queues=[q], grace=10, claim_wait=1.0, transport=transport)

    @w.step("s", queue=q)
    async def s(input: Any, ctx: Context) -> str:
        entered.set()
        await asyncio.sleep(0.5)
        return "finished"

    r = Running(w).__enter__()
    run = nqd.start_run(q, {})
    assert entered.wait(20)
    t0 = time.monotonic()
    r.stop()
    assert time.monotonic() - t0 < 5
    assert nqd.run_state(run)["status"] == "completed"


def test_stop_fails_steps_past_the_grace_period_as_retriable(nqd: Nqd, transport: str) -> None:
    q = "py-grace"
    policy = {"attempts": 2, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow(q, {"entry": "s", "steps": {"s": {"queue": q, "retryPolicy": policy}}})
    entered = threading.Event()
    w = Worker(nqd.url, queues=[q], grace=0.3, claim_wait=1.0, transport=transport)

    @w.step("s", queue=q)
    async def stuck(input: Any, ctx: Context) -> str:
        entered.set()
        await asyncio.sleep(60)
        return "never"

    r = Running(w).__enter__()
    run = nqd.start_run(q, {})
    assert entered.wait(20)
    t0 = time.monotonic()
    r.stop()
    # At once: within the grace period and the claim in flight, not a lease.
    assert time.monotonic() - t0 < 0.3 + 1.0 + 2.0
    (failed,) = of_kind(nqd.events(run), "step.failed")
    assert failed["data"]["willRetry"] is True
    assert "worker stopped" in failed["data"]["error"]

    retried_by_another_worker(nqd, q, "s", run, transport)


def test_stop_before_run_returns_at_once(transport: str) -> None:
    w = Worker("http://127.0.0.1:9", queues=["q"], transport=transport)  # nothing listens: a running worker would retry forever
    w.stop()
    asyncio.run(asyncio.wait_for(w.run(), 5))
    assert w.completed == 0 and w.failed == 0


def test_a_cancelled_run_stops_its_step(short_lease_nqd: Nqd, transport: str) -> None:
    nqd = short_lease_nqd
    q = "py-cancel"
    nqd.put_flow(q, {"entry": "long", "steps": {"long": {"queue": q}}})
    entered, stopped = threading.Event(), threading.Event()
    seen: list[bool] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("long", queue=q)
    async def long(input: Any, ctx: Context) -> str:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(ctx.canceled)
            stopped.set()
            raise
        return "never"

    with Running(w):
        run = nqd.start_run(q, {})
        assert entered.wait(20)
        nqd.ok("POST", f"/api/_flows/{q}/runs/{run}/cancel", {})
        assert stopped.wait(nqd.lease() + 10), "the step was not stopped"

    assert seen == [True]
    assert nqd.run_state(run)["status"] == "cancelled"
    assert not of_kind(nqd.events(run), "step.completed") and not of_kind(nqd.events(run), "step.failed")


def test_a_claim_nqd_refuses_stops_the_worker(nqd: Nqd, transport: str) -> None:
    w = Worker(nqd.url, queues=["not a queue name!"], claim_wait=1.0, transport=transport)
    with pytest.raises(NqdError) as caught:
        asyncio.run(asyncio.wait_for(w.run(), 10))
    assert caught.value.status == 400 and "queues[0]" in caught.value.fields


def test_an_address_that_is_not_http_is_refused_at_once(transport: str) -> None:
    with pytest.raises(ValueError, match="http"):
        Worker("127.0.0.1:8080", queues=["q"], transport=transport)


def test_a_refused_state_write_raises_where_it_is_awaited(nqd: Nqd, transport: str) -> None:
    q = "py-schema"
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
    nqd.put_flow(q, {"entry": "write", "stateSchema": schema, "steps": {"write": {"queue": q}}})
    refused: list[tuple[int, list[str]]] = []
    w = Worker(nqd.url, queues=[q], claim_wait=1.0, transport=transport)

    @w.step("write", queue=q)
    async def write(input: Any, ctx: Context) -> Any:
        try:
            await ctx.state.set("count", "many")
        except NqdError as e:
            refused.append((e.status, sorted(e.fields)))
        await ctx.state.set("count", 3)
        return await ctx.state.get_all()

    with Running(w):
        run = nqd.start_run(q, {})
        assert nqd.wait_status(run) == "completed"

    assert len(refused) == 1 and refused[0][0] == 422 and refused[0][1], refused
    assert nqd.run_state(run)["steps"]["write"]["result"] == {"count": 3}


def test_worker_is_listed(nqd: Nqd, transport: str) -> None:
    """The worker names itself to nqd's worker registry: by its hello over
    the channel, by its headers over HTTP."""
    a, b = f"py-listed-a-{transport}", f"py-listed-b-{transport}"
    w = Worker(nqd.url, queues=[a, b], concurrency=3, claim_wait=1.0, transport=transport)
    with Running(w):
        listed = wait_for(
            "the worker listed",
            lambda: nqd.call("GET", f"/api/_workers?queue={a}")[1]["workers"],
        )
    got = listed[0]
    assert (got["sdk"], got["transport"], got["status"], got["concurrency"]) == ("python", transport, "active", 3)
    assert got["queues"] == [a, b]
    assert got["host"] and got["version"] == sdk_version()
    # It said goodbye (over the channel, by closing it): nqd shows it left.
    wait_for(
        "the worker left",
        lambda: [(x["status"], x.get("reason")) for x in nqd.call("GET", f"/api/_workers?queue={a}")[1]["workers"]] == [("left", "closed")],
    )
