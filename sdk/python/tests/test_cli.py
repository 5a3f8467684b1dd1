"""`python -m nqd_worker` against a real nqd: step files in both shapes, the
flows they declare stored, a graceful stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, cast

from conftest import SDK, Nqd

from nqd_worker.cli import build_flows, expand, load, nuxt_queue_steps, subscribed_input

NUXT_SHAPED = '''
config = {
    "queue": "py-cli",
    "flow": {"name": ["py-cli-flow"], "role": "entry", "step": "hello", "emits": ["hello.done"]},
}

def run(payload, ctx=None):
    ctx.logger.info("hello from a Nuxt Queue-shaped file")
    ctx.flow.emit("hello.done", {"name": payload["name"]})
    return {"status": "ok"}
'''

SHOUT = '''
config = {
    "queue": "py-cli",
    "flow": {"name": "py-cli-flow", "role": "step", "step": "shout", "subscribes": ["hello.done"]},
}

def run(input, ctx):
    # Subscribed to one event, the step gets its payload, as in Nuxt Queue.
    assert input["flowId"] == ctx.flow_id
    return input["name"].upper()
'''

DECORATED = '''
from nqd_worker import step

@step("count", queue="py-cli")
async def count(input, ctx):
    await ctx.state.set("n", input["n"] + 1)
    return await ctx.state.get("n")
'''


def write_steps(folder: Path) -> None:
    (folder / "nested").mkdir(parents=True)
    (folder / "hello.py").write_text(textwrap.dedent(NUXT_SHAPED))
    (folder / "nested" / "shout.py").write_text(textwrap.dedent(SHOUT))
    (folder / "nested" / "counter.py").write_text(textwrap.dedent(DECORATED))


def test_flow_definitions_from_nuxt_queue_configs(tmp_path: Path) -> None:
    write_steps(tmp_path)
    files = {"hello": tmp_path / "hello.py", "nested/shout": tmp_path / "nested" / "shout.py"}
    steps = {id: nuxt_queue_steps(load(str(p)), id) for id, p in files.items()}
    assert [(r.flow, r.step, r.queue) for found in steps.values() for r, _ in found] == [
        ("py-cli-flow", "hello", "py-cli"),
        ("py-cli-flow", "shout", "py-cli"),
    ]
    assert build_flows([(id, found[0][1]) for id, found in steps.items()]) == (
        [
            {
                "name": "py-cli-flow",
                "entry": "hello",
                "steps": {
                    "hello": {"queue": "py-cli", "workerId": "hello", "emits": ["hello.done"]},
                    "shout": {"queue": "py-cli", "workerId": "nested/shout", "subscribes": ["hello.done"]},
                },
            }
        ],
        [],
        [],
    )


def test_flow_definitions_take_queue_options_and_awaits(tmp_path: Path) -> None:
    f = tmp_path / "approve.py"
    f.write_text(
        textwrap.dedent(
            """
            config = {
                "queue": {"name": "approvals", "defaultJobOptions": {
                    "attempts": 3, "backoff": {"type": "exponential", "delay": 500, "maxDelay": 4000}, "timeout": 9000}},
                "flow": {"name": ["a", "b"], "role": "step", "step": ["approve"], "subscribes": "order.placed",
                         "await": {"type": "trigger", "timeout": 60000}},
            }
            def run(input, ctx):
                return None
            """
        )
    )
    steps = nuxt_queue_steps(load(str(f)))
    assert [(r.flow, r.step) for r, _ in steps] == [("a", "approve"), ("b", "approve")]
    step = {
        "queue": "approvals",
        "workerId": "approve",
        "subscribes": ["order.placed"],
        "retryPolicy": {"attempts": 3, "backoff": {"type": "exponential", "delayMs": 500, "maxDelayMs": 4000}},
        "await": {"type": "trigger", "timeout": 60000},
        "timeout": 9000,
    }
    flows, _, warnings = build_flows([("approve", steps[0][1])])
    assert flows == [
        {"name": "a", "entry": "", "steps": {"approve": step}},
        {"name": "b", "entry": "", "steps": {"approve": step}},
    ]
    assert warnings == [
        "flow a has no step with role 'entry'; nqd cannot start it",
        "flow b has no step with role 'entry'; nqd cannot start it",
    ]


def test_module_entry_point_runs_a_folder_of_steps(nqd: Nqd, tmp_path: Path) -> None:
    steps = tmp_path / "queues"
    write_steps(steps)
    env = dict(os.environ, NQD_URL=nqd.url, PYTHONPATH=str(SDK))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nqd_worker", str(steps), "--store-flows", "--concurrency", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        flow = nqd.wait_until("the flow to be stored", lambda: nqd.call("GET", "/api/_flows/py-cli-flow")[0] == 200)
        assert flow
        run = nqd.start_run("py-cli-flow", {"name": "ada"})
        assert nqd.wait_status(run) == "completed"
        assert nqd.run_state(run)["steps"]["shout"]["result"] == "ADA"
        nqd.put_flow("py-cli-count", {"entry": "count", "steps": {"count": {"queue": "py-cli"}}})
        run = nqd.start_run("py-cli-count", {"n": 41})
        assert nqd.wait_status(run) == "completed"
        assert nqd.run_state(run)["steps"]["count"]["result"] == 42
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    assert b"running steps count, py-cli-flow/hello, py-cli-flow/shout on queues py-cli" in out


def test_module_entry_point_says_when_the_token_is_refused(own_nqd: object, tmp_path: Path) -> None:
    srv = cast(Callable[..., Nqd], own_nqd)({"NQ_TOKENS": "admin:admin:" + "a" * 40})
    steps = tmp_path / "queues"
    write_steps(steps)
    env = dict(os.environ, PYTHONPATH=str(SDK))
    env.pop("NQD_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "nqd_worker", str(steps), "--url", srv.url],
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 3
    assert b"nqd refused the worker (401)" in done.stderr
    assert b"--token" in done.stderr


SLOW = '''
import asyncio
from nqd_worker import step

@step("slow", queue="py-cli-slow")
async def slow(input, ctx):
    await asyncio.sleep(60)
'''


def test_a_second_signal_quits_without_waiting(nqd: Nqd, tmp_path: Path) -> None:
    import time

    (tmp_path / "slow.py").write_text(textwrap.dedent(SLOW))
    q = "py-cli-slow"
    policy = {"attempts": 2, "backoff": {"type": "fixed", "delayMs": 60000}}
    nqd.put_flow(q, {"entry": "slow", "steps": {"slow": {"queue": q, "retryPolicy": policy}}})
    env = dict(os.environ, NQD_URL=nqd.url, PYTHONPATH=str(SDK))
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nqd_worker", str(tmp_path / "slow.py"), "--grace", "30000"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        run = nqd.start_run(q, {})
        nqd.wait_until("the step to start", lambda: any(e["kind"] == "step.started" for e in nqd.events(run)))
        proc.send_signal(signal.SIGTERM)
        nqd.wait_until("the worker to say it is stopping", lambda: b"signal again to quit now" in log.read_bytes())
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, log.read_text()
    assert took < 10  # not the 30 s grace, nor the 60 s step
    (failed,) = [e for e in nqd.events(run) if e["kind"] == "step.failed"]
    assert failed["data"]["willRetry"] is True
    assert "worker stopped" in failed["data"]["error"]


def test_step_files_of_one_name_in_two_folders_both_load(tmp_path: Path) -> None:
    for sub, step in (("a", "left"), ("b", "right")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "same_name_step.py").write_text(
            f'config = {{"queue": "q", "flow": {{"name": "f", "step": "{step}"}}}}\ndef run(input, ctx):\n    return "{step}"\n'
        )
    found = [s for t in expand([str(tmp_path)]) for s in nuxt_queue_steps(load(t))]
    results = [(r.step, cast(Callable[[Any, Any], Any], r.handler)(None, None)) for r, _ in found]
    assert sorted(results) == [("left", "left"), ("right", "right")]


def test_subscribed_input_is_the_payload() -> None:
    class Ctx:
        flow_id, flow_name = "run-1", "f"

    got = subscribed_input({"a.done": {"x": 1}, "_resume": {"awaitType": "time"}}, "a.done", Ctx())
    assert got == {"name": "a.done", "x": 1, "_resume": {"awaitType": "time"}, "flowId": "run-1", "flowName": "f"}
    assert subscribed_input({"a.done": 3}, "a.done", Ctx()) == {"name": "a.done", "payload": 3, "flowId": "run-1", "flowName": "f"}
    assert subscribed_input({"other": 1}, "a.done", Ctx()) == {"other": 1}


ASK = """
config = {
    "queue": {"name": "py-v05"},
    "flow": {"name": "py-v05", "role": "entry", "step": "ask", "emits": ["asked"]},
}

def run(input, ctx):
    ctx.flow.emit("asked", {"amount": input["amount"]})
"""

DECIDE = """
config = {
    "queue": {"name": "py-v05"},
    "flow": {
        "name": "py-v05", "role": "step", "step": "decide", "subscribes": ["asked"],
        "awaitBefore": {"type": "webhook", "timeout": 60000},
    },
}

async def run(input, ctx):
    return {"amount": input["amount"], "approved": ctx.trigger["approved"]}
"""


def test_a_v05_step_file_waits_for_its_webhook(nqd: Nqd, tmp_path: Path) -> None:
    """A step file of Nuxt Queue v0.5's shape with awaitBefore a webhook:
    stored as a trigger await, run once the trigger fires, with the body as
    ctx.trigger."""
    (tmp_path / "ask.py").write_text(textwrap.dedent(ASK))
    (tmp_path / "decide.py").write_text(textwrap.dedent(DECIDE))
    env = dict(os.environ, NQD_URL=nqd.url, PYTHONPATH=str(SDK))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nqd_worker", str(tmp_path), "--store-flows", "--grace", "2000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        nqd.wait_until("the flow to be stored", lambda: nqd.call("GET", "/api/_flows/py-v05")[0] == 200)
        run = nqd.start_run("py-v05", {"amount": 12})

        def waiting() -> Any:
            items = nqd.ok("GET", "/api/_flows/waits?kind=trigger&flowName=py-v05")["items"]
            return [i for i in items if i["runId"] == run]

        (wait,) = nqd.wait_until("the webhook await", waiting)
        status, _ = nqd.call("POST", f"/api/_flows/triggers/{wait['triggerId']}", {"approved": True})
        assert status == 200
        assert nqd.wait_status(run) == "completed"
        assert nqd.run_state(run)["steps"]["decide"]["result"] == {"amount": 12, "approved": True}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
