"""A completion that takes the slot's next job in its answer
(docs/worker-protocol.md, Complete), against a real nqd through a proxy that
records the worker's calls."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any, Callable, Iterator

import pytest
from conftest import Nqd
from helpers import CountingProxy, Running, retried_by_another_worker, wait_for

import nqd_worker.worker
from nqd_worker import Context, Worker


@pytest.fixture
def proxy(nqd: Nqd) -> Iterator[CountingProxy]:
    with CountingProxy(nqd.url) as p:
        yield p


def one_step_flow(nqd: Nqd, q: str, attempts: int = 1) -> None:
    step: dict[str, Any] = {"queue": q}
    if attempts > 1:
        step["retryPolicy"] = {"attempts": attempts, "backoff": {"type": "fixed", "delayMs": 50}}
    nqd.put_flow(q, {"entry": "work", "steps": {"work": step}})


def completed_once(nqd: Nqd, run: str) -> bool:
    kinds = [e["kind"] for e in nqd.events(run) if e.get("step") == "work"]
    return kinds.count("step.completed") == 1 and "step.failed" not in kinds


def run_all(nqd: Nqd, url: str, q: str, runs: list[str]) -> Worker:
    """Runs a one-slot worker through url until every run of runs completed,
    each step once, and returns it."""
    w = Worker(url, queues=[q], concurrency=1, claim_wait=1.0, transport="http")

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> int:
        return int(input["i"])

    with Running(w):
        for run in runs:
            assert nqd.wait_status(run) == "completed"
    assert all(completed_once(nqd, run) for run in runs)
    return w


def test_runs_waiting_reach_the_slot_in_completions(nqd: Nqd, proxy: CountingProxy) -> None:
    """Runs queued before the worker starts, one slot: the worker claims the
    first job, and each completion brings the next, asked for with the SDK's
    own wait."""
    q = "py-next-backlog"
    one_step_flow(nqd, q)
    runs = [nqd.start_run(q, {"i": i}) for i in range(5)]
    w = run_all(nqd, proxy.url, q, runs)
    completions = proxy.claiming_completions()
    assert [c.body["claim"] for c in completions] == [{"queues": [q], "max": 1, "waitMs": 50}] * len(runs)
    assert [len(c.jobs()) for c in completions[:-1]] == [1] * (len(runs) - 1)
    assert proxy.claims_between_jobs() == 0
    assert w.completed == len(runs) and w.max_held == 1


def test_a_closed_loop_of_runs_reaches_the_slot_in_completions(
    nqd: Nqd, proxy: CountingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run starts once the last one completed: the completion's claim
    waits for it, and the worker makes no claim call of its own while its
    slot holds a job. The wait is the protocol's longest (1 s) rather than the
    SDK's 50 ms, so that the test, polling for each run's end on a busy
    machine, starts the next run within it every time."""
    monkeypatch.setattr(nqd_worker.worker, "_NEXT_JOB_WAIT", 1.0)
    q = "py-next-loop"
    one_step_flow(nqd, q)
    w = Worker(proxy.url, queues=[q], concurrency=1, claim_wait=1.0, transport="http")

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> int:
        return int(input["i"])

    runs = []
    with Running(w):
        for i in range(6):
            runs.append(nqd.start_run(q, {"i": i}))
            assert nqd.wait_status(runs[-1]) == "completed"

    assert all(completed_once(nqd, run) for run in runs)
    completions = proxy.claiming_completions()
    assert len(completions) == len(runs)
    assert all(c.body["claim"]["waitMs"] == 1000 for c in completions)
    # nqd hands a start to a completion's claim that waits for one; a start
    # that lands just between the claim's look at the queue and its wait
    # stays in the queue for the worker's own claim instead (nothing is
    # lost). The worker claims only after such a completion, never while
    # its slot holds a job, and most completions bring the next run.
    assert proxy.claims_between_jobs(after_empty_completions=False) == 0
    assert sum(len(c.jobs()) for c in completions[:-1]) >= len(runs) // 2
    assert w.completed == len(runs)


def test_completions_keep_the_worker_within_its_concurrency(nqd: Nqd, proxy: CountingProxy) -> None:
    q = "py-next-slots"
    one_step_flow(nqd, q)
    runs = [nqd.start_run(q, {"i": i}) for i in range(24)]
    slots = 3
    running, most = 0, 0
    w = Worker(proxy.url, queues=[q], concurrency=slots, claim_wait=1.0, transport="http")

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)  # the step's work, for the others to run beside
        running -= 1
        return int(input["i"])

    with Running(w):
        for run in runs:
            assert nqd.wait_status(run) == "completed"

    assert all(completed_once(nqd, run) for run in runs)
    assert sum(len(c.jobs()) for c in proxy.claiming_completions()) > 0
    # The first claim took a job for each slot; no more were ever held.
    assert proxy.max_holding == slots
    assert most <= slots and w.max_held <= slots
    assert w.completed == len(runs)


def test_a_job_a_completion_brings_while_stopping_is_run(nqd: Nqd) -> None:
    """stop() while a completion that claims is on its way: the job its
    answer brings is run within the grace period, not dropped."""
    q = "py-next-stop"
    one_step_flow(nqd, q)
    ran: list[int] = []
    with CountingProxy(nqd.url, hold_claims=True) as proxy:
        w = Worker(proxy.url, queues=[q], concurrency=1, claim_wait=1.0, grace=10, transport="http")

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> int:
            ran.append(input["i"])
            return int(input["i"])

        with Running(w):
            first = nqd.start_run(q, {"i": 0})
            assert proxy.held.wait(20), "no completion claimed"
            second = nqd.start_run(q, {"i": 1})
            w.stop()
            proxy.release.set()

    assert ran == [0, 1]
    assert completed_once(nqd, first) and completed_once(nqd, second)
    (claiming,) = proxy.claiming_completions()
    assert [j["runId"] for j in claiming.jobs()] == [second]
    assert sum(len(c.jobs()) for c in proxy.of("claim")) == 1


def test_a_job_a_completion_brings_past_the_grace_period_is_handed_back(nqd: Nqd) -> None:
    """stop(now=True) while a completion that claims is on its way: the job
    its answer brings is failed as retriable at once, without running, so
    another worker takes it on its next attempt."""
    q = "py-next-stop-now"
    one_step_flow(nqd, q, attempts=2)
    ran: list[tuple[int, int]] = []
    with CountingProxy(nqd.url, hold_claims=True) as proxy:
        w = Worker(proxy.url, queues=[q], concurrency=1, claim_wait=1.0, grace=10, transport="http")

        @w.step("work", queue=q)
        async def work(input: Any, ctx: Context) -> int:
            ran.append((input["i"], ctx.attempt))
            return int(input["i"])

        with Running(w):
            first = nqd.start_run(q, {"i": 0})
            assert proxy.held.wait(20), "no completion claimed"
            second = nqd.start_run(q, {"i": 1})
            w.stop(now=True)
            # The grace period is over once the worker looked at its
            # running jobs; only then is the completion's answer let through.
            wait_for("the grace period to end", lambda: w._jobs_stopped)
            proxy.release.set()

    assert ran == [(0, 1)]
    assert completed_once(nqd, first)
    evs = [e for e in nqd.events(second) if e.get("step") == "work"]
    assert [(e["kind"], e["attempt"]) for e in evs if e["kind"] in ("step.started", "step.failed")] == [
        ("step.started", 1),
        ("step.failed", 1),
    ]
    (failed,) = [e for e in evs if e["kind"] == "step.failed"]
    assert failed["data"]["willRetry"] is True and "worker stopped" in failed["data"]["error"]

    retried_by_another_worker(nqd, q, "work", second)


def test_over_the_channel_the_next_job_comes_in_the_completions_ack(own_nqd: Callable[..., Nqd]) -> None:
    """The welcome says nextInAck: runs queued before the worker starts
    reach its one slot in the acks of the completions, one offer in all."""
    srv = own_nqd()
    q = "py-next-in-ack"
    one_step_flow(srv, q)
    runs = [srv.start_run(q, {"i": i}) for i in range(5)]
    w = Worker(srv.url, queues=[q], concurrency=1, claim_wait=1.0)

    @w.step("work", queue=q)
    async def work(input: Any, ctx: Context) -> int:
        return int(input["i"])

    with Running(w):
        for run in runs:
            assert srv.wait_status(run) == "completed"
    assert all(completed_once(srv, run) for run in runs)
    assert w.transport == "channel" and w.completed == len(runs)
    with urllib.request.urlopen(srv.url + "/metrics", timeout=15) as r:
        metrics = r.read().decode()
    assert '\nnqd_worker_channel_frames_total{direction="out",type="offer"} 1\n' in metrics
    assert "\nnqd_worker_channel_offered_jobs_total 5\n" in metrics
