"""`python -m nqd_worker`: import step modules and run their handlers."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence
from urllib.parse import quote

from . import registered
from ._http import HTTPClient
from .errors import AuthError
from .worker import Registration, Worker


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


def nuxt_queue_step(mod: ModuleType) -> tuple[Registration, dict[str, Any]] | None:
    """A module in Nuxt Queue's Python shape: a top-level `config` dict and a
    `run(input, ctx)` function. The step is config.flow.step (else the file
    name), its queue config.queue (else the file name)."""
    cfg = getattr(mod, "config", None)
    fn = getattr(mod, "run", None)
    if not isinstance(cfg, dict) or not callable(fn):
        return None
    stem = Path(getattr(mod, "__file__", None) or mod.__name__).stem
    flow = cfg.get("flow")
    step = str((flow.get("step") if isinstance(flow, dict) else None) or stem)
    q = cfg.get("queue")
    queue = str(q.get("name") if isinstance(q, dict) else q or stem)
    return Registration(step, fn, queue), cfg


def flow_definitions(steps: Sequence[tuple[Registration, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """nqd flow definitions built from Nuxt Queue configs: each step joins
    the flows config.flow.name names, `role: "entry"` makes it the entry,
    and its emits and subscribes come along."""
    defs: dict[str, dict[str, Any]] = {}
    for reg, cfg in steps:
        flow = cfg.get("flow")
        if not isinstance(flow, dict) or not flow.get("name"):
            continue
        names = flow["name"] if isinstance(flow["name"], list) else [flow["name"]]
        step: dict[str, Any] = {"queue": reg.queue}
        for key in ("emits", "subscribes"):
            v = flow.get(key)
            if v:
                step[key] = [v] if isinstance(v, str) else list(v)
        attempts = cfg.get("attempts") or (cfg.get("worker") or {}).get("attempts")
        if attempts:
            policy: dict[str, Any] = {"attempts": int(attempts)}
            backoff = cfg.get("backoff")
            if isinstance(backoff, dict):
                policy["backoff"] = {"type": backoff.get("type", "fixed"), "delayMs": int(backoff.get("delay", 0))}
            step["retryPolicy"] = policy
        for name in names:
            d = defs.setdefault(str(name), {"name": str(name), "steps": {}})
            d["steps"][reg.step] = step
            if flow.get("role") == "entry":
                d["entry"] = reg.step
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
    ap.add_argument("--concurrency", "-c", type=int, default=int(os.environ.get("NQD_CONCURRENCY", "4")))
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
        found = nuxt_queue_step(mod)
        if found is not None:
            shaped.append(found)
    regs = registered() + [r for r, _ in shaped]
    if not regs:
        print("nqd_worker: no step handlers found (use @nqd_worker.step or a config dict with run)", file=sys.stderr)
        return 2
    worker = Worker(args.url, args.token, args.queue, args.concurrency, grace=args.grace, handlers=regs)
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
    except AuthError as e:
        print(f"nqd_worker: {e}", file=sys.stderr)
        return 3
    return 0
