"""Flow control of one gateway replica: a request for a saturated model waits in the model's queue (`queue`) until
the model has room (`saturation`), by band, then fairly between tenants.

    try_admit(model, ...) -> Ticket | None    at once, when the model's queue is empty and it has room
    await wait(model, ...) -> Ticket          queued; ShedError when shed (queue full) or expired (TTL); a
                                              request held while its model gets a replica waits here too,
                                              with its own TTL (`ttl`)
    held(model) -> int                        requests of the model waiting here or given their turn and not
                                              yet sent: load the engines do not see yet (the autoscaler's)
    ticket.sent()                             the request was sent to an engine (counted in flight there)
    ticket.finish(tokens)                     it ended: its tenant's count settled, the next waiters dispatched
    refresh()                                 new engine signals: every queue's waiters dispatched as room allows

Invariants:
- A request with room for its band is never held: with nothing queued and room, `try_admit` answers at once;
  nothing is awaited, scheduled or counted but a pending grant.
- A reserve (`reserved_slots`): while requests of `reserved_band` or above come for a model (the last within
  `RESERVE_KEPT_FOR`), lower bands leave that many slots of each engine free and take nothing into an engine's own
  queue (`saturation`), so a higher band's request finds a slot at once instead of the rest of a running one.
- No request overtakes a queued one: with waiters queued, a new request queues too, and waiters leave in the
  queue's order (band, then tenant fairness); a band held back by the reserve holds back the bands below it.
- Dispatches never outrun the room: a waiter given its turn counts as a pending grant until it is sent (and so
  counted in flight at an endpoint) or ends, and the room is the model's free slots less the pending grants.
- Room is looked for when a request of the model ends, when a waiter arrives, at `refresh` (each cycle of the
  engine signals), and when a waiter's TTL ends (a timer per model, at the oldest waiter's deadline).
- Nothing is lost: every queued request ends dispatched, shed (queue full: 429), expired (TTL: 429 while the model
  has endpoints, 503 when it has none), or removed when its client goes away (its task cancelled).
- A model with no endpoint has no room: its waiters (requests held while it wakes from zero or its replicas start)
  wait until it has endpoints, then leave in the queue's order like any others; whoever sees the endpoints come
  calls `pump` (the gateway does, on routing's event).
- Memory: a model's state exists only while it has waiters or pending grants.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from llmaz.gateway.flow.priority import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY, PriorityError, parse_priority
from llmaz.gateway.flow.queue import FlowQueue, Waiter
from llmaz.gateway.flow.saturation import Saturation, SaturationOptions
from llmaz.gateway.routing.routes import Endpoint

DEFAULT_QUEUE_SIZE = 1000
DEFAULT_QUEUE_TTL = 60.0
DEFAULT_RESERVED_BAND = DEFAULT_PRIORITY + 1
# A reserve is kept this long after the model's last request of a band that may use it, and no longer: with no
# such request about, lower bands use every slot.
RESERVE_KEPT_FOR = 30.0
# Seconds a shed client is told to wait before trying again.
RETRY_AFTER = 5

QUEUE_FULL: Final = "queue_full"
"""Shed from a full queue: the newest of the lowest band."""
QUEUE_TTL: Final = "queue_ttl"
"""Waited the TTL while the model stayed saturated."""
NO_ENDPOINT: Final = "no_endpoint"
"""Waited the TTL while the model had no endpoint."""


def parse_reserved_band(text: str) -> int:
    """A `reserved_band` flag value: a band above the lowest (every band using the reserve would reserve nothing)."""
    band = parse_priority(text)
    if band == MIN_PRIORITY:
        raise PriorityError(f"must be a band from {MIN_PRIORITY + 1} to {MAX_PRIORITY}, got {band}")
    return band


@dataclass(frozen=True, slots=True)
class FlowOptions:
    enabled: bool = False
    """Queue the requests of saturated models (and hold those of models getting a replica in the same queues). Off
    by default until a tenancy benchmark on a real node has measured it."""
    saturation: SaturationOptions = field(default_factory=SaturationOptions)
    """When an endpoint is full (`saturation`)."""
    queue_size: int = DEFAULT_QUEUE_SIZE
    """Requests a model's queue holds, every band together. Default 1000."""
    queue_ttl: float = DEFAULT_QUEUE_TTL
    """Seconds a request may wait in its model's queue. Default 60."""
    reserved_slots: int = 0
    """Slots of each endpoint's engine kept free for requests of `reserved_band` and above, while such requests
    come (`RESERVE_KEPT_FOR`): lower bands leave them free and queue here, never inside an engine. Default 0: no
    reserve."""
    reserved_band: int = DEFAULT_RESERVED_BAND
    """The lowest band that may use the reserved slots. Default 6, the first above the default band."""

    def __post_init__(self) -> None:
        if self.reserved_slots < 0:
            raise ValueError(f"reserved_slots must be 0 or more, got {self.reserved_slots}")
        if not MIN_PRIORITY < self.reserved_band <= MAX_PRIORITY:
            raise ValueError(
                f"reserved_band must be a band from {MIN_PRIORITY + 1} to {MAX_PRIORITY}, got {self.reserved_band}"
            )


class ShedError(Exception):
    """A queued request refused: `reason` is QUEUE_FULL, QUEUE_TTL or NO_ENDPOINT."""

    def __init__(self, reason: str, waited: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.waited = waited
        self.retry_after = RETRY_AFTER


class FlowMetrics(Protocol):
    """Where flow control reports (`GatewayMetrics`)."""

    def flow_queued(self, model: str, band: int, tenant: str, change: int) -> None:
        """A model's queue depth for (band, tenant) changed by `change`."""
        ...

    def flow_waited(self, model: str, band: int, seconds: float) -> None:
        """A request was dispatched after waiting `seconds` (0 when it was not queued)."""
        ...

    def flow_shed(self, model: str, band: int, tenant: str, reason: str) -> None:
        """A request was shed, or expired in the queue, for `reason`."""
        ...


class _Unreported:
    def flow_queued(self, model: str, band: int, tenant: str, change: int) -> None:
        pass

    def flow_waited(self, model: str, band: int, seconds: float) -> None:
        pass

    def flow_shed(self, model: str, band: int, tenant: str, reason: str) -> None:
        pass


class Ticket:
    """One admitted request's turn: `sent` once it is counted in flight at an endpoint, `finish` when it ends."""

    __slots__ = ("_control", "_finished", "_sent", "band", "cost", "model", "queued", "tenant", "waited")

    def __init__(
        self, control: FlowControl, model: str, band: int, tenant: str, cost: int, waited: float | None = None
    ) -> None:
        self._control = control
        self.model, self.band, self.tenant, self.cost = model, band, tenant, cost
        self.queued = waited is not None
        """Whether it waited in the queue."""
        self.waited = waited or 0.0
        """Seconds it waited in the queue; 0 when it did not queue."""
        self._sent = self._finished = False

    def sent(self) -> None:
        """The request is counted in flight at an endpoint now: it no longer holds a pending grant. Idempotent."""
        if not self._sent:
            self._sent = True
            self._control._sent(self.model)

    def finish(self, used_tokens: int | None) -> None:
        """The request ended; `used_tokens` what the engine reported it used, when it did. Idempotent."""
        if not self._finished:
            self._finished = True
            self.sent()
            self._control._finished(self, used_tokens)


class _Model:
    __slots__ = ("futures", "pending", "queue", "timer", "timer_at")

    def __init__(self, queue: FlowQueue) -> None:
        self.queue = queue
        self.pending = 0
        """Waiters given their turn (or admitted at once) and not yet sent."""
        self.futures: dict[Waiter, asyncio.Future[None]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None


class FlowControl:
    def __init__(
        self,
        endpoints_of: Callable[[str], list[Endpoint]],
        saturation: Saturation,
        options: FlowOptions,
        metrics: FlowMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`endpoints_of(model)`: the model's ready endpoints now; `clock`: monotonic seconds (the TTLs' time)."""
        if options.queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {options.queue_size}")
        if not options.queue_ttl > 0:
            raise ValueError(f"queue_ttl must be a positive number of seconds, got {options.queue_ttl}")
        self._endpoints_of = endpoints_of
        self.saturation = saturation
        self.options = options
        self._metrics: FlowMetrics = metrics or _Unreported()
        self._clock = clock
        self._models: dict[str, _Model] = {}
        self._reserved_seen: dict[str, float] = {}
        """Per model, when a request of a band that may use the reserve last came (only with a reserve)."""

    def queued(self, model: str) -> list[Waiter]:
        """The waiters of `model`, in the queue's order of bands (for tests and debugging)."""
        state = self._models.get(model)
        return [] if state is None else list(state.queue)

    def try_admit(self, model: str, band: int, tenant: str, cost: int) -> Ticket | None:
        """A ticket at once when `model` has nothing queued and room; None when the request must `wait`."""
        self._note(model, band)
        state = self._models.get(model)
        if state is not None and state.queue:
            return None
        pending = 0 if state is None else state.pending
        if self._free(model, band) - pending <= 0:
            return None
        self._state(model).pending += 1
        self._metrics.flow_waited(model, band, 0.0)
        return Ticket(self, model, band, tenant, cost)

    def held(self, model: str) -> int:
        """Requests of `model` held here: waiting in its queue, or given their turn and not yet sent."""
        state = self._models.get(model)
        return 0 if state is None else len(state.queue) + max(0, state.pending)

    async def wait(self, model: str, band: int, tenant: str, cost: int, ttl: float | None = None) -> Ticket:
        """Queue the request and wait for its turn; ShedError when it is shed or expires, after `ttl` seconds (the
        queue's TTL when None). A cancelled wait (the client went away) leaves the queue."""
        if ttl is not None and not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl}")
        self._note(model, band)
        state = self._state(model)
        waiter = Waiter(band, tenant, cost, self._clock(), ttl)
        shed = state.queue.push(waiter)
        if shed is waiter:
            self._metrics.flow_shed(model, band, tenant, QUEUE_FULL)
            self._forget_if_idle(model, state)
            raise ShedError(QUEUE_FULL, 0.0)
        self._metrics.flow_queued(model, band, tenant, 1)
        future = state.futures[waiter] = asyncio.get_running_loop().create_future()
        if shed is not None:
            self._refuse(model, state, shed, QUEUE_FULL)
        self.pump(model)
        try:
            await future
        except asyncio.CancelledError:
            if state.queue.remove(waiter):
                self._metrics.flow_queued(model, band, tenant, -1)
                state.futures.pop(waiter, None)
            elif future.done() and not future.cancelled() and future.exception() is None:
                state.pending -= 1  # given its turn, gone before it was sent: the turn goes to the next
                asyncio.get_running_loop().call_soon(self.pump, model)
            self._forget_if_idle(model, state)
            raise
        return Ticket(self, model, band, tenant, cost, self._clock() - waiter.arrived)

    def refresh(self) -> None:
        """Room may have freed anywhere (new engine signals): dispatch every queue's waiters it allows."""
        horizon = self._clock() - RESERVE_KEPT_FOR
        for model in [m for m, seen in self._reserved_seen.items() if seen < horizon]:
            del self._reserved_seen[model]  # lapsed: a model no longer asked for is not remembered
        for model in list(self._models):
            self.pump(model)

    def pump(self, model: str) -> None:
        """Expire `model`'s waiters past their TTL, then dispatch waiters while the model has room."""
        state = self._models.get(model)
        if state is None:
            return
        expired = state.queue.expire(self._clock())
        if expired:
            reason = QUEUE_TTL if self._endpoints_of(model) else NO_ENDPOINT
            for gone in expired:
                self._metrics.flow_queued(model, gone.band, gone.tenant, -1)
                self._refuse(model, state, gone, reason)
        rooms: dict[int, float] = {}  # by the reserve the band at the head of the queue keeps
        while (band := state.queue.top_band()) is not None:
            reserve = self._reserve(model, band)
            if reserve not in rooms:
                rooms[reserve] = self._free(model, band) - state.pending
            if rooms[reserve] <= 0:
                break
            waiter = state.queue.pop()
            assert waiter is not None
            self._metrics.flow_queued(model, waiter.band, waiter.tenant, -1)
            future = state.futures.pop(waiter)
            if future.done():  # cancelled: its client went away
                continue
            future.set_result(None)
            state.pending += 1
            for kept in rooms:
                rooms[kept] -= 1
            self._metrics.flow_waited(model, waiter.band, self._clock() - waiter.arrived)
        self._arm(model, state)
        self._forget_if_idle(model, state)

    # Internals

    def _free(self, model: str, band: int) -> float:
        return self.saturation.free_slots(self._endpoints_of(model), self._reserve(model, band))

    def _note(self, model: str, band: int) -> None:
        if self.options.reserved_slots > 0 and band >= self.options.reserved_band:
            self._reserved_seen[model] = self._clock()

    def _reserve(self, model: str, band: int) -> int:
        """The slots a request of `band` leaves free at each endpoint of `model` now."""
        opts = self.options
        if opts.reserved_slots <= 0 or band >= opts.reserved_band:
            return 0
        seen = self._reserved_seen.get(model)
        if seen is None:
            return 0
        if self._clock() - seen > RESERVE_KEPT_FOR:
            del self._reserved_seen[model]
            return 0
        return opts.reserved_slots

    def _state(self, model: str) -> _Model:
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _Model(FlowQueue(self.options.queue_size, self.options.queue_ttl))
        return state

    def _refuse(self, model: str, state: _Model, waiter: Waiter, reason: str) -> None:
        self._metrics.flow_shed(model, waiter.band, waiter.tenant, reason)
        future = state.futures.pop(waiter, None)
        if future is not None and not future.done():
            future.set_exception(ShedError(reason, self._clock() - waiter.arrived))

    def _arm(self, model: str, state: _Model) -> None:
        """A timer at the oldest waiter's deadline, so that it expires on time even when nothing else happens."""
        deadline = state.queue.next_deadline()
        if deadline == state.timer_at:
            return
        if state.timer is not None:
            state.timer.cancel()
        state.timer, state.timer_at = None, deadline
        if deadline is not None:
            delay = max(0.0, deadline - self._clock())
            state.timer = asyncio.get_running_loop().call_later(delay, self._due, model, state)

    def _due(self, model: str, state: _Model) -> None:
        """The timer of `model`'s oldest deadline fired (possibly a little early: it is armed again then)."""
        state.timer, state.timer_at = None, None
        self.pump(model)

    def _forget_if_idle(self, model: str, state: _Model) -> None:
        if not state.queue and state.pending <= 0 and not state.futures and self._models.get(model) is state:
            if state.timer is not None:
                state.timer.cancel()
            del self._models[model]

    def _sent(self, model: str) -> None:
        state = self._models.get(model)
        if state is not None:
            state.pending -= 1
            self._forget_if_idle(model, state)

    def _finished(self, ticket: Ticket, used_tokens: int | None) -> None:
        state = self._models.get(ticket.model)
        if state is None:
            return
        if used_tokens is not None:
            state.queue.settle(ticket.band, ticket.tenant, used_tokens - ticket.cost)
        self.pump(ticket.model)
