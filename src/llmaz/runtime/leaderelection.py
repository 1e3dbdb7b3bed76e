"""Leader election over a `coordination.k8s.io/v1` Lease, with client-go's algorithm and defaults.

Invariants and timing (lease 15 s > renew deadline 10 s > 1.2 x retry period 2 s):
- A candidate takes the Lease only when it is free (no holder), or when the record has not changed for a full
  lease duration as measured on the candidate's own monotonic clock since it last saw a change. Timestamps in
  the record are written (from `clock.wall()`) for humans and tools, never trusted for decisions, so clock
  skew between replicas does not matter (a difference in clock *rate* would).
- Leadership lapses `renew_deadline` after the last successful renewal was sent, on the leader's monotonic
  clock, whatever it is doing then: `is_leader` turns false at that instant, an attempt still in flight (with
  the transport's retries) is cancelled, and `hold` raises. A follower waits a full lease from when it saw
  that renewal, which is later, so with renew deadline < lease duration the old leader has given up before
  anyone may take over. client-go bounds each renew cycle by the deadline instead; counting from the last
  success is stricter by up to one retry period.
- The deadline is checked before any write, not only on a timer: a leader whose process was paused (SIGSTOP,
  a blocked event loop) past it wakes up already deposed, and writes nothing more.
- A leader that reads the Lease and finds another holder steps down at once, without waiting out its deadline:
  the other replica has judged the lease expired and is writing.
- Taking over from another holder increments `leaseTransitions`; renewing keeps `acquireTime`.
- On a clean shutdown the leader may release: holder cleared and duration 1 s, so a successor acquires on its
  next retry instead of waiting out the lease.
There is no fencing: like client-go, this cannot stop a write that was already sent when a stall began;
leader-only work must tolerate a brief overlap.
"""

from __future__ import annotations

import asyncio
import copy
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from llmaz.runtime.client.errors import ApiError, NotFound
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import get_logger
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource
from llmaz.runtime.timestamp import micro_time

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
RBAC_RULES = (allow(LEASES, "get", "create", "update", own_namespace=True),)
JITTER_FACTOR = 1.2

MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.",
    ["name"],
    registry=REGISTRY,
)
SLOWPATH_TOTAL = Counter(
    "leader_election_slowpath_total",
    "Total number of slow path exercised in renewing leader leases.",
    ["name"],
    registry=REGISTRY,
)


class LeadershipLostError(Exception):
    """This replica does not lead (any more): the renew deadline passed, or another replica holds the Lease."""


class LeaseClient(Protocol):
    """The verbs leader election needs (`llmaz.runtime.client.Client` has them)."""

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, request_timeout: float | None = None
    ) -> dict[str, Any]: ...

    async def create(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **opts: Any
    ) -> dict[str, Any]: ...

    async def update(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]: ...


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def check_timings(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """Raise ValueError unless the leader can renew, with room for a retry, before a follower may take over."""
    if not lease_duration > renew_deadline > JITTER_FACTOR * retry_period > 0:
        raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """`name`/`namespace` of the Lease; durations in seconds (controller-runtime defaults 15/10/2)."""

    name: str
    namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = False

    def __post_init__(self) -> None:
        check_timings(self.lease_duration, self.renew_deadline, self.retry_period)

    @property
    def request_timeout(self) -> float:
        # One hung request must not cost the lease.
        return max(self.renew_deadline / 2, 1.0)


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        config: LeaderElectionConfig,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        """`on_stopped_leading` runs synchronously the moment leadership is lost (not on `release`), before any
        other task can run, so leader-only work can be cancelled before it takes another step."""
        self.config = config
        self._client = client
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_stopped_leading = on_stopped_leading
        self._observed: dict[str, Any] | None = None  # the last Lease object read or written
        self._observed_time = 0.0  # monotonic time the record last changed, as seen here
        self._leader = False
        self._renewed_at = 0.0  # monotonic time the last successful acquire or renew was sent
        self._log = get_logger("llmaz.runtime.leaderelection").bind(lease=config.name, identity=config.identity)
        MASTER_STATUS.labels(config.name).set(0)

    @property
    def is_leader(self) -> bool:
        """Leading, and the last successful renewal is younger than the renew deadline (checked at each call)."""
        return self._leader and self._clock.now() < self._renewed_at + self.config.renew_deadline

    def check_leading(self) -> None:
        """Raise LeadershipLostError unless `is_leader`; a lapsed deadline also steps down here and now."""
        if self.is_leader:
            return
        if self._leader:
            self._step_down("renew deadline passed since the last successful renewal")
        raise LeadershipLostError(f"not leading lease {self.config.namespace}/{self.config.name}")

    async def acquire(self) -> None:
        """Try every retry period (jittered) until this replica leads; cancel the task to give up."""
        self._log.info("attempting to acquire leader lease")
        while not await self._try_acquire_or_renew():
            await self._clock.sleep(self.config.retry_period * (1 + self._rng.random() * JITTER_FACTOR))
        self._set_leader(True)
        self._log.info("successfully acquired lease")

    async def hold(self) -> None:
        """Renew every retry period until the task is cancelled.

        Raises LeadershipLostError, with `is_leader` already false, when no renewal succeeds within the renew
        deadline or another replica holds the Lease.
        """
        while True:
            self.check_leading()
            await self._clock.sleep(self.config.retry_period)
            self.check_leading()  # a pause outlived the deadline: no attempt, so no write
            await self._renew()

    async def _renew(self) -> None:
        """Attempt until one renewal succeeds; raise LeadershipLostError when leadership lapses first.

        The attempts, transport retries included, race the deadline on the injected clock and are cancelled
        when it comes, so no request outlives leadership.
        """
        remaining = self._renewed_at + self.config.renew_deadline - self._clock.now()
        attempts = asyncio.ensure_future(self._renew_attempts())
        expiry = asyncio.ensure_future(self._clock.sleep(remaining))
        waiters = (attempts, expiry)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if attempts.done():
                attempts.result()  # another holder: LeadershipLostError
                return
            # Stepped down before anything else runs; the cancelled attempt is awaited only afterwards.
            self._step_down("failed to renew lease before the renew deadline")
            raise LeadershipLostError(f"lost lease {self.config.namespace}/{self.config.name}")
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _renew_attempts(self) -> None:
        while not await self._try_acquire_or_renew():
            await self._clock.sleep(self.config.retry_period)

    async def release(self) -> None:
        """Give the Lease up (holder cleared, duration 1 s) if held; failures are logged, not raised."""
        if not self._leader or self._observed is None:
            return
        self._set_leader(False)
        observed: dict[str, Any] | None = self._observed
        # A renew cancelled by the stop may have reached the server after all, leaving our record one version
        # behind: on a conflict, read the Lease again and release it if it is still ours.
        for _ in range(2):
            assert observed is not None
            lease = copy.deepcopy(observed)
            now = micro_time(self._clock.wall())
            spec = lease.setdefault("spec", {})
            spec.pop("holderIdentity", None)
            spec.update({"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now})
            try:
                await self._client.update(LEASES, lease, request_timeout=self.config.request_timeout)
                self._log.info("released lease")
                return
            except ApiError as exc:
                if exc.status != 409:
                    self._log.info("failed to release lease", error=str(exc))
                    return
                conflict = exc
            try:
                observed = await self._client.get(
                    LEASES, self.config.name, self.config.namespace, request_timeout=self.config.request_timeout
                )
            except ApiError as exc:
                self._log.info("failed to release lease", error=str(exc))
                return
            if not self._holds(observed):
                return  # someone else holds it already: nothing to give up
        self._log.info("failed to release lease", error=str(conflict))

    def _set_leader(self, leading: bool) -> None:
        self._leader = leading
        MASTER_STATUS.labels(self.config.name).set(1 if leading else 0)

    def _step_down(self, why: str) -> None:
        self._set_leader(False)
        self._log.error("stopped leading", reason=why)
        if self._on_stopped_leading is not None:
            self._on_stopped_leading()

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica now holds the Lease. Raises LeadershipLostError when a leader
        finds another holder."""
        started = self._clock.now()
        if await self._attempt():
            self._renewed_at = started
            return True
        return False

    async def _attempt(self) -> bool:
        observed = self._observed
        if self._leader and observed is not None and self._holds(observed):
            # Fast path: renew from the record we wrote last, no read. Only from our own record: after seeing
            # another holder we must never write over it without the expiry check below.
            if await self._write(self._next_lease(observed)):
                return True
            SLOWPATH_TOTAL.labels(self.config.name).inc()
        try:
            current = await self._client.get(
                LEASES, self.config.name, self.config.namespace, request_timeout=self.config.request_timeout
            )
        except NotFound:
            return await self._create()
        except ApiError as exc:
            self._log.info("failed to get lease", error=str(exc))
            return False
        self._observe(current)
        if self._leader and not self._holds(current):
            holder = (current.get("spec") or {}).get("holderIdentity")
            self._step_down(f"the Lease is held by {holder or 'nobody'}")
            raise LeadershipLostError(f"lease {self.config.namespace}/{self.config.name} taken by {holder}")
        if self._held_by_other(current):
            return False
        return await self._write(self._next_lease(current))

    def _holds(self, lease: dict[str, Any]) -> bool:
        return bool((lease.get("spec") or {}).get("holderIdentity") == self.config.identity)

    def _held_by_other(self, lease: dict[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if not holder or holder == self.config.identity:
            return False
        duration = spec.get("leaseDurationSeconds") or self.config.lease_duration
        return self._observed_time + float(duration) > self._clock.now()

    def _observe(self, lease: dict[str, Any]) -> None:
        if self._observed is None or self._observed.get("spec") != lease.get("spec"):
            self._observed_time = self._clock.now()
        self._observed = lease

    def _next_lease(self, current: dict[str, Any]) -> dict[str, Any]:
        lease = copy.deepcopy(current)
        spec = lease.setdefault("spec", {})
        now = micro_time(self._clock.wall())
        if spec.get("holderIdentity") != self.config.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if spec.get("holderIdentity") else 0)
        spec.update(
            holderIdentity=self.config.identity,
            leaseDurationSeconds=int(self.config.lease_duration),
            renewTime=now,
        )
        return lease

    async def _write(self, lease: dict[str, Any]) -> bool:
        if self._leader and not self.is_leader:
            return False  # lapsed while this attempt ran: a renewal now would outlive leadership
        try:
            written = await self._client.update(LEASES, lease, request_timeout=self.config.request_timeout)
        except ApiError as exc:
            self._log.debug("failed to update lease", error=str(exc))
            return False
        self._observe(written)
        return True

    async def _create(self) -> bool:
        now = micro_time(self._clock.wall())
        lease = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self._client.create(LEASES, lease, request_timeout=self.config.request_timeout)
        except ApiError as exc:
            self._log.info("failed to create lease", error=str(exc))
            return False
        self._observe(created)
        return True
