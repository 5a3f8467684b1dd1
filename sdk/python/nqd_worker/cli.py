"""`python -m nqd_worker`: import step modules and run their handlers."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import inspect
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence
from urllib.parse import quote

from . import registered
from ._http import HTTPClient
from .errors import AuthError, NqdError
from .worker import Handler, Registration, Worker


def load(target: str) -> ModuleType:
    """Imports a module by dotted name, or a .py file by path (its folder
    goes on sys.path so that it can import its neighbours)."""
    p = Path(target)
    if target.endswith(".py") or p.is_file():
        p = p.resolve()
        if not p.is_file():
            raise SystemExit(f"nqd_worker: no such file: {target}")
        folder = str(p.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = p.stem
        taken = sys.modules.get(name)
        if taken is not None and getattr(taken, "__file__", None) != str(p):
            # Two step files of one name in different folders: both load.
            name = f"{p.stem}__{abs(hash(str(p))):x}"
        spec = importlib.util.spec_from_file_location(name, p)
        if spec is None or spec.loader is None:
            raise SystemExit(f"nqd_worker: cannot import {target}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(target)


def expand(targets: Sequence[str]) -> list[str]:
    """Each folder among targets stands for the .py files under it (nested
    folders too, files starting with _ left out), in name order."""
    out: list[str] = []
    for t in targets:
        p = Path(t)
        if p.is_dir():
            out.extend(str(f) for f in sorted(p.rglob("*.py")) if not f.name.startswith("_"))
        else:
            out.append(t)
    return out


def _names(v: Any) -> list[str]:
    items = v if isinstance(v, list) else [v]
    return [str(x) for x in items if isinstance(x, str) and x]


def nuxt_queue_steps(mod: ModuleType) -> list[tuple[Registration, dict[str, Any]]]:
    """The steps of a module in Nuxt Queue's Python shape: a top-level
    `config` dict and a `run(input, ctx)` function. The step is
    config.flow.step (a name or a list of them; else the file name), the
    queue config.queue (a name, or a dict with `name`; else the file name)."""
    cfg = getattr(mod, "config", None)
    fn = getattr(mod, "run", None)
    if not isinstance(cfg, dict) or not callable(fn):
        return []
    stem = Path(getattr(mod, "__file__", None) or mod.__name__).stem
    flow = cfg.get("flow")
    steps = _names(flow.get("step") if isinstance(flow, dict) else None) or [stem]
    subs = _names(flow.get("subscribes")) if isinstance(flow, dict) and flow.get("role") != "entry" else []
    handler: Handler = with_subscribed_input(fn, subs[0]) if len(subs) == 1 else fn
    return [(Registration(step, handler, queue_of(cfg, stem)), cfg) for step in steps]


def subscribed_input(input: Any, event: str, ctx: Any) -> Any:
    """Nuxt Queue handed a step subscribed to one event that event's payload
    itself, beside the event's name and the run ({name, **payload, flowId,
    flowName}), where nqd hands {"<event>": payload}. Nuxt Queue-shaped files
    get the shape they were written for; a payload that is not a dict stays
    whole under "payload", and "_resume" is kept."""
    if not isinstance(input, dict) or event not in input:
        return input
    rest = {k: v for k, v in input.items() if k != event}
    payload = input[event]
    fields = payload if isinstance(payload, dict) else {"payload": payload}
    return {"name": event, **fields, **rest, "flowId": ctx.flow_id, "flowName": ctx.flow_name}


def with_subscribed_input(fn: Callable[..., Any], event: str) -> Handler:
    """fn, given the Nuxt Queue form of a subscribed step's input; a
    coroutine function stays one, so it still runs on the event loop."""
    if inspect.iscoroutinefunction(fn):

        async def run_async(input: Any, ctx: Any) -> Any:
            return await fn(subscribed_input(input, event, ctx), ctx)

        return run_async

    def run_sync(input: Any, ctx: Any) -> Any:
        return fn(subscribed_input(input, event, ctx), ctx)

    return run_sync


def queue_of(cfg: dict[str, Any], stem: str) -> str:
    q = cfg.get("queue")
    name = q.get("name") if isinstance(q, dict) else q
    return str(name) if isinstance(name, str) and name else stem


def _retry_policy(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Nuxt Queue's queue.defaultJobOptions attempts and backoff (a delay in
    ms, or {type, delay, maxDelay}) as an nqd retryPolicy."""
    q = cfg.get("queue")
    opts = q.get("defaultJobOptions") if isinstance(q, dict) else None
    if not isinstance(opts, dict) or not isinstance(opts.get("attempts"), int) or opts["attempts"] <= 1:
        return None
    b = opts.get("backoff")
    backoff: dict[str, Any] = {"type": "fixed", "delayMs": 0}
    if isinstance(b, (int, float)):
        backoff["delayMs"] = int(b)
    elif isinstance(b, dict):
        backoff = {"type": "exponential" if b.get("type") == "exponential" else "fixed", "delayMs": int(b.get("delay", 0))}
        if isinstance(b.get("maxDelay"), (int, float)):
            backoff["maxDelayMs"] = int(b["maxDelay"])
    return {"attempts": opts["attempts"], "backoff": backoff}


def flow_definitions(steps: Sequence[tuple[Registration, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """nqd flow definitions built from Nuxt Queue configs, as the TypeScript
    SDK builds them: each step joins the flows config.flow.name names; the
    first step of a `role: "entry"` config is its flow's entry (an entry
    subscribes to nothing); emits, subscribes, the queue's attempts, backoff
    and timeout, and an await come along."""
    defs: dict[str, dict[str, Any]] = {}
    for reg, cfg in steps:
        flow = cfg.get("flow")
        if not isinstance(flow, dict):
            continue
        first = _names(flow.get("step"))[:1] == [reg.step]
        step: dict[str, Any] = {"queue": reg.queue}
        emits, subscribes = _names(flow.get("emits")), _names(flow.get("subscribes"))
        policy = _retry_policy(cfg)
        wait = flow.get("await", cfg.get("await"))
        q = cfg.get("queue")
        opts = q.get("defaultJobOptions") if isinstance(q, dict) else None
        timeout = opts.get("timeout") if isinstance(opts, dict) else None
        for name in _names(flow.get("name")):
            d = defs.setdefault(name, {"name": name, "entry": "", "steps": {}})
            if reg.step in d["steps"]:
                continue
            s = dict(step)
            if flow.get("role") == "entry" and first and not d["entry"]:
                d["entry"] = reg.step
            elif subscribes:
                s["subscribes"] = subscribes
            if emits:
                s["emits"] = emits
            if policy:
                s["retryPolicy"] = policy
            if isinstance(wait, dict):
                s["await"] = wait
            if isinstance(timeout, int) and timeout > 0:
                s["timeout"] = timeout
            d["steps"][reg.step] = s
    return defs


async def store_flows(url: str, token: str | None, defs: dict[str, dict[str, Any]]) -> None:
    http = HTTPClient(url, token)
    try:
        for name, d in defs.items():
            resp = await http.request("PUT", "/api/_flows/" + quote(name, safe=""), d)
            if resp.status in (401, 403):
                raise AuthError(resp.status, resp.error_message() + " (storing flows needs the admin scope)")
            if resp.status // 100 != 2:
                raise SystemExit(f"nqd_worker: flow {name!r} not stored: {resp.status} {resp.error_message()}")
            logging.getLogger("nqd_worker").info("stored flow %s", name)
    finally:
        await http.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nqd_worker",
        description="Import step modules (files, folders or dotted module names) and run their handlers against nqd.",
    )
    ap.add_argument("targets", nargs="+", help="a .py file, a folder of them, or a module name")
    ap.add_argument("--url", default=os.environ.get("NQD_URL", "http://127.0.0.1:8080"), help="nqd's address (NQD_URL)")
    ap.add_argument("--token", default=os.environ.get("NQD_TOKEN"), help="an API token of write scope (NQD_TOKEN)")
    ap.add_argument(
        "--queue", "-q", action="append", default=None, help="a queue to take jobs from (repeatable); default: the steps' queues"
    )
    ap.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=int(os.environ.get("NQD_CONCURRENCY", "4")),
        help="jobs held and run at once (NQD_CONCURRENCY; default 4)",
    )
    ap.add_argument("--grace", type=float, default=10.0, help="seconds running steps get to finish on stop")
    ap.add_argument(
        "--store-flows", action="store_true", help="store the flows the Nuxt Queue-shaped modules declare (admin token)"
    )
    ap.add_argument("--log-level", default=os.environ.get("NQD_LOG_LEVEL", "info"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    shaped: list[tuple[Registration, dict[str, Any]]] = []
    for t in expand(args.targets):
        mod = load(t)
        shaped.extend(nuxt_queue_steps(mod))
    regs = registered() + [r for r, _ in shaped]
    if not regs:
        print("nqd_worker: no step handlers found (use @nqd_worker.step or a config dict with run)", file=sys.stderr)
        return 2
    try:
        worker = Worker(args.url, args.token, args.queue, args.concurrency, grace=args.grace, handlers=regs)
    except ValueError as e:
        print(f"nqd_worker: {e}", file=sys.stderr)
        return 2
    try:
        if args.store_flows:
            asyncio.run(store_flows(args.url, args.token, flow_definitions(shaped)))
        logging.getLogger("nqd_worker").info(
            "running steps %s on queues %s against %s",
            ", ".join(sorted(worker.handlers)),
            ", ".join(worker.queues or sorted({r.queue for r in regs})),
            args.url,
        )
        worker.run_forever()
        logging.getLogger("nqd_worker").info(
            "stopped: %d steps completed, %d failed", worker.completed, worker.failed
        )
    except AuthError as e:
        print(f"nqd_worker: {e}", file=sys.stderr)
        return 3
    except NqdError as e:
        print(f"nqd_worker: claims refused: {e}", file=sys.stderr)
        return 2
    return 0
