"""The Manager: owns the client, the shared informers and the event broadcaster, and runs every Runnable in
a fixed order.

Start order, and why:
1. Health probes and the runnables that do not need leader election (webhook and metrics servers,
   certificate management, the event sender). Probes must answer while caches fill, or the kubelet restarts
   a slow starter; webhooks must serve first because listing a CRD may need its conversion webhook, and the
   API server calls admission webhooks regardless of who leads.
2. Informers, then wait (at most `cache_sync_timeout`, default 2 min) until every informer requested so far
   has synced. Followers keep warm caches too, so a takeover reconciles at once; readiness reports
   "informers" unready until then. An informer that cannot list for a reason retrying will not fix (its
   resource is not served: a CRD not installed; or the list is forbidden) logs that once and is waited for
   past the deadline: readiness serves the reason (and the fix, when the caller registered one with
   `informers.add_fix_hint`), and the manager goes on by itself once the resource can be listed. With
   `freeze_heap_after_sync`, the heap is frozen here (`runtime.heap`): everything alive now lives as long as
   the process, and later full collections skip it.
3. Leader election (if enabled), then the leader-elected runnables (controllers) only while leading.
   Losing the Lease cancels them at that instant, without grace (`runnable.cancel_without_grace`), and `start`
   raises `LeadershipLostError` so the process exits non-zero and restarts clean, as controller-runtime does.
   Their writes go through `leader_client`, which checks leadership on the monotonic clock just before each
   write is sent: a replica paused past its renew deadline (SIGSTOP, a blocked event loop) may resume any task
   first, and that task's write must fail rather than land beside the new leader's.

Stop order (on SIGTERM/SIGINT or the `stopping` event): leader-elected runnables first (they stop taking
work and drain in-flight reconciles), then informers (no new events mid-shutdown), then the Lease is released
if configured (leader-only work has ended, so a successor cannot overlap it), then servers and probes last,
so webhooks keep answering while controllers drain. Each group is stopped by cancelling its tasks, and waited
for while it winds down (see `runnable`). One `graceful_shutdown_timeout` (default 30 s) bounds the whole
sequence; runnables still winding down at the deadline are cancelled again, which ends their wind-down. A
runnable that fails stops the manager the same way, and `start` re-raises its error.

Readiness (/readyz): "informers" fails, saying why, while a cache has not synced or cannot list; "api-server"
fails while requests do not reach the API server (the client logs a warning once when that starts, and an info
line when it ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field

from llmaz.runtime import heap
from llmaz.runtime.cache.factory import CacheSyncTimeoutError, SharedInformerFactory
from llmaz.runtime.client.client import Client
from llmaz.runtime.client.config import in_cluster_namespace
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.events import EventBroadcaster, EventRecorder
from llmaz.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLostError,
    default_identity,
)
from llmaz.runtime.log import get_logger
from llmaz.runtime.runnable import AnyRunnable, cancel_without_grace, run_until_cancelled, until_cancelled
from llmaz.runtime.server.healthz import Check, CheckFailed, HealthProbeServer

__all__ = ["CacheSyncTimeoutError", "LeadershipLostError", "Manager", "ManagerOptions"]


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    health_probe_bind_address: str | None = ":8081"
    """Where /healthz and /readyz listen; None disables them. Default ":8081"."""
    leader_election: bool = False
    """Run leader-elected runnables only while holding the Lease. Default False (always run them)."""
    leader_election_id: str = ""
    """Name of the Lease; required when leader_election is on."""
    leader_election_namespace: str | None = None
    """Namespace of the Lease. Default: the pod's service-account namespace."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    leader_election_release_on_cancel: bool = False
    """Release the Lease on a clean stop so a successor takes over at once. Default False; only safe when
    the process exits right after the manager stops."""
    identity: str = field(default_factory=default_identity)
    cache_sync_timeout: float = 120.0
    freeze_heap_after_sync: bool = False
    """Freeze the garbage collector's heap once the caches have synced (`runtime.heap.freeze`), so later full
    collections skip the start-up objects and the initial cache. Off by default because it affects the whole
    process; llmaz-manager turns it on."""
    graceful_shutdown_timeout: float = 30.0
    """Seconds the whole stop sequence may take; 0 cancels at once; negative waits forever."""
    clock: Clock = REAL_CLOCK


class _Group:
    """Runnables started together and stopped together."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tasks: list[asyncio.Task[None]] = []

    def cancel_without_grace(self) -> None:
        """Stop every task at its next step, whatever it was waiting for, with no wind-down."""
        for task in self.tasks:
            cancel_without_grace(task)

    async def stop(self, deadline: float | None) -> None:
        """Cancel every task and wait while they wind down; at `deadline` (None: never) cancel what is left again."""
        if not self.tasks:
            return
        for task in self.tasks:
            task.cancel()
        loop = asyncio.get_running_loop()
        timeout = None if deadline is None else deadline - loop.time()
        if timeout is None or timeout > 0:
            _, pending = await asyncio.wait(self.tasks, timeout=timeout)
        else:
            pending = {task for task in self.tasks if not task.done()}
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


class Manager:
    def __init__(self, client: Client, options: ManagerOptions | None = None) -> None:
        self.options = opts = options or ManagerOptions()
        if opts.leader_election and not opts.leader_election_id:
            raise ValueError("leader_election needs a leader_election_id")
        self.client = client
        # For leader-elected runnables: with leader election on, a write raises LeadershipLostError (and is not
        # sent) unless this replica leads at that moment.
        self.leader_client = client.guarded(self._check_leading)
        self.informers = SharedInformerFactory(client, clock=opts.clock)
        self.events = EventBroadcaster(client, clock=opts.clock)
        self.health = HealthProbeServer(opts.health_probe_bind_address or ":0")
        self.health.readyz.add("informers", self._informers_ready)
        self.health.readyz.add("api-server", self._api_server_reachable)
        self._runnables: list[AnyRunnable] = []
        self._halt = asyncio.Event()  # stop requested, or a runnable failed
        self._failure: BaseException | None = None
        self._lost = False
        self._elector: LeaderElector | None = None
        self._log = get_logger("llmaz.runtime.manager")

    def add(self, runnable: AnyRunnable) -> None:
        """Register a runnable; it starts with its group (see the module docstring)."""
        self._runnables.append(runnable)

    def event_recorder(self, name: str) -> EventRecorder:
        """An event recorder reporting as controller `name`."""
        return self.events.recorder(name)

    def add_healthz_check(self, name: str, check: Check) -> None:
        self.health.healthz.add(name, check)

    def add_readyz_check(self, name: str, check: Check) -> None:
        self.health.readyz.add(name, check)

    def _informers_ready(self) -> None:
        problems = self.informers.problems()
        if problems:
            raise CheckFailed("; ".join(str(problem) for problem in problems))
        unsynced = self.informers.unsynced()
        if unsynced:
            raise CheckFailed(f"caches not synced yet: {', '.join(unsynced)}")

    def _api_server_reachable(self) -> None:
        lost = self.client.connectivity.describe()
        if lost:
            raise CheckFailed(lost)

    @property
    def is_leader(self) -> bool:
        return self._elector.is_leader if self._elector else not self.options.leader_election

    def _check_leading(self) -> None:
        if not self.options.leader_election:
            return
        if self._elector is None:
            raise LeadershipLostError("leader election has not started")
        self._elector.check_leading()

    async def start(self, stopping: asyncio.Event | None = None) -> None:
        """Run until `stopping` is set (or SIGTERM/SIGINT when None); raises on a failure or a lost Lease."""
        heap.track_full_collections()
        with self._signals(stopping) as stop_event:
            relay = asyncio.create_task(self._relay(stop_event))
            servers, caches, leaders = _Group("servers"), _Group("caches"), _Group("leader-elected")
            try:
                self._start(servers, self._server_runnables())
                self._start(caches, [self.informers])
                await self._until_halt(self._sync_and_lead(leaders))
            finally:
                relay.cancel()
                await self._stop(servers, caches, leaders, self._lost)
            if self._lost:
                raise LeadershipLostError("leader election lost")
            if self._failure is not None:
                raise self._failure

    def _server_runnables(self) -> list[AnyRunnable]:
        extra: list[AnyRunnable] = [self.health] if self.options.health_probe_bind_address else []
        return [*extra, self.events, *(r for r in self._runnables if not r.needs_leader_election)]

    async def _sync_and_lead(self, leaders: _Group) -> None:
        await self.informers.wait_for_sync(self.options.cache_sync_timeout)
        if self.options.freeze_heap_after_sync:
            self._log.info("froze the heap after cache sync", objects=heap.freeze())
        await self._lead(leaders)

    async def _lead(self, leaders: _Group) -> None:
        """Run leader-elected runnables while leading, until cancelled or the Lease is lost."""
        leader_runnables = [r for r in self._runnables if r.needs_leader_election]
        if not self.options.leader_election:
            self._start(leaders, leader_runnables)
            await until_cancelled()
        self._elector = LeaderElector(
            self.client,
            self._election_config(),
            self.options.clock,
            on_stopped_leading=lambda: self._stopped_leading(leaders),
        )
        await self._elector.acquire()
        self._start(leaders, leader_runnables)
        with contextlib.suppress(LeadershipLostError):  # already handled by _stopped_leading
            await self._elector.hold()

    def _stopped_leading(self, leaders: _Group) -> None:
        # Called by the elector the moment leadership is lost (or found lapsed by a write's check), before any
        # other task runs: leader-only work is cancelled now, and what it raises on the way out is no failure.
        self._lost = True
        leaders.cancel_without_grace()
        self._halt.set()
        self._log.error("leader election lost")

    def _election_config(self) -> LeaderElectionConfig:
        o = self.options
        return LeaderElectionConfig(
            name=o.leader_election_id,
            namespace=o.leader_election_namespace or in_cluster_namespace(),
            identity=o.identity,
            lease_duration=o.lease_duration,
            renew_deadline=o.renew_deadline,
            retry_period=o.retry_period,
            release_on_cancel=o.leader_election_release_on_cancel,
        )

    def _start(self, group: _Group, runnables: list[AnyRunnable]) -> None:
        for runnable in runnables:
            task = asyncio.create_task(run_until_cancelled(runnable), name=f"{group.name}: {runnable!r}")
            task.add_done_callback(self._on_done)
            group.tasks.append(task)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or self._halt.is_set():
            return
        self._failure = task.exception()
        self._log.error("runnable failed", runnable=task.get_name(), error=repr(self._failure))
        self._halt.set()

    async def _until_halt(self, work: Awaitable[None]) -> None:
        """Await `work` unless the manager halts first, then cancel it and let it unwind (a renewal in flight).
        Errors from `work` (e.g. sync timeout) propagate."""
        worker = asyncio.ensure_future(work)
        halted = asyncio.ensure_future(self._halt.wait())
        try:
            await asyncio.wait([worker, halted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            halted.cancel()
            worker.cancel()
            await asyncio.wait([worker])
        if not worker.cancelled():
            worker.result()

    async def _stop(self, servers: _Group, caches: _Group, leaders: _Group, lost: bool) -> None:
        self._halt.set()
        grace = 0.0 if lost else self.options.graceful_shutdown_timeout
        loop = asyncio.get_running_loop()
        deadline = None if grace < 0 else loop.time() + grace
        await leaders.stop(deadline)
        await caches.stop(deadline)
        if self._elector is not None and self.options.leader_election_release_on_cancel and not lost:
            await self._elector.release()
        await servers.stop(deadline)
        self._log.info("manager stopped")

    async def _relay(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._log.info("stopping manager")
        self._halt.set()

    @contextlib.contextmanager
    def _signals(self, stopping: asyncio.Event | None) -> Iterator[asyncio.Event]:
        if stopping is not None:
            yield stopping
            return
        event = asyncio.Event()
        loop = asyncio.get_running_loop()
        # Installed whatever was there, an inherited SIG_IGN included (a background job of a script ignores SIGINT).
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            loop.add_signal_handler(sig, event.set)
        try:
            yield event
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)  # which leaves SIGINT at Python's default_int_handler, not `handler`
                if handler is not None:  # None: set outside Python, which cannot put it back
                    signal.signal(sig, handler)
