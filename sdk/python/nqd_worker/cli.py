"""`nqd-worker-py <dir>`: load a folder of step files and run their handlers."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import inspect
import logging
import os
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, NamedTuple, Sequence
from urllib.parse import quote

from . import registered
from ._http import HTTPClient
from .errors import AuthError, NqdError
from .worker import Handler, Registration, Worker

log = logging.getLogger("nqd_worker")


def load(target: str) -> ModuleType:
    """Imports a module by dotted name, or a .py file by path (its folder
    goes on sys.path so that it can import its neighbours)."""
    p = Path(target)
    if target.endswith(".py") or p.is_file():
        p = p.resolve()
        if not p.is_file():
            raise SystemExit(f"nqd-worker-py: no such file: {target}")
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
            raise SystemExit(f"nqd-worker-py: cannot import {target}")
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


def nuxt_queue_steps(mod: ModuleType, id: str | None = None) -> list[tuple[Registration, dict[str, Any]]]:
    """The steps of a module in Nuxt Queue's Python shape: a top-level
    `config` dict and a `run(input, ctx)` function, one registration per
    flow the config names and step (config.flow.step, a name or a list of
    them; else the file name), on the queue config.queue names (a name, or a
    dict with `name`; else the file name). id is the file's path in its
    folder without the extension, which defaults to the file's name."""
    cfg = getattr(mod, "config", None)
    fn = getattr(mod, "run", None)
    if not isinstance(cfg, dict) or not callable(fn):
        return []
    stem = Path(getattr(mod, "__file__", None) or mod.__name__).stem
    id = id or stem
    flow = cfg.get("flow")
    steps = _names(flow.get("step") if isinstance(flow, dict) else None) or [stem]
    subs = _names(flow.get("subscribes")) if isinstance(flow, dict) and flow.get("role") != "entry" else []
    handler: Handler = with_subscribed_input(fn, subs[0]) if len(subs) == 1 else fn
    flows: list[str | None] = list(_names(flow.get("name"))) if isinstance(flow, dict) else []
    return [(Registration(step, handler, queue_of(cfg, id), name), cfg) for name in flows or [None] for step in steps]


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


def queue_of(cfg: dict[str, Any], id: str) -> str:
    """config.queue.name (or config.queue, a name), else the last part of
    the file's id, as in Nuxt Queue."""
    q = cfg.get("queue")
    name = q.get("name") if isinstance(q, dict) else q
    return str(name) if isinstance(name, str) and name else id.split("/")[-1]


def _job_options(cfg: dict[str, Any]) -> dict[str, Any]:
    q = cfg.get("queue")
    opts = q.get("defaultJobOptions") if isinstance(q, dict) else None
    return opts if isinstance(opts, dict) else {}


def _retry_policy(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Nuxt Queue's queue.defaultJobOptions attempts and backoff (a delay in
    ms, or {type, delay, maxDelay}) as an nqd retryPolicy."""
    opts = _job_options(cfg)
    attempts = opts.get("attempts")
    if not isinstance(attempts, int) or attempts <= 1:
        return None
    b = opts.get("backoff")
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        return {"attempts": attempts, "backoff": {"type": "fixed", "delayMs": b}}
    if not isinstance(b, dict):
        return {"attempts": attempts, "backoff": {"type": "fixed", "delayMs": 0}}
    backoff: dict[str, Any] = {"type": "exponential" if b.get("type") == "exponential" else "fixed"}
    if "delay" in b:
        backoff["delayMs"] = b["delay"]
    if "maxDelay" in b:
        backoff["maxDelayMs"] = b["maxDelay"]
    return {"attempts": attempts, "backoff": backoff}


class BuiltFlows(NamedTuple):
    """What build_flows makes of the step files' configs."""

    # One nqd definition per flow name, in the order the files name them.
    flows: list[dict[str, Any]]
    # The triggers v0.5 entry steps define or subscribe to, sorted by name:
    # {name, definition?, subscriptions: [{flow, mode}]}.
    triggers: list[dict[str, Any]]
    # What nqd cannot take, or what leaves a flow unusable.
    warnings: list[str]


def _positive(v: Any) -> bool:
    """Whether v is a number above 0 (a bool is not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _nqd_await(where: str, a: Any, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """A v0.5 await as nqd's: a webhook is a trigger await (its body reaches
    the step as ctx.trigger), an event an event await, a time a time await.
    A schedule (the next time of a cron expression) has no nqd await and is
    dropped with a warning; so are the parts nqd does not take."""
    if not isinstance(a, dict):
        warn(f"{where}: not an await; dropped")
        return None
    kind = a.get("type")
    out: dict[str, Any]
    if kind == "time":
        out = {"type": "time", "delay": a.get("delay") if a.get("delay") is not None else 0}
    elif kind == "webhook":
        out = {"type": "trigger", "triggerType": "webhook"}
    elif kind == "event":
        event = a.get("event")
        if not isinstance(event, str) or not event:
            warn(f"{where}: an event await needs its event; dropped")
            return None
        out = {"type": "event", "eventKind": event}
        if a.get("filterKey") is not None:
            warn(f"{where}: the event await's filterKey is not taken; the first {event} event resumes the step")
    else:
        warn(f"{where}: a {kind} await has no nqd equivalent; dropped")
        return None
    timeout = a.get("timeout")
    if kind != "time" and _positive(timeout):
        out["timeout"] = timeout
    action = a.get("timeoutAction")
    if action is not None and action != "fail":
        warn(f"{where}: timeoutAction {action} is not taken; a timeout fails the step")
    return out


def _add_triggers(into: dict[str, dict[str, Any]], flow: str, t: Any) -> None:
    if not isinstance(t, dict):
        return

    def get(name: str) -> dict[str, Any]:
        return into.setdefault(name, {"name": name, "subscriptions": []})

    define = t.get("define")
    if isinstance(define, dict) and isinstance(define.get("name"), str) and define["name"]:
        get(define["name"])["definition"] = define
    for name in _names(t.get("subscribe")):
        get(name)["subscriptions"].append({"flow": flow, "mode": t.get("mode") if t.get("mode") is not None else "auto"})


def build_flows(sources: Sequence[tuple[str, Any]]) -> BuiltFlows:
    """nqd flow definitions built from Nuxt Queue configs of both
    generations (October 2025's defineQueueConfig, v0.5's
    defineFunctionConfig), one per flow name the sources (each a file's id
    and its config) mention, exactly as the TypeScript SDK builds them: the
    cases in sdk/testdata/nuxt-configs hold the two equal. Each step joins
    the flows config.flow.name names; the first step of a `role: "entry"`
    config is its flow's entry (an entry subscribes to nothing); emits,
    subscribes, the queue's attempts, backoff and timeout, an await and the
    flow's stateSchema come along, and of v0.5 awaitBefore (as the step's
    await), awaitAfter (as an await of the steps its emits make due),
    stepTimeout and the triggers of entry steps."""
    defs: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    warn = warnings.append
    triggers: dict[str, dict[str, Any]] = {}
    # Steps whose v0.5 awaitAfter holds back the steps their emits make due.
    after: list[tuple[str, str, str, dict[str, Any]]] = []
    for id, cfg in sources:
        f = cfg.get("flow") if isinstance(cfg, dict) else None
        if not isinstance(f, dict):
            continue
        names, steps = _names(f.get("name")), _names(f.get("step"))
        if not names or not steps:
            warn(f"{id}: config.flow needs a name and a step; skipped")
            continue
        queue = queue_of(cfg, id)
        policy = _retry_policy(cfg)
        wait = f.get("await") if f.get("await") is not None else cfg.get("await")
        if f.get("awaitBefore") is not None:
            before = _nqd_await(f"{id}: awaitBefore", f["awaitBefore"], warn)
            if wait is not None and before is not None:
                warn(f"{id}: both await and awaitBefore; await is taken")
            if wait is None:
                wait = before
        wait_after = None if f.get("awaitAfter") is None else _nqd_await(f"{id}: awaitAfter", f["awaitAfter"], warn)
        timeout = f.get("stepTimeout") if f.get("stepTimeout") is not None else _job_options(cfg).get("timeout")
        subscribes = _names(f.get("subscribes"))
        emits = f.get("emits")
        for flow_name in names:
            d = defs.setdefault(flow_name, {"name": flow_name, "entry": "", "steps": {}})
            for i, step in enumerate(steps):
                if step in d["steps"]:
                    warn(f"{id}: flow {flow_name} already has a step {step}; this one is ignored")
                    continue
                s: dict[str, Any] = {"queue": queue, "workerId": id}
                if f.get("role") == "entry" and i == 0:
                    if d["entry"]:
                        warn(f"{id}: flow {flow_name} already has the entry {d['entry']}; {step} is a plain step")
                    else:
                        d["entry"] = step
                        if subscribes:
                            warn(
                                f"{id}: the entry step {step} runs when its flow starts; "
                                f"its subscribes ({', '.join(subscribes)}) are dropped"
                            )
                if d["entry"] != step and subscribes:
                    s["subscribes"] = list(subscribes)
                if isinstance(emits, list) and emits:
                    s["emits"] = list(emits)
                if policy is not None:
                    s["retryPolicy"] = policy
                if wait is not None:
                    s["await"] = wait
                if _positive(timeout):
                    s["timeout"] = timeout
                d["steps"][step] = s
                if wait_after is not None:
                    after.append((flow_name, step, id, wait_after))
                if f.get("triggers") is not None and d["entry"] == step:
                    _add_triggers(triggers, flow_name, f["triggers"])
                elif f.get("triggers") is not None:
                    warn(f"{id}: triggers start a flow; only its entry step may name them")
            if f.get("stateSchema") is not None:
                d["stateSchema"] = f["stateSchema"]
    # nqd awaits before a step: an awaitAfter holds back each step that
    # subscribes to what the awaiting step emits.
    for flow_name, step, id, wait in after:
        d = defs[flow_name]
        emitted = d["steps"][step].get("emits") or []
        held = [(name, s) for name, s in d["steps"].items() if any(e in emitted for e in s.get("subscribes") or [])]
        if not held:
            warn(f"{id}: awaitAfter holds back no step (none subscribes to what {step} emits); dropped")
        for name, s in held:
            if "await" in s:
                warn(f"{id}: {name} has an await of its own; {step}'s awaitAfter is not added to it")
                continue
            s["await"] = dict(wait)
    for d in defs.values():
        if not d["entry"]:
            warn(f"flow {d['name']} has no step with role 'entry'; nqd cannot start it")
    return BuiltFlows(list(defs.values()), [triggers[k] for k in sorted(triggers)], warnings)


async def store_flows(url: str, token: str | None, defs: Sequence[dict[str, Any]]) -> None:
    """Stores each definition in nqd (PUT /api/_flows/<name>, the admin
    scope); a definition nqd refuses is logged with its reasons."""
    http = HTTPClient(url, token)
    try:
        for d in defs:
            name = d["name"]
            resp = await http.request("PUT", "/api/_flows/" + quote(name, safe=""), d)
            if resp.status in (401, 403):
                raise AuthError(resp.status, resp.error_message() + " (storing flows needs the admin scope)")
            if resp.status // 100 != 2:
                log.error("flow %s not stored: %s %s", name, resp.status, resp.error_message())
                continue
            log.info("stored flow %s: %s", name, ", ".join(d["steps"]))
    finally:
        await http.close()


USAGE = """usage: nqd-worker-py <dir> [--url <nqd>] [--token <token>] [--concurrency <n>] [--grace <ms>] [--store-flows]
                     [--transport channel|http]

Loads the step files under <dir> (Nuxt Queue's Python shape, a config dict and
a run function, or handlers registered with @nqd_worker.step; nested folders
too; names starting with _ are left out) and runs their handlers until SIGINT
or SIGTERM. <dir> may also be one .py file or a dotted module name.

  --url          nqd's address (default $NQD_URL, else http://127.0.0.1:8080)
  --token        an API token of scope write, or admin with --store-flows
                 (default $NQD_TOKEN)
  --concurrency  jobs run at once per queue (default $NQD_CONCURRENCY, else 4;
                 a file's config.worker.concurrency may raise it); one worker
                 serves every queue, each with its own concurrency
  --grace        milliseconds running steps get to finish on a signal (default 10000)
  --store-flows  store the flows the files' configs describe in nqd first
                 (needs a token of scope admin)
  --transport    channel (one WebSocket for the process's queues, falling back to
                 HTTP when nqd cannot upgrade or predates per-queue concurrency)
                 or http (default $NQD_TRANSPORT, else channel)"""


# The most queues one worker channel serves, and the most jobs it holds (its
# hello's limits).
_MAX_QUEUES = 32
_MAX_CONCURRENCY = 1000


def split_queues(caps: dict[str, int]) -> list[dict[str, int]]:
    """The queues and their concurrency in as few parts as there must be
    for one worker, and so one channel, to serve each: at most 32 queues
    with at most 1000 jobs together (a queue asking for more than that gets
    the part it is in to itself)."""
    parts: list[dict[str, int]] = []
    total = 0
    for q, n in caps.items():
        if not parts or len(parts[-1]) == _MAX_QUEUES or total + n > _MAX_CONCURRENCY:
            parts.append({})
            total = 0
        parts[-1][q] = n
        total += n
    return parts


class _Parser(argparse.ArgumentParser):
    def format_help(self) -> str:
        return USAGE + "\n"

    def format_usage(self) -> str:
        return USAGE.splitlines()[0] + "\n"

    def error(self, message: str) -> Any:
        self.exit(2, f"nqd-worker-py: {message}\n\n{USAGE}\n")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = _Parser(prog="nqd-worker-py")
    ap.add_argument("dir")
    ap.add_argument("--url", default=os.environ.get("NQD_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", default=os.environ.get("NQD_TOKEN"))
    ap.add_argument("--concurrency", default=os.environ.get("NQD_CONCURRENCY", "4"))
    ap.add_argument("--grace", default="10000")
    ap.add_argument("--store-flows", action="store_true")
    ap.add_argument("--transport", default=os.environ.get("NQD_TRANSPORT", "channel"), choices=("channel", "http"))
    args = ap.parse_args(argv)
    try:
        args.concurrency = int(args.concurrency)
        args.grace = float(args.grace)
    except ValueError:
        args.concurrency = 0
    if args.concurrency < 1 or not args.grace >= 0:
        ap.exit(2, "nqd-worker-py: --concurrency must be a whole number of at least 1, --grace a number of milliseconds\n")
    return args


def _file_id(target: str, root: Path) -> str:
    """A step file's id: its path under root without the extension."""
    p = Path(target)
    try:
        rel = p.resolve().relative_to(root.resolve()) if root.is_dir() else Path(p.name)
    except ValueError:
        rel = Path(p.name)
    return rel.with_suffix("").as_posix()


async def _serve(workers: list[Worker], grace: float) -> None:
    """Runs the workers until SIGINT or SIGTERM (a second signal stops
    them without waiting for running steps); should one stop for nqd's
    refusal, the others stop too and the refusal is raised."""
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: running steps get %gs to finish (signal again to quit now)", grace)
        else:
            log.info("stopping now: running steps are failed as retriable")
        for w in workers:
            w.stop(now=signals > 1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError):
            pass
    tasks = [asyncio.create_task(w.run()) for w in workers]
    first_error: BaseException | None = None
    for fut in asyncio.as_completed(tasks):
        try:
            await fut
        except (AuthError, NqdError) as e:
            if first_error is None:
                first_error = e
                for w in workers:
                    w.stop()
    if first_error is not None:
        raise first_error


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level=os.environ.get("NQD_LOG_LEVEL", "info").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    root = Path(args.dir)
    shaped: list[tuple[Registration, dict[str, Any]]] = []
    sources: list[tuple[str, Any]] = []
    for t in expand([args.dir]):
        mod = load(t)
        steps = nuxt_queue_steps(mod, _file_id(t, root))
        shaped.extend(steps)
        if steps:
            sources.append((_file_id(t, root), steps[0][1]))
    regs = registered() + [r for r, _ in shaped]
    if not regs:
        print(f"nqd-worker-py: no step handlers under {args.dir} (use @nqd_worker.step or a config dict with run)", file=sys.stderr)
        return 1
    # Each queue's steps get --concurrency slots, or what a file's
    # config.worker.concurrency asks for when that is more.
    by_queue: dict[str, list[Registration]] = {}
    for r in regs:
        by_queue.setdefault(r.queue, []).append(r)
    wanted: dict[str, int] = {}
    for r, cfg in shaped:
        w = cfg.get("worker")
        n = w.get("concurrency") if isinstance(w, dict) else None
        if isinstance(n, int) and not isinstance(n, bool):
            wanted[r.queue] = max(wanted.get(r.queue, 0), n)
    grace = args.grace / 1000
    try:
        workers = [
            Worker(
                args.url,
                args.token,
                queue_concurrency=caps,
                grace=grace,
                handlers=[r for q in caps for r in by_queue[q]],
                transport=args.transport,
                name="nqd-worker-py",
            )
            for caps in split_queues({q: max(args.concurrency, wanted.get(q, 0)) for q in sorted(by_queue)})
        ]
    except ValueError as e:
        print(f"nqd-worker-py: {e}", file=sys.stderr)
        return 2
    try:
        built = build_flows(sources)
        for warning in built.warnings:
            log.warning("%s", warning)
        if args.store_flows:
            asyncio.run(store_flows(args.url, args.token, built.flows))
        if built.triggers:
            # nqd's trigger registry is not fed from step files: the
            # triggers are named so that whoever starts the flows knows
            # what the files expected.
            log.warning(
                "triggers in the step files are not registered in nqd: %s; start their flows with POST /api/_flows/<name>/start",
                ", ".join(t["name"] for t in built.triggers),
            )
        log.info(
            "running steps %s on queues %s against %s",
            ", ".join(sorted({r.key for r in regs})),
            ", ".join(sorted(by_queue)),
            args.url,
        )
        asyncio.run(_serve(workers, grace))
        log.info(
            "stopped: %d steps completed, %d failed", sum(w.completed for w in workers), sum(w.failed for w in workers)
        )
    except AuthError as e:
        print(f"nqd-worker-py: {e}", file=sys.stderr)
        return 3
    except NqdError as e:
        print(f"nqd-worker-py: claims refused: {e}", file=sys.stderr)
        return 2
    return 0
