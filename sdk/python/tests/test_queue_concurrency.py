"""Queues of different concurrency (docs/worker-protocol.md): one worker,
one channel, each queue held to its own number of jobs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path
from typing import Any, Callable, cast

import pytest
from conftest import SDK, Nqd
from helpers import Running, TunnelProxy, wait_for

import nqd_worker.worker
from nqd_worker import Context, NqdError, SyncContext, Worker
from nqd_worker._channel import Channel
from nqd_worker.cli import split_queues


def run_capped(nqd: Nqd, name: str, transport: str) -> Worker:
    """Runs eight runs on each of two queues through a worker that holds
    at most one job of the first at once and two of the second, checks it
    never held more, and returns it."""
    caps = {f"py-qc-a-{name}": 1, f"py-qc-b-{name}": 2}
    for q in caps:
        nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    # The worker's own concurrency is above the caps' sum: without them it
    # would hold six jobs of the sixteen ready, more than either queue takes.
    w = Worker(nqd.url, concurrency=6, queue_concurrency=caps, claim_wait=1.0, transport=transport)
    running = {q: 0 for q in caps}
    most = {q: 0 for q in caps}

    for q in caps:

        @w.step("work", queue=q, flow=q)
        async def work(input: Any, ctx: Context) -> Any:
            running[ctx.queue] += 1
            most[ctx.queue] = max(most[ctx.queue], running[ctx.queue])
            try:
                await asyncio.sleep(0.1)  # the step's work, during which others may start
            finally:
                running[ctx.queue] -= 1
            return input["n"]

    runs = [nqd.start_run(q, {"n": i}) for i in range(8) for q in caps]
    with Running(w):
        for run in runs:
            assert nqd.wait_status(run) == "completed"
    assert most == caps, f"the most jobs of each queue at once: {most}"
    assert w.completed == len(runs) and w.failed == 0
    return w


def test_each_queue_holds_at_most_its_concurrency(nqd: Nqd, transport: str) -> None:
    w = run_capped(nqd, transport, transport)
    assert w.transport == transport


def test_an_nqd_that_predates_queue_concurrency_is_served_over_http(nqd: Nqd, monkeypatch: pytest.MonkeyPatch) -> None:
    """Such an nqd refuses the hello as it refuses any field it does not
    know; the worker claims over HTTP, each queue for its own slots."""
    hellos: list[dict[str, Any]] = []

    async def predating(base: str, headers: dict[str, str], hello: Callable[[Channel], dict[str, Any]], on_offer: Any) -> Channel:
        hellos.append(hello(cast(Channel, None)))
        raise NqdError(400, "the hello is not valid", {"queueConcurrency": "unknown field"})

    monkeypatch.setattr(nqd_worker.worker, "open_channel", predating)
    w = run_capped(nqd, "predating", "channel")
    assert w.transport == "http"
    (hello,) = hellos
    assert hello["queueConcurrency"] == {"py-qc-a-predating": 1, "py-qc-b-predating": 2}
    assert hello["held"] == {} and hello["concurrency"] == 6 and hello["slots"] == 6


def test_queue_concurrency_is_checked() -> None:
    url = "http://127.0.0.1:1"
    assert Worker(url, queue_concurrency={"a": 2, "b": 3}).concurrency == 5
    assert Worker(url, queue_concurrency={"a": 2}).queues == ["a"]
    with pytest.raises(ValueError, match="less than queue_concurrency's sum 5"):
        Worker(url, concurrency=4, queue_concurrency={"a": 2, "b": 3})
    with pytest.raises(ValueError, match="queue 'b' a whole number"):
        Worker(url, queues=["a", "b"], queue_concurrency={"a": 2})
    with pytest.raises(ValueError, match="names 'c', which is not one of queues"):
        Worker(url, queues=["a"], queue_concurrency={"a": 2, "c": 1})
    with pytest.raises(ValueError, match="from 1 to 1000"):
        Worker(url, queue_concurrency={"a": 0})


def test_the_folder_splits_only_past_a_hellos_limits() -> None:
    assert split_queues({"a": 4, "b": 8}) == [{"a": 4, "b": 8}]
    many = {f"q{i:02}": 1 for i in range(33)}
    assert [len(p) for p in split_queues(many)] == [32, 1]
    assert split_queues({"a": 600, "b": 300, "c": 200}) == [{"a": 600, "b": 300}, {"c": 200}]


STEP = '''
config = {{
    "queue": "{queue}",
    "worker": {{"concurrency": {concurrency}}},
    "flow": {{"name": "{queue}", "role": "entry", "step": "work"}},
}}

def run(input, ctx):
    return ctx.queue
'''


def test_the_folder_command_serves_its_queues_on_one_channel(own_nqd: Callable[..., Nqd], tmp_path: Path) -> None:
    srv = own_nqd()
    steps = tmp_path / "steps"
    steps.mkdir()
    queues = {"py-fold-a": 1, "py-fold-b": 3, "py-fold-c": 2}
    for q, n in queues.items():
        (steps / f"{q}.py").write_text(textwrap.dedent(STEP.format(queue=q, concurrency=n)))
    env = dict(os.environ, NQD_URL=srv.url, PYTHONPATH=str(SDK))
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nqd_worker", str(steps), "--store-flows", "--concurrency", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        for q in queues:
            srv.wait_until(f"flow {q} to be stored", lambda: srv.call("GET", f"/api/_flows/{q}")[0] == 200)
            run = srv.start_run(q, {})
            assert srv.wait_status(run) == "completed", log.read_text()
            assert srv.run_state(run)["steps"]["work"]["result"] == q
        workers = srv.ok("GET", "/api/_workers?status=active")["workers"]
        assert [(w["sdk"], w["transport"], sorted(w["queues"]), w["concurrency"]) for w in workers] == [
            ("python", "channel", sorted(queues), sum(queues.values()))
        ]
        with urllib.request.urlopen(srv.url + "/metrics", timeout=15) as r:
            metrics = r.read().decode()
        assert "\nnqd_worker_channels_opened_total 1\n" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, log.read_text()


def test_a_reconnecting_worker_says_what_each_queue_still_holds(nqd: Nqd) -> None:
    """The channel drops while a step of a queue of concurrency 1 runs: the
    new hello's held keeps that queue full, so a run started meanwhile
    waits for the step rather than running beside it; the other queue's
    runs go on."""
    a, b = "py-qc-held-a", "py-qc-held-b"
    for q in (a, b):
        nqd.put_flow(q, {"entry": "work", "steps": {"work": {"queue": q}}})
    release = threading.Event()
    lock = threading.Lock()
    running = {a: 0, b: 0}
    most = {a: 0, b: 0}
    with TunnelProxy(nqd.url) as proxy:
        # Slots to spare beyond the caps: only held keeps the second run of a
        # from one of them.
        w = Worker(proxy.url, concurrency=4, queue_concurrency={a: 1, b: 1}, retry_base=0.05, retry_cap=1.0)

        for q in (a, b):

            @w.step("work", queue=q, flow=q)
            def work(input: Any, ctx: SyncContext) -> Any:
                with lock:
                    running[ctx.queue] += 1
                    most[ctx.queue] = max(most[ctx.queue], running[ctx.queue])
                try:
                    if input.get("hold"):
                        release.wait(30)
                finally:
                    with lock:
                        running[ctx.queue] -= 1
                return input

        with Running(w):
            first = nqd.start_run(a, {"hold": True})
            wait_for("the first step running", lambda: running[a] == 1)
            dropped = w._channel
            proxy.cut()
            wait_for("the channel back", lambda: w._channel is not None and w._channel is not dropped and w._channel.live)
            second = nqd.start_run(a, {})
            other = nqd.start_run(b, {})
            assert nqd.wait_status(other) == "completed"
            release.set()
            for run in (first, second):
                assert nqd.wait_status(run) == "completed"
    assert most == {a: 1, b: 1}, f"the most jobs of each queue at once: {most}"
    assert proxy.upgrades >= 2
