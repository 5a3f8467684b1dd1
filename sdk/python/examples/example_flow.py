"""Python handlers for the steps of examples/flows/example-flow.yaml.

    NQ_FLOWS_DIR=examples/flows make run          # nqd with the example flows
    PYTHONPATH=sdk/python python3 -m nqd_worker sdk/python/examples/example_flow.py

Start a run (POST /api/_flows/example-flow/start): fetch_data fails its first
attempt and is retried, process_data runs, and await_approval waits until its
trigger is fired (the trigger id is in GET /api/_flows/waits).
"""

from __future__ import annotations

from typing import Any

from nqd_worker import Context, SyncContext, step


@step("fetch_data", queue="default")
async def fetch_data(input: Any, ctx: Context) -> Any:
    if ctx.attempt == 1:
        raise TimeoutError("network timeout")  # retried per the step's retryPolicy
    ctx.logger.info("fetched", {"url": (input or {}).get("url")})
    data = {"records": 42}
    await ctx.flow.emit("fetch_data.completed", data)
    return data


@step("process_data", queue="default")
def process_data(input: Any, ctx: SyncContext) -> Any:
    out = {"processed": input["fetch_data.completed"]["records"]}
    ctx.state.set("processed", out["processed"])
    ctx.flow.emit("process_data.completed", out)
    return out


@step("await_approval", queue="default")
async def await_approval(input: Any, ctx: Context) -> Any:
    decision = (ctx.resume or {}).get("payload") or {}
    approved = decision.get("approved", True)
    ctx.logger.info(f"approval decided: approved={approved} by {decision.get('by', '')!r}")
    return {"approved": approved, "by": decision.get("by", "")}
