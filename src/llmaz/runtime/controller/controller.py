"""The controller: informer events in, Requests through a rate-limited queue, reconciles out.

`run` registers one `EnqueueHandler` per watch on its informer, waits for every informer to sync (at most
`cache_sync_timeout`), then starts `max_concurrent_reconciles` workers over one queue. The queue never hands a
key to two workers at once, so a key is never reconciled concurrently.

Every outcome is decided in `_reconcile_handler`, and nowhere else:

| reconcile ...                     | queue                     | reconcile_total result | also counted     |
| --------------------------------- | ------------------------- | ---------------------- | ---------------- |
| returns Result()                  | forget                    | success                |                  |
| returns Result(requeue_after=s>0) | forget, then add_after(s) | requeue_after          |                  |
| returns Result(requeue=True)      | add_rate_limited          | requeue                |                  |
| raises TerminalError              | forget (not retried)      | error                  | errors, terminal |
| raises Conflict (409)             | add_rate_limited          | error                  | errors           |
| raises any other Exception        | add_rate_limited          | error                  | errors           |
| runs past `reconcile_timeout`     | add_rate_limited          | error                  | errors, timeouts |

Errors are logged once, here, as "Reconciler error" with the traceback, except a Conflict: a write from a
cache one event behind, expected under load and fixed by the retry, logged at info without one; and a timeout,
logged with where the reconcile was waiting (`stuck_at`) instead of a traceback. Nothing a reconciler raises
stops a worker, except `CancelledError` (and other BaseExceptions), which always propagate. Each reconcile runs
with controller, kind, namespace, name and a fresh reconcile_id bound to the log context.

Tracing (`tracing`, off by default): each reconcile is a span named after the controller, with the object's kind,
namespace and name, the reconcile_id and the result as attributes (status error when it failed).

Timeout: a reconcile runs in its own task, raced against `reconcile_timeout` on the controller's clock. At the
deadline the task is cancelled and the worker waits for it to unwind (so the key is still never reconciled twice
at once), then counts the timeout. Unlike Go's advisory context, cancellation interrupts whatever `await` the
reconcile is in (a request to a hung server, a lock); only code that blocks the event loop or swallows
`CancelledError` can hold a worker past it.

Shutdown: when its task is cancelled the queue shuts down with drain. In-flight reconciles finish; queued keys
that no worker has started are dropped (the controller is level-triggered, so whoever runs next relists and
reconciles everything); then the cancellation propagates. A second cancellation (no grace left, or the Lease
lost) cancels the in-flight reconciles too. A controller runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry import trace

from llmaz.runtime import tracing
from llmaz.runtime.cache.factory import CacheSyncTimeoutError
from llmaz.runtime.cache.interfaces import Informer
from llmaz.runtime.client.errors import Conflict
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.controller import metrics
from llmaz.runtime.controller.handler import EnqueueHandler, ObjectMapper
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.controller.reconcile import Reconciler, ReconcileTimeoutError, Request, Result, TerminalError
from llmaz.runtime.log import bound_context, get_logger
from llmaz.runtime.runnable import grace_remains, until_cancelled
from llmaz.runtime.workqueue import QueueShutDownError, RateLimiter, RateLimitingQueue

_log = get_logger("llmaz.runtime.controller")
TRACER = "llmaz.runtime.controller"


@dataclass(frozen=True, slots=True)
class Watch:
    """One event source: an informer, the keys its objects concern, and the predicates that filter events."""

    informer: Informer
    mapper: ObjectMapper
    predicates: tuple[Predicate, ...] = ()
    source: str = ""
    """What is watched, for logs (for example "models.v1alpha1.llmaz.io")."""


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    max_concurrent_reconciles: int = 1
    """Workers over the queue. Default 1."""
    cache_sync_timeout: float = 120.0
    """Seconds to wait for the informers to sync before `run` fails. Default 2 minutes."""
    reconcile_timeout: float | None = 60.0
    """Seconds one reconcile may take before it is cancelled and counted as a timed-out error; None or 0: no
    limit. Default 60 s (controller-runtime's `ReconciliationTimeout` has none by default)."""
    needs_leader_election: bool = True
    """Run only while this replica leads. Default True."""
    rate_limiter: RateLimiter | None = None
    """Retry spacing. Default: `default_controller_rate_limiter` (5 ms .. 1000 s per key, 10 qps overall)."""
    clock: Clock = field(default=REAL_CLOCK)
    """Times backoff, delays and metrics. Default: the real monotonic clock."""
    kind: str = ""
    """Kind of the reconciled objects, bound to the log context. Default: none."""


class Controller:
    """A Runnable that reconciles Requests produced by its watches."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        watches: Sequence[Watch],
        options: ControllerOptions | None = None,
    ) -> None:
        self.options = options or ControllerOptions()
        if not name:
            raise ValueError("a controller needs a name")
        if self.options.max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        self.name = name
        self.needs_leader_election = self.options.needs_leader_election
        self.queue: RateLimitingQueue[Request] = RateLimitingQueue(
            name=name, clock=self.options.clock, rate_limiter=self.options.rate_limiter
        )
        self._reconciler = reconciler
        self._watches = tuple(watches)
        self._clock = self.options.clock
        self._started = False
        self._stopping = False

    async def run(self) -> None:
        if self._started:
            raise RuntimeError(f"controller {self.name!r} was already started")
        self._started = True
        metrics.init_controller_metrics(self.name, self.options.max_concurrent_reconciles)
        try:
            with bound_context(controller=self.name):
                self._register_handlers()
                await self._wait_for_sync()
                await self._run_workers()
        finally:
            self.queue.shut_down()

    def _register_handlers(self) -> None:
        for watch in self._watches:
            _log.info("Starting EventSource", source=watch.source)
            watch.informer.add_event_handler(EnqueueHandler(watch.mapper, self.queue, watch.predicates))

    async def _wait_for_sync(self) -> None:
        """Return once every informer has synced; raise on an informer's failure or on timeout."""
        synced = asyncio.ensure_future(asyncio.gather(*(w.informer.wait_for_sync() for w in self._watches)))
        timed_out = asyncio.ensure_future(self._clock.sleep(self.options.cache_sync_timeout))
        try:
            await asyncio.wait((synced, timed_out), return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
            timed_out.cancel()
        if not synced.done() or synced.cancelled():
            raise CacheSyncTimeoutError(f"controller {self.name!r}: timed out waiting for caches to sync")
        synced.result()  # re-raise an informer's failure

    async def _run_workers(self) -> None:
        _log.info("Starting workers", worker_count=self.options.max_concurrent_reconciles)
        async with asyncio.TaskGroup() as workers:
            for index in range(self.options.max_concurrent_reconciles):
                workers.create_task(self._work(), name=f"controller-{self.name}-worker-{index}")
            try:
                await until_cancelled()
            except asyncio.CancelledError:
                # Leaving the TaskGroup with CancelledError cancels the workers: at once without grace, or when
                # a further cancellation interrupts the drain.
                if grace_remains():
                    _log.info("Shutdown signal received, waiting for all workers to finish", dropped=len(self.queue))
                    self._stopping = True
                    await self.queue.shut_down_with_drain()
                    _log.info("All workers finished")
                raise

    async def _work(self) -> None:
        while True:
            try:
                request = await self.queue.get()
            except QueueShutDownError:
                return
            try:
                if not self._stopping:
                    await self._process(request)
            except Exception:
                # _process decides every outcome itself; this only keeps a bug there from killing the worker.
                _log.exception("Reconcile handler failed", namespace=request.namespace, name=request.name)
            finally:
                self.queue.done(request)

    async def _process(self, request: Request) -> None:
        active = metrics.ACTIVE_WORKERS.labels(controller=self.name)
        started = self._clock.now()
        active.inc()
        fields = self._log_fields(request)
        try:
            with bound_context(**fields), tracing.span(TRACER, self.name, _span_attributes(fields)):
                await self._reconcile_handler(request)
        finally:
            active.dec()
            metrics.RECONCILE_TIME.labels(controller=self.name).observe(self._clock.now() - started)

    def _log_fields(self, request: Request) -> dict[str, str]:
        fields = {"kind": self.options.kind} if self.options.kind else {}
        return {
            **fields,
            "namespace": request.namespace,
            "name": request.name,
            "reconcile_id": secrets.token_hex(6),  # ties together every line one reconcile logs
        }

    async def _reconcile_handler(self, request: Request) -> None:
        try:
            result = await self._reconcile(request)
            if not isinstance(result, Result):
                raise TypeError(f"reconcile returned {type(result).__name__}, not Result")
        except TerminalError:
            self.queue.forget(request)
            self._count_error(terminal=True)
            _log.exception("Reconciler error")
            return
        except Exception as err:  # CancelledError is a BaseException: it is not caught and always propagates.
            self.queue.add_rate_limited(request)
            self._count_error(terminal=False)
            if isinstance(err, ReconcileTimeoutError):
                metrics.RECONCILE_TIMEOUTS.labels(controller=self.name).inc()
                _log.error("Reconciler error", error=str(err), stuck_at=err.stuck_at)
            elif isinstance(err, Conflict):
                # A write based on a cache one event behind: the retry reads the newer version. Expected under
                # load, so no traceback at error level; still counted as an error, as controller-runtime does.
                _log.info("Reconcile conflict, requeued", error=str(err))
            else:
                _log.exception("Reconciler error")
            return
        if result.requeue_after:
            self.queue.forget(request)
            self.queue.add_after(request, result.requeue_after)
            self._count("requeue_after")
        elif result.requeue:
            self.queue.add_rate_limited(request)
            self._count("requeue")
        else:
            self.queue.forget(request)
            self._count("success")
            _log.debug("Reconcile successful")

    async def _reconcile(self, request: Request) -> Result:
        """The reconciler's answer, or ReconcileTimeoutError once `reconcile_timeout` has passed."""
        timeout = self.options.reconcile_timeout
        if not timeout or timeout <= 0:
            return await self._reconciler.reconcile(request)
        work = asyncio.ensure_future(self._reconciler.reconcile(request))  # copies the bound log context
        timer = asyncio.ensure_future(self._clock.sleep(timeout))
        try:
            await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The worker is being cancelled (shutdown without grace): the reconcile goes with it, and is gone
            # when the worker is.
            work.cancel()
            work.add_done_callback(_retrieve)
            await asyncio.wait((work,))
            raise
        finally:
            timer.cancel()
        if work.done():
            return work.result()
        stuck_at = _suspended_at(work)
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await work
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise asyncio.CancelledError
        raise ReconcileTimeoutError(f"reconcile did not finish within {timeout:g}s and was cancelled", stuck_at)

    def _count(self, result: str) -> None:
        metrics.RECONCILE_TOTAL.labels(controller=self.name, result=result).inc()
        span = trace.get_current_span()  # the reconcile's (`_process`)
        if span.is_recording():
            span.set_attribute("llmaz.reconcile.result", result)
            if result == "error":
                span.set_status(trace.StatusCode.ERROR)

    def _count_error(self, *, terminal: bool) -> None:
        self._count("error")
        metrics.RECONCILE_ERRORS.labels(controller=self.name).inc()
        if terminal:
            metrics.TERMINAL_RECONCILE_ERRORS.labels(controller=self.name).inc()


def _span_attributes(fields: dict[str, str]) -> dict[str, str | int]:
    return {f"llmaz.reconcile.{key}" if key == "reconcile_id" else f"k8s.object.{key}": v for key, v in fields.items()}


def _retrieve(task: asyncio.Future[Result]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned reconcile's error is not worth a "never retrieved" warning


def _suspended_at(task: asyncio.Future[Result], limit: int = 4) -> str:
    """Where a suspended task waits: its innermost coroutine frames, innermost first ("fn (file:line)")."""
    frames = []
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " <- ".join(reversed(frames[-limit:]))
