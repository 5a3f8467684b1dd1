"""The worker: claims jobs from nqd's queues, runs each job's step handler,
keeps the job's lease alive and reports the outcome (docs/worker-protocol.md
describes the protocol it speaks)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import random
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable, Mapping, Union, cast
from urllib.parse import quote

from ._channel import Channel, Redirected, Refused, open_channel
from ._http import HTTPClient, Response, TransportError
from ._self import self_headers
from .context import Context, SyncContext
from .errors import AuthError, EncodeError, LeaseLost, NqdError, PermanentError

AsyncHandler = Callable[[Any, Context], Awaitable[Any]]
SyncHandler = Callable[[Any, SyncContext], Any]
Handler = Union[AsyncHandler, SyncHandler]

log = logging.getLogger("nqd_worker")

# How a worker speaks to nqd: the worker channel (falling back to HTTP when
# nqd or a proxy cannot upgrade), or HTTP only.
TRANSPORTS = ("channel", "http")

# nqd's claim answers within 30 s at most; a batch of reports holds at most
# 1000 events.
_MAX_CLAIM_WAIT = 30.0
_MAX_CLAIM = 100
_MAX_BATCH = 100
# nqd takes request bodies up to 1 MiB by default: a batch stops growing at
# half that, so that one large event does not sink the events around it.
_MAX_BATCH_BYTES = 512 << 10
_MAX_ERROR = 4096
# Reports are retried while the lease lasts; without word from nqd a lease
# is assumed to last this long.
_DEFAULT_LEASE = 30.0
# Heartbeats go every third of what is left of the lease, so that two may
# fail before it ends, and at least every _MAX_BEAT seconds.
_MAX_BEAT = 10.0
_MIN_BEAT = 0.1
# Every call but the claim (which long-polls for claim_wait more) has this
# long to be answered.
_CALL_TIMEOUT = 10.0
# The part of the grace period kept for reporting the steps still running
# once it is over: a fifth of it, at most this long.
_MAX_STOP_REPORT = 2.0
# How long a step may run before its step.started is sent on its own.
_STARTED_DELAY = 0.1
# How long a completion's claim waits for the slot's next job when none is
# ready: long enough that a run started right after this one completed (by a
# caller that waits for each run before it starts the next) is handed to the
# slot in its start's own write, short enough that an idle slot is free again
# at once (docs/worker-protocol.md, Complete).
_NEXT_JOB_WAIT = 0.05
# The most jobs a queue's concurrency may give (nqd's limit on a hello's).
_MAX_QUEUE_CONCURRENCY = 1000


@dataclass
class Registration:
    """A step handler and the queue its step runs on; with flow, the
    handler of that flow's step only, otherwise of a step of that name in
    any flow (a flow's own handler wins)."""

    step: str
    handler: Handler
    queue: str
    flow: str | None = None

    @property
    def key(self) -> str:
        return f"{self.flow}/{self.step}" if self.flow else self.step


class Backoff:
    """Exponential backoff with jitter: each delay is drawn from the upper
    half of base * 2**n, capped at cap."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.n = base, cap, 0

    def next(self) -> float:
        d = min(self.cap, self.base * (2**self.n))
        self.n = min(self.n + 1, 30)
        return random.uniform(d / 2, d)

    def reset(self) -> None:
        self.n = 0


class _Reporter:
    """Sends a job's progress events in order, in batches: events added while
    a batch is on its way go out together in the next one."""

    def __init__(self, job: _Job) -> None:
        self._job = job
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, ev: dict[str, Any], *, quiet: bool = False) -> asyncio.Future[None]:
        fut = _future(quiet)
        batch = [(ev, fut)]
        if not self._job.started_sent:
            # step.started goes first, with the attempt's first report, and
            # the emits that waited with it right after.
            self._job.started_sent = True
            queued = [(q, _future(True)) for q in self._job.queued]
            self._job.queued = []
            if ev.get("kind") == "step.started":
                batch += queued
            else:
                batch = [({"kind": "step.started"}, _future(True)), *queued, *batch]
        self._pending.extend(batch)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return fut

    def emit(self, ev: dict[str, Any]) -> asyncio.Future[None]:
        """Queues ev, an emit, to go with step.started while that waits for
        the step's first report (the emit's future is then done at once),
        and sends it like add otherwise."""
        if self._job.started_sent:
            return self.add(ev)
        self._job.queued.append(ev)
        fut = _future(False)
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        while self._pending:
            n, size = 0, 0
            while n < len(self._pending) and n < _MAX_BATCH:
                # Events are encoded where the step made them (see
                # context.encoded), so this cannot fail.
                size += len(json.dumps(self._pending[n][0], separators=(",", ":")))
                if n > 0 and size > _MAX_BATCH_BYTES:
                    break
                n += 1
            batch, self._pending = self._pending[:n], self._pending[n:]
            body = {"lease": self._job.lease, "events": [ev for ev, _ in batch]}
            try:
                await self._job.report("events", body, key=uuid.uuid4().hex)
            except asyncio.CancelledError:
                for _, fut in batch + self._pending:
                    fut.cancel()
                self._pending = []
                raise
            except Exception as e:  # noqa: BLE001 - handed to whoever awaits the report
                if isinstance(e, NqdError) and any(ev.get("kind") == "step.started" for ev, _ in batch):
                    # nqd refused the call for an event beside step.started
                    # and stored none of it: step.started goes with the
                    # next report or the outcome.
                    self._job.started_sent = False
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
            else:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)


def _future(quiet: bool) -> asyncio.Future[None]:
    """A report's future; a quiet one, which nobody awaits, logs its failure."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if quiet:
        fut.add_done_callback(_log_failure)
    return fut


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("event not stored: %s", fut.exception())


class _Job:
    """A claimed job and what the worker knows of its lease."""

    def __init__(self, worker: Worker, raw: dict[str, Any]) -> None:
        self.worker = worker
        self.id: str = raw["id"]
        self.queue: str = raw["queue"]
        self.flow_name: str = raw.get("flowName", "")
        self.run_id: str = raw.get("runId", "")
        self.step: str = raw.get("step", "")
        self.input: Any = raw.get("input")
        self.attempt: int = int(raw.get("attempt", 1))
        self.lease: str = raw["lease"]
        self.deadline = _deadline(raw.get("leaseUntil"))
        self.path = "/api/_workers/jobs/" + quote(self.queue, safe="") + "/" + quote(self.id, safe=":")
        # gone: nqd said the run ended, or the lease went elsewhere.
        self.gone = False
        self.reporter = _Reporter(self)
        self.handler_task: asyncio.Future[Any] | None = None
        # Whether step.started was handed to the reporter or to the outcome.
        self.started_sent = False
        # Emits made while step.started waited: they go with it.
        self.queued: list[dict[str, Any]] = []
        self.stopped = False  # the worker stopped it after the grace period
        # The worker channel whose count of free slots the job's slot is
        # in, and whether an outcome sent over it freed the slot there.
        self.slot_channel: Channel | None = None
        self.slot_freed = False
        # The channel whose ack of the outcome freed the slot: a job that
        # ack brings (nextInAck) takes the slot there.
        self.next_channel: Channel | None = None
        # The first value of the step that could not be encoded: the step
        # fails with it, whether or not the handler let it through.
        self.encode_error: EncodeError | None = None

    def _mark_gone(self) -> None:
        self.gone = True
        if self.handler_task is not None and not self.handler_task.done():
            self.handler_task.cancel()

    async def report(self, action: str, body: dict[str, Any], key: str | None = None) -> Any:
        """Posts a report, retried with backoff while the lease lasts.

        Raises LeaseLost once the lease ended or went elsewhere (409),
        NqdError for an answer that retrying cannot change, AuthError for
        401 and 403.
        """
        if self.gone:
            raise LeaseLost(f"job {self.id}: the run ended or the lease went to another worker")
        backoff = Backoff(self.worker.retry_base, self.worker.retry_cap)
        while True:
            if self.gone:
                raise LeaseLost(f"job {self.id}: the run ended or the lease went to another worker")
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise LeaseLost(f"job {self.id}: the lease ran out before nqd took the {action} report")
            wait = None
            try:
                resp = await self.worker._job_call(self, action, body, key=key, timeout=min(_CALL_TIMEOUT, max(left, 1.0)))
            except TransportError as e:
                why = str(e)
            else:
                if 200 <= resp.status < 300:
                    return resp.json()
                if resp.status == 409:
                    self._mark_gone()
                    raise LeaseLost(f"job {self.id}: {resp.error_message()}")
                if resp.status in (401, 403):
                    raise AuthError(resp.status, resp.error_message())
                if resp.status not in (408, 429) and resp.status < 500:
                    raise NqdError(resp.status, resp.error_message(), resp.error_fields())
                why = f"nqd answered {resp.status}: {resp.error_message()}"
                wait = _retry_after(resp)
            delay = wait if wait is not None else backoff.next()
            self.worker.report_retries += 1
            log.debug("job %s: %s report not taken (%s); retrying in %.2fs", self.id, action, why, delay)
            await asyncio.sleep(min(delay, max(self.deadline - time.monotonic(), 0.0)))

    def beat_in(self) -> float:
        """Seconds until the next heartbeat: a third of what is left of the
        lease nqd granted, so that two beats may fail before it ends."""
        return min(max((self.deadline - time.monotonic()) / 3, _MIN_BEAT), _MAX_BEAT)

    async def heartbeat(self) -> None:
        """Extends the lease until cancelled; stops the handler when nqd
        says the run ended or the lease is lost."""
        backoff = Backoff(0.2, 2.0)
        delay = self.beat_in()
        while True:
            await asyncio.sleep(delay)
            try:
                resp = await self.worker._job_call(self, "heartbeat", {"lease": self.lease}, timeout=_CALL_TIMEOUT)
            except TransportError as e:
                delay = min(backoff.next(), self.beat_in())
                log.debug("job %s: heartbeat failed (%s)", self.id, e)
                continue
            if resp.status == 200:
                beat = resp.json() or {}
                if beat.get("canceled"):
                    log.info("job %s: the run ended; stopping the step", self.id)
                    self._mark_gone()
                    return
                self.deadline = _deadline(beat.get("leaseUntil"))
                backoff.reset()
                delay = self.beat_in()
            elif resp.status == 409:
                log.warning("job %s: lease lost; stopping the step", self.id)
                self._mark_gone()
                return
            else:
                delay = min(backoff.next(), self.beat_in())
                log.debug("job %s: heartbeat answered %d", self.id, resp.status)


def _deadline(lease_until: Any) -> float:
    """The monotonic time a lease ends, from nqd's leaseUntil (epoch ms or
    RFC 3339), bounded to a sane window around the default lease."""
    now = time.time()
    end: float | None = None
    if isinstance(lease_until, (int, float)) and lease_until > 0:
        end = lease_until / 1000.0
    elif isinstance(lease_until, str) and lease_until:
        end = _rfc3339(lease_until)
    left = _DEFAULT_LEASE if end is None else min(max(end - now, 1.0), 10 * _DEFAULT_LEASE)
    return time.monotonic() + left


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def _rfc3339(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time such as nqd writes (any number of
    fraction digits, which datetime.fromisoformat takes only from 3.11)."""
    m = _RFC3339.match(text.strip())
    if m is None:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{tz}").timestamp()
    except ValueError:
        return None


def _retry_after(resp: Response) -> float | None:
    try:
        return max(0.0, float(resp.headers.get("retry-after", "")))
    except ValueError:
        return None


def _check_queue_concurrency(queues: list[str], caps: Mapping[str, int] | None) -> dict[str, int] | None:
    """queue_concurrency checked against queues: every queue gets a whole
    number of jobs from 1 to 1000, and no other queue is named."""
    if caps is None:
        return None
    out: dict[str, int] = {}
    for q in queues:
        n = caps.get(q)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= _MAX_QUEUE_CONCURRENCY:
            raise ValueError(f"queue_concurrency must give queue {q!r} a whole number of jobs from 1 to {_MAX_QUEUE_CONCURRENCY}")
        out[q] = n
    for q in caps:
        if q not in out:
            raise ValueError(f"queue_concurrency names {q!r}, which is not one of queues")
    return out


def _takes_no_queue_concurrency(err: NqdError) -> bool:
    """Whether err is an nqd that predates queueConcurrency refusing the
    channel's hello for it."""
    return err.status == 400 and err.fields.get("queueConcurrency") == "unknown field"


class Worker:
    """Claims jobs of queues from nqd and runs their steps' handlers.

    Register handlers with @worker.step("name"), then `await worker.run()`
    (or `worker.run_forever()`); `worker.stop()` stops it gracefully.

    concurrency is how many jobs it holds at once (4 by default). With
    queue_concurrency ({queue: jobs}, adding up to at most concurrency,
    which it defaults to) each queue holds at most its own number of them,
    on one channel: queues default to its keys.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        *,
        queue_concurrency: Mapping[str, int] | None = None,
        grace: float = 10.0,
        claim_wait: float = 10.0,
        retry_base: float = 0.1,
        retry_cap: float = 5.0,
        handlers: Iterable[Registration] | None = None,
        transport: str = "channel",
        name: str | None = None,
    ) -> None:
        caps = _check_queue_concurrency(list(queues) if queues else list(queue_concurrency or ()), queue_concurrency)
        if concurrency is None:
            concurrency = sum(caps.values()) if caps else 4
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if caps and concurrency < sum(caps.values()):
            raise ValueError(f"concurrency {concurrency} is less than queue_concurrency's sum {sum(caps.values())}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be 'channel' or 'http', got {transport!r}")
        HTTPClient(url)  # refuses an address that is not http(s)://host[:port] now, not at run()
        self.url = url
        self.token = token or None
        # With queue_concurrency the queues are its keys unless named.
        self.queues = list(queues) if queues else list(caps or ())
        self.concurrency = concurrency
        # The jobs of each queue held at once, when the queues differ
        # (None: the queues share concurrency).
        self.queue_concurrency = caps
        self._self = self_headers(concurrency)
        self.grace = grace
        self.claim_wait = min(claim_wait, _MAX_CLAIM_WAIT)
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        # 'channel' until nqd or a proxy could not upgrade, then 'http'.
        self.transport = transport
        self.name = name
        # The channel while it is open and welcomed: job calls go over it.
        self._channel: Channel | None = None
        self.handlers: dict[str, Registration] = {}
        for reg in handlers or ():
            self.register(reg.step, reg.handler, reg.queue, flow=reg.flow)
        # The most jobs held at once, for those who check the worker keeps
        # to its concurrency.
        self.max_held = 0
        self.completed = 0
        self.failed = 0
        # Reports sent again after nqd did not take them (unreachable, 5xx, 429).
        self.report_retries = 0
        self._http: HTTPClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running: dict[asyncio.Task[None], _Job] = {}
        self._slot_freed: asyncio.Event | None = None
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._stop_requested = False
        self._stop_now = False
        # When the worker was asked to stop: the grace period counts from it.
        self._stop_at: float | None = None
        self._grace_over: asyncio.Event | None = None
        # Set once the grace period is over: a job that reaches a slot after
        # that is failed as retriable without running.
        self._jobs_stopped = False
        # The queues run() claims from, which completions claim from too.
        self._claim_queues: list[str] = []

    def step(self, name: str, queue: str = "default", *, flow: str | None = None) -> Callable[[Handler], Handler]:
        """Registers the decorated function as the handler of step name:
        of that flow's step only with flow, otherwise of a step of that
        name in any flow (a flow's own handler wins)."""

        def register(fn: Handler) -> Handler:
            self.register(name, fn, queue, flow=flow)
            return fn

        return register

    def register(self, name: str, fn: Handler, queue: str = "default", *, flow: str | None = None) -> None:
        reg = Registration(name, fn, queue, flow)
        old = self.handlers.get(reg.key)
        if old is not None and old.handler is not fn:
            raise ValueError(f"step {reg.key!r} has a handler already")
        self.handlers[reg.key] = reg

    def handler_of(self, flow: str, step: str) -> Registration | None:
        """The handler of flow's step: the one registered for the flow,
        else the one for the step's name in any flow."""
        return self.handlers.get(f"{flow}/{step}") or self.handlers.get(step)

    def stop(self, now: bool = False) -> None:
        """Stops claiming; running jobs get the grace period to finish (with
        now, none: they are stopped and reported as retriable failures at
        once). Safe to call from any thread and from a signal handler."""
        self._stop_requested = True
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._stop_now = self._stop_now or now
        loop, events = self._loop, [e for e in (self._stop, self._grace_over if now else None) if e is not None]
        if loop is None or not events:
            return
        for ev in events:
            try:
                if asyncio.get_running_loop() is loop:
                    ev.set()
                    continue
            except RuntimeError:
                pass
            loop.call_soon_threadsafe(ev.set)

    def run_forever(self) -> None:
        """Runs the worker in a new event loop until stop(), SIGINT or
        SIGTERM (a second signal quits without waiting for running steps)."""
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        import signal

        loop = asyncio.get_running_loop()
        main = asyncio.create_task(self.run())
        signals = 0

        def on_signal() -> None:
            # The first signal stops gracefully, a second one at once.
            nonlocal signals
            signals += 1
            if signals == 1:
                log.info("stopping: running steps get %gs to finish (signal again to quit now)", self.grace)
                self.stop()
            else:
                log.info("stopping now: running steps are failed as retriable")
                self.stop(now=True)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError):
                pass
        await main

    async def run(self) -> None:
        """Claims and runs jobs until stop(). Raises AuthError when nqd
        refuses the worker's token, NqdError when it refuses its claims
        otherwise (a queue name it does not take, say)."""
        queues = self.queues or sorted({r.queue for r in self.handlers.values()}) or ["default"]
        self._claim_queues = queues
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._grace_over = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        if self._stop_now:
            self._grace_over.set()
        self._jobs_stopped = False
        self._slot_freed = asyncio.Event()
        self._http = HTTPClient(self.url, self.token, max_idle=self.concurrency * 2 + 4)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.concurrency, thread_name_prefix="nqd-step"
        )
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            if self.transport == "channel" and await self._channel_loop(queues, stop_wait):
                self.transport = "http"
            if self.transport == "http":
                await self._claim_loops(queues, stop_wait)
        finally:
            # Completions claim only while the worker claims: not once it
            # stops, nor once nqd refused its claims.
            if self._stop_at is None:
                self._stop_at = time.monotonic()
            self._stop.set()
            stop_wait.cancel()
            ch = self._channel
            if ch is not None:
                # nqd offers nothing more; outcomes from now on free no slot.
                ch.tell({"type": "pause"})
            await self._drain()
            if ch is not None:
                await ch.close()
                self._channel = None
            if self.transport == "http":
                await self._goodbye()
            await self._http.close()
            self._threads.shutdown(wait=False)

    async def _goodbye(self) -> None:
        """Tells nqd's worker registry the worker stops; a courtesy, since a
        silent worker is shown lost in time. Over the channel its close
        (1000) says it."""
        try:
            await self._request("POST", "/api/_workers/goodbye", {}, timeout=2.0)
        except Exception:  # noqa: BLE001 - nothing depends on it
            pass

    async def _claim_loops(self, queues: list[str], stop_wait: asyncio.Task[Any]) -> None:
        """Claims jobs over HTTP until stop(): of every queue at once, or
        with queue_concurrency in a loop per queue, each for its queue's
        free slots. A loop nqd refuses stops the others."""
        caps = self.queue_concurrency
        if caps is None:
            await self._claim_loop(queues, stop_wait, None)
            return
        assert self._stop is not None
        loops = [asyncio.create_task(self._claim_loop([q], stop_wait, caps[q])) for q in queues]
        try:
            await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
            if any(t.done() and not t.cancelled() and t.exception() is not None for t in loops):
                self._stop.set()
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    def _held_of(self, queue: str) -> int:
        return sum(1 for j in self._running.values() if j.queue == queue)

    async def _claim_loop(self, queues: list[str], stop_wait: asyncio.Task[Any], cap: int | None) -> None:
        """Claims jobs of queues for free slots over HTTP until stop(), at
        most cap of them held at once when given (of its one queue)."""
        assert self._stop is not None and self._slot_freed is not None and self._grace_over is not None
        backoff = Backoff(self.retry_base, self.retry_cap)
        while not self._stop.is_set():
            free = self.concurrency - len(self._running)
            if cap is not None:
                free = min(free, cap - self._held_of(queues[0]))
            if free <= 0:
                self._slot_freed.clear()
                slot = asyncio.create_task(self._slot_freed.wait())
                await asyncio.wait({slot, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                slot.cancel()
                continue
            # A stop waits for the claim in flight while running steps
            # may (see _drain) rather than dropping it: jobs nqd hands
            # out to a dropped claim would sit leased to no one until
            # their lease ran out.
            claim = asyncio.create_task(self._claim(queues, min(free, _MAX_CLAIM)))
            await asyncio.wait({claim, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not claim.done() and not self._grace_over.is_set():
                now = asyncio.create_task(self._grace_over.wait())
                await asyncio.wait(
                    {claim, now}, timeout=max(self._steps_until() - time.monotonic(), 0.0), return_when=asyncio.FIRST_COMPLETED
                )
                now.cancel()
            if not claim.done():
                claim.cancel()
                await asyncio.gather(claim, return_exceptions=True)
                break
            try:
                jobs = claim.result()
            except NqdError as e:
                if e.status in (408, 429) or e.status >= 500:
                    delay = backoff.next()
                    log.warning("claim failed (%s); retrying in %.1fs", e, delay)
                    await asyncio.wait({stop_wait}, timeout=delay)
                    continue
                raise  # a claim nqd refuses (its queues, say) stays refused
            except (TransportError, ValueError) as e:
                delay = backoff.next()
                log.warning("claim failed (%s); retrying in %.1fs", e, delay)
                await asyncio.wait({stop_wait}, timeout=delay)
                continue
            backoff.reset()
            for raw in jobs:
                self._start(_Job(self, raw))

    async def _channel_loop(self, queues: list[str], stop_wait: asyncio.Task[Any]) -> bool:
        """Keeps the worker channel open until stop(): nqd offers jobs over
        it, and a channel that drops is opened again with backoff (at once
        after nqd said it restarts). Returns True when nqd or a proxy cannot
        upgrade, and the worker claims over HTTP instead."""
        assert self._stop is not None
        backoff = Backoff(self.retry_base, self.retry_cap)
        # The upgrade carries what every HTTP call does: the token and the
        # Nqd-Worker-* headers.
        headers = {**self._self, **({"Authorization": f"Bearer {self.token}"} if self.token else {})}
        while not self._stop.is_set():
            opening = asyncio.create_task(open_channel(self.url, headers, lambda c: self._hello(c, queues), self._offered))
            await asyncio.wait({opening, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():
                opening.cancel()
                await asyncio.gather(opening, return_exceptions=True)
                break
            try:
                ch = opening.result()
            except Redirected as e:
                log.warning("%s: claiming over HTTP", e)
                return True
            except Refused as e:
                if e.falls_back:
                    log.info("nqd cannot open the worker channel (%s): claiming over HTTP", e)
                    return True
                delay = max(backoff.next(), _retry_after(e.response) or 0.0)
                log.warning("%s; trying again in %.1fs", e, delay)
                await asyncio.wait({stop_wait}, timeout=delay)
                continue
            except TransportError as e:
                delay = backoff.next()
                log.warning("the worker channel did not open (%s); trying again in %.1fs", e, delay)
                await asyncio.wait({stop_wait}, timeout=delay)
                continue
            except NqdError as e:
                if not _takes_no_queue_concurrency(e):
                    raise  # a refused hello stays refused: run() raises it
                log.info("nqd does not take queueConcurrency (%s): claiming over HTTP", e)
                return True
            # AuthError stays refused: run() raises it.
            backoff.reset()
            self._channel = ch
            if self._stop.is_set():
                break
            log.debug("worker channel open")
            closed = asyncio.create_task(ch.closed.wait())
            await asyncio.wait({closed, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            if self._stop.is_set():
                # The channel stays open while the running steps report.
                break
            self._channel = None
            delay = 0.0 if ch.restart else backoff.next()
            log.warning("the worker channel closed%s; opening it again in %.1fs", " (nqd restarts)" if ch.restart else "", delay)
            await asyncio.wait({stop_wait}, timeout=delay)
        return False

    def _hello(self, ch: Channel, queues: list[str]) -> dict[str, Any]:
        """The channel's hello, asked for as it is sent: the jobs held now
        count against ch's slots, so each frees its slot there when it ends."""
        for job in self._running.values():
            job.slot_channel = ch
            job.slot_freed = False
        # The same id, name, version and host as every HTTP call's headers.
        hello: dict[str, Any] = {
            "workerId": self._self["Nqd-Worker-Id"],
            "name": (self.name or self._self["Nqd-Worker-Name"])[:128],
            "sdk": "python",
            "version": self._self["Nqd-Worker-Version"],
            "host": self._self["Nqd-Worker-Host"],
            "queues": queues,
            "concurrency": self.concurrency,
            "slots": max(0, self.concurrency - len(self._running)) if self._claiming() else 0,
        }
        if self.queue_concurrency is not None:
            hello["queueConcurrency"] = self.queue_concurrency
            held: dict[str, int] = {}
            for job in self._running.values():
                held[job.queue] = held.get(job.queue, 0) + 1
            # An outcome whose ack freed its slot may leave a queue's step
            # reporting beside a job offered for that slot: nqd counts the
            # queue full, and each job's end frees a slot up to its cap.
            hello["held"] = {q: min(n, cap) for q, cap in self.queue_concurrency.items() if (n := held.get(q, 0))}
        return hello

    def _offered(self, jobs: list[dict[str, Any]], ch: Channel) -> None:
        """nqd offered jobs over ch: each runs at once in the slot it took
        there (or, past the grace period, is handed back at once)."""
        for raw in jobs:
            job = _Job(self, raw)
            job.slot_channel = ch
            self._start(job)

    async def _job_call(
        self, job: _Job, action: str, body: dict[str, Any], *, key: str | None = None, timeout: float = _CALL_TIMEOUT
    ) -> Response:
        """One job call, over the channel while it is open, else over HTTP;
        the answer is the same either way. An outcome sent over the channel
        frees its slot there (next) unless the worker stops or the slot was
        freed already."""
        ch = self._channel
        if ch is None or not ch.live:
            headers = {"Idempotency-Key": key} if key else None
            return await self._request("POST", f"{job.path}/{action}", body, timeout=timeout, headers=headers)
        frame = dict(body)
        if key:
            frame["idempotencyKey"] = key
        nxt = False
        if action in ("complete", "fail"):
            nxt = self._claiming() and not job.slot_freed and job.slot_channel is ch
            frame["next"] = nxt
            # The slot's next job comes in the ack, as over HTTP in the
            # completion's answer, when nqd can send it there.
            if action == "complete" and nxt and ch.welcome.get("nextInAck") is True:
                frame["nextInAck"] = True

        def answered(resp: Response) -> None:
            # Only an ack frees the slot there (after an error the job's end
            # gives it back with a slots frame), and nqd may offer the
            # slot's next job in the very next frame; a job the ack brings
            # takes the slot there.
            if nxt and resp.status == 200:
                job.slot_freed = True
                job.next_channel = ch

        return await ch.request(action, job.queue, job.id, frame, timeout, answered)

    async def _claim(self, queues: list[str], n: int) -> list[dict[str, Any]]:
        body = {"queues": queues, "max": n, "waitMs": int(self.claim_wait * 1000)}
        resp = await self._request("POST", "/api/_workers/claim", body, timeout=self.claim_wait + 15.0)
        if resp.status in (401, 403):
            raise AuthError(resp.status, resp.error_message())
        if resp.status != 200:
            raise NqdError(resp.status, resp.error_message(), resp.error_fields())
        jobs = (resp.json() or {}).get("jobs") or []
        return [j for j in jobs if isinstance(j, dict)]

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> Response:
        if self._http is None:
            raise RuntimeError("the worker is not running")
        return await self._http.request(method, path, body, timeout=timeout, headers={**self._self, **(headers or {})})

    def _start(self, job: _Job) -> None:
        task = asyncio.create_task(self._run_slot(job))
        self._running[task] = job
        # A job whose outcome freed its slot on the channel is not held,
        # though its task has yet to end.
        held = sum(1 for j in self._running.values() if not j.slot_freed)
        self.max_held = max(self.max_held, held)
        task.add_done_callback(self._finished)

    async def _run_slot(self, job: _Job) -> None:
        """Runs job in a slot of its own, then each job the completions
        bring, in the same slot: the slot is taken until a completion brings
        none (or the job did not complete), so the claim loop never counts it
        free while it holds a job. A job that arrives while the worker stops
        is run as any other within the grace period, and failed as retriable
        once that is over (as the Go SDK does), so none is dropped or left
        unheld until its lease runs out."""
        task = asyncio.current_task()
        assert task is not None
        nxt: _Job | None = job
        while nxt is not None:
            self._running[task] = nxt
            nxt = await self._run_job(nxt)

    def _finished(self, task: asyncio.Task[None]) -> None:
        job = self._running.pop(task, None)
        if job is not None and not job.slot_freed and job.slot_channel is not None and self._claiming():
            # Its outcome did not free its slot on the channel the slot
            # counts on (it went over HTTP, say, or was given up): say so,
            # naming its queue when nqd counts each queue's slots.
            frame: dict[str, Any] = {"type": "slots", "add": 1}
            if self.queue_concurrency is not None:
                frame["queue"] = job.queue
            job.slot_channel.tell(frame)
        if self._slot_freed is not None:
            self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("job runner crashed: %r", task.exception())

    def _steps_until(self) -> float:
        """The monotonic time running steps must end by once the worker
        stops: the grace period less the part kept for reporting those still
        running then."""
        start = self._stop_at if self._stop_at is not None else time.monotonic()
        return start + self.grace - min(self.grace / 5, _MAX_STOP_REPORT)

    async def _drain(self) -> None:
        """Lets running jobs finish within the grace period (or until
        stop(now=True)), then stops their handlers: they are reported as
        retriable failures. Whatever is still on its way at the end of the
        grace period is dropped, so that the worker stops within it."""
        if not self._running:
            return
        assert self._grace_over is not None
        over = asyncio.create_task(self._grace_over.wait())
        steps_until = self._steps_until()
        while self._running and not over.done():
            left = steps_until - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait(set(self._running) | {over}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        over.cancel()
        self._jobs_stopped = True
        late = set(self._running)
        for task in late:
            job = self._running.get(task)
            if job is not None and job.handler_task is not None and not job.handler_task.done():
                job.stopped = True
                job.handler_task.cancel()
        if not late:
            return
        assert self._stop_at is not None
        _, dropped = await asyncio.wait(late, timeout=max(self._stop_at + self.grace - time.monotonic(), 0.0))
        if dropped:
            log.warning("%d reports still on their way at the end of the grace period dropped", len(dropped))
            for task in dropped:
                task.cancel()
            await asyncio.wait(dropped)

    async def _run_job(self, job: _Job) -> _Job | None:
        """Runs job's handler and reports its outcome, heartbeating the job
        from its claim until the outcome is acknowledged. Returns the slot's
        next job when the completion brought one."""
        reg = self.handler_of(job.flow_name, job.step)
        ctx = Context(job)
        # step.started goes with the step's first report; a step that
        # reports nothing for a moment gets it alone, so that it shows as
        # running, and a quick step costs one call after its claim.
        started = asyncio.get_running_loop().call_later(_STARTED_DELAY, self._send_started, job)
        beat = asyncio.create_task(job.heartbeat())
        try:
            if self._jobs_stopped:
                # A completion brought the job after the grace period: it is
                # handed back at once rather than run or left to its lease.
                outcome: tuple[str, Any] = ("fail", ("the worker stopped before the step started", True))
            elif reg is None:
                outcome = ("fail", (f"no handler for step {job.step!r} of flow {job.flow_name!r} in this worker", False))
            else:
                job.handler_task = asyncio.ensure_future(self._call(reg.handler, job, ctx))
                await asyncio.wait({job.handler_task})
                outcome = self._outcome(job)
            started.cancel()
            try:
                await job.reporter.flush()
            except Exception:  # noqa: BLE001 - each event's sender saw it already
                pass
            if job.gone:
                log.info("job %s: the run ended or the lease was lost; nothing reported", job.id)
                return None
            kind, value = outcome
            try:
                if kind == "complete":
                    try:
                        answer = await self._complete(job, value)
                        self.completed += 1
                        return self._next_job(answer, job.next_channel)
                    except NqdError as e:
                        # nqd refused the result itself (too large, say):
                        # the step fails, saying why.
                        kind = "fail"
                        msg = f"the step's result was refused: {e}"
                        await self._finish(job, "fail", {"lease": job.lease, "error": msg[:_MAX_ERROR], "retriable": False})
                        self.failed += 1
                else:
                    msg, retriable = value
                    await self._finish(job, "fail", {"lease": job.lease, "error": msg[:_MAX_ERROR], "retriable": retriable})
                    self.failed += 1
            except LeaseLost as e:
                log.warning("%s", e)
            except (NqdError, AuthError) as e:
                log.error("job %s: %s not reported: %s", job.id, kind, e)
            return None
        finally:
            started.cancel()
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)

    def _claiming(self) -> bool:
        return not self._stop_requested and self._stop is not None and not self._stop.is_set()

    async def _complete(self, job: _Job, result: Any) -> Any:
        """Completes job with result and returns nqd's answer. While the
        worker claims, the completion also claims the slot's next job, which
        the answer lists (docs/worker-protocol.md, Complete)."""
        body: dict[str, Any] = {"lease": job.lease}
        if result is not None:
            body["result"] = result
        # With queue_concurrency the claim loops keep each queue's count: a
        # completion's claim, of any queue, would not.
        if self._claiming() and self.transport == "http" and self.queue_concurrency is None:
            body["claim"] = {"queues": self._claim_queues, "max": 1, "waitMs": round(_NEXT_JOB_WAIT * 1000)}
        return await self._finish(job, "complete", body)

    def _next_job(self, answer: Any, ch: Channel | None) -> _Job | None:
        """The job a completion's answer brings, in the slot the completed
        job held (on ch when a channel's ack brought it)."""
        jobs = answer.get("jobs") if isinstance(answer, dict) else None
        if not isinstance(jobs, list) or not jobs:
            return None
        if len(jobs) > 1:
            # nqd never answers more than asked for; a job beyond the slot
            # is left to its lease rather than run without one.
            log.error("nqd answered %d jobs to a completion that asked for 1", len(jobs))
        raw = jobs[0]
        if not isinstance(raw, dict):
            return None
        job = _Job(self, raw)
        job.slot_channel = ch
        return job

    def _send_started(self, job: _Job) -> None:
        if not job.started_sent and not job.gone:
            job.reporter.add({"kind": "step.started"}, quiet=True)

    async def _finish(self, job: _Job, action: str, body: dict[str, Any]) -> Any:
        """Reports complete or fail, with the attempt's step.started and the
        emits that waited with it when they were not sent yet (nqd stores
        them just before the outcome), and returns nqd's answer. A failure
        takes no emits: they are reported first."""
        if action == "fail" and not job.started_sent and job.queued:
            try:
                await job.reporter.add({"kind": "step.started"})
            except Exception as e:  # noqa: BLE001 - the failure is reported all the same
                log.warning("job %s: emits before the failure not reported: %s", job.id, e)
        if not job.started_sent:
            events = [{"kind": "step.started"}, *(job.queued if action == "complete" else [])]
            answer = await job.report(action, {**body, "events": events})
            job.started_sent = True
            job.queued = []
            return answer
        return await job.report(action, body)

    async def _call(self, fn: Handler, job: _Job, ctx: Context) -> Any:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
            return await cast(AsyncHandler, fn)(job.input, ctx)
        loop = asyncio.get_running_loop()
        sync_ctx = SyncContext(ctx, loop)
        res = await loop.run_in_executor(self._threads, fn, job.input, sync_ctx)
        if inspect.isawaitable(res):
            return await res
        return res

    def _outcome(self, job: _Job) -> tuple[str, Any]:
        t = job.handler_task
        assert t is not None
        if t.cancelled():
            if job.stopped:
                return ("fail", ("the worker stopped before the step finished", True))
            return ("fail", ("the step was cancelled", True))
        err = t.exception()
        if err is None and job.encode_error is not None:
            # The handler let an encoding error through: the step fails
            # with it all the same.
            err = job.encode_error
        if err is None:
            result = t.result()
            try:
                json.dumps(result, allow_nan=False)
            except (TypeError, ValueError) as e:
                err = EncodeError("result", e)
            else:
                return ("complete", result)
        if isinstance(err, EncodeError):
            log.warning("job %s: step %s failed: %s", job.id, job.step, err)
            return ("fail", (str(err), True))
        if isinstance(err, PermanentError):
            log.info("job %s: step %s failed for good: %s", job.id, job.step, err)
            return ("fail", (str(err) or "PermanentError", False))
        if isinstance(err, LeaseLost):
            job._mark_gone()
        # nqd gets the message; the traceback stays in the worker's log.
        log.warning("job %s: step %s failed (attempt %d)", job.id, job.step, job.attempt, exc_info=err)
        return ("fail", (_describe(err), True))


def _describe(err: BaseException) -> str:
    msg = str(err)
    name = type(err).__name__
    return f"{name}: {msg}" if msg else name
