"""Holding a request briefly behind another of its prefix, for engines that reuse a cached prompt serially.

llama.cpp keeps a prompt in the slot that computed it, or restores it from its host cache into one slot, moving it
out of the cache: a second request of the same prefix sent while the first runs finds no copy and prefills the
whole prompt again, wherever it goes, and where it goes it pushes another prefix out of the cache. Waiting for the
first to end costs its remaining time; recomputing costs the prompt's whole prefill. So, for an engine whose reuse
is serial (`engines.PromptReuse.SERIAL`), a request whose pick is already serving an attempt of the request's
prefix waits until that attempt ends, at most the hold deadline, and is then scheduled again. So does a request
scheduled away from its prefix's home (`homes.PrefixHomes`; the home was full, over the request bound) while the
home serves other attempts: once one of them ends, the home has a slot again, and the request finds its prompt
there instead of prefilling it elsewhere. Its prompt's whole prefill elsewhere costs the deadline; waiting for the
home costs the rest of a running attempt, which is less as long as the wait stays within the deadline: a request
leaves its home only when the home would keep it waiting longer than recomputing takes.

The deadline is what recomputing costs, learned from the engines' own answers: per model, the mean time of an
attempt that found little of its prompt cached, less that of one that found most of it (exponentially weighted,
ALPHA; DEFAULT_HOLD until both are known), times one plus the requests the pick is serving, clamped to
[MIN_HOLD, MAX_HOLD]. An engine prefills a prompt in the batch it decodes its running requests in, so a recompute
there delays each of them about as long as it delays the request itself: not waiting costs the prefill once for the
request and once for every request it shares the engine with. Waiting longer than that is worse than recomputing
at once.

Each wait is told to `waited(model, where, outcome, seconds)` (a metric): where it waited (PREFIX, behind an
attempt of its prefix; HOME, for a slot at its home) and how it ended (RELEASED, an attempt there ended; EXPIRED,
the deadline passed first, so the request recomputes its prompt).

A prefix is the request's ring key (`prefix.RoutingKey.ring`): a system prompt's requests, a conversation's turns.
An attempt that ends releases one waiter at its endpoint, oldest first: one behind its prefix, else one waiting for
a slot at its home. A request is held at most twice (`scheduler.MAX_HOLDS`): for a slot at its home, then, when
its prefix is still being served there, behind that attempt.
Memory: at most TRACKED_ATTEMPTS attempts followed (the oldest let go past that), one future per waiting request,
one pair of means per model (at most MAX_MODELS).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from llmaz.gateway.routing.prefix import RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import Plugin, PromptUsage, Request

DEFAULT_HOLD: Final = 1.0
MIN_HOLD: Final = 0.05
MAX_HOLD: Final = 10.0
ALPHA: Final = 0.2
# "Little" and "most" of a prompt cached: the attempts whose times tell what a recompute costs.
MISS_SHARE: Final = 0.25
HIT_SHARE: Final = 0.75
MAX_MODELS: Final = 1024
# Attempts followed at once: the gateway's default bound on client connections.
TRACKED_ATTEMPTS: Final = 4096

PREFIX: Final = "prefix"
HOME: Final = "home"
RELEASED: Final = "released"
EXPIRED: Final = "expired"

_K = TypeVar("_K")


@dataclass(slots=True)
class _Means:
    miss: float | None = None
    hit: float | None = None

    def add(self, hit: bool, seconds: float) -> None:
        old = self.hit if hit else self.miss
        new = seconds if old is None else old + ALPHA * (seconds - old)
        if hit:
            self.hit = new
        else:
            self.miss = new


class PrefixHolds(Plugin):
    """Attempts in flight per (endpoint, prefix), and the requests waiting behind them (see the module docstring)."""

    name = "prefix-holds"

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        home_of: Callable[[RoutingKey], Endpoint | None] | None = None,
        waited: Callable[[str, str, str, float], None] | None = None,
    ) -> None:
        """`home_of(key)`: the home of a request's prefix (`homes.PrefixHomes.home_of`), if it has one;
        `waited(model, where, outcome, seconds)`: told of each wait (module docstring)."""
        self._clock = clock
        self._home_of = home_of
        self._waited = waited
        self._busy: dict[tuple[Endpoint, int], int] = {}
        self._active: dict[Endpoint, int] = {}
        """Attempts in flight per endpoint, every prefix together."""
        self._waiting: dict[tuple[Endpoint, int], deque[asyncio.Future[None]]] = {}
        """Requests waiting behind an attempt of their prefix at an endpoint."""
        self._homeward: dict[Endpoint, deque[asyncio.Future[None]]] = {}
        """Requests waiting for a slot at their prefix's home."""
        # Attempts in flight, oldest first: their (endpoint, prefix) and when they were sent.
        self._open: OrderedDict[tuple[int, Endpoint], tuple[tuple[Endpoint, int], float]] = OrderedDict()
        self._means: OrderedDict[str, _Means] = OrderedDict()

    def busy(self, request: Request, endpoint: Endpoint) -> bool:
        """Whether `endpoint` is serving an attempt of the request's prefix."""
        return request.key is not None and (endpoint, request.key.ring) in self._busy

    def deadline(self, model: str, sharing: int = 0) -> float:
        """How long a request of `model` may wait: what recomputing costs, for the request and for the `sharing`
        requests its pick serves (module docstring)."""
        learned = self._learned(model)
        recompute = DEFAULT_HOLD if learned is None else learned[0] - learned[1]
        return min(MAX_HOLD, max(MIN_HOLD, recompute * (1 + max(0, sharing))))

    def _learned(self, model: str) -> tuple[float, float] | None:
        """The mean times of `model`'s attempts that missed and that hit its cached prompt, once both are known."""
        means = self._means.get(model)
        if means is None or means.miss is None or means.hit is None:
            return None
        return means.miss, means.hit

    def queue_allowance(self, request: Request, endpoint: Endpoint, slots: int) -> int:
        """How many requests may wait at `endpoint`, an engine of `slots` slots, every one busy, and still start
        sooner than recomputing their prompt elsewhere: the n-th waits for n attempts to end, one every attempt's
        time over `slots` (a cached prompt's attempt, learned per model), so n x hit / slots <= what recomputing
        costs. Only at the home of the request's prefix, where its prompt is: anywhere else it is computed whole
        whether it waits or not. At most `slots` (a queue no longer than the engine is wide); 0 until both means
        are known."""
        key = request.key
        if key is None or self._home_of is None or self._home_of(key) != endpoint:
            return 0
        learned = self._learned(request.model)
        if learned is None or slots <= 0 or learned[1] <= 0:
            return 0
        miss, hit = learned
        return min(slots, int(min(MAX_HOLD, max(0.0, miss - hit)) * slots / hit))

    def behind(self, request: Request, endpoint: Endpoint) -> Endpoint | None:
        """Where the request would wait: `endpoint` while it serves the request's prefix; else the prefix's home,
        when the request was scheduled elsewhere (its home full) while the home serves attempts."""
        if request.key is None:
            return None
        if self.busy(request, endpoint):
            return endpoint
        return self._home_away(request, endpoint)

    async def wait(self, request: Request, endpoint: Endpoint, sharing: int = 0) -> bool:
        """Wait while the request's pick (`endpoint`, serving `sharing` requests) serves an attempt of its prefix, or
        its prefix's home, which the request was scheduled away from, serves attempts (`behind`), until one ends
        there or the deadline passes: whether it waited at all (False at once when there is nothing to wait
        behind)."""
        where = self.behind(request, endpoint)
        if where is None or request.key is None:
            return False
        deadline = self.deadline(request.model, sharing)
        started = self._clock()
        if where == endpoint:  # behind an attempt of its prefix there
            kind, released = PREFIX, await self._wait_in(self._waiting, (endpoint, request.key.ring), deadline)
        else:  # for a slot at its home
            kind, released = HOME, await self._wait_in(self._homeward, where, deadline)
        if self._waited is not None:
            self._waited(request.model, kind, RELEASED if released else EXPIRED, self._clock() - started)
        return True

    async def _wait_in(self, table: dict[_K, deque[asyncio.Future[None]]], slot: _K, deadline: float) -> bool:
        """Wait in `table[slot]` until released (`_end`) or `deadline` seconds pass: whether it was released."""
        queue = table.setdefault(slot, deque())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), deadline)
        except TimeoutError:
            return False
        else:
            return True
        finally:
            if not waiter.done():
                waiter.cancel()
            if waiter in queue:
                queue.remove(waiter)
            if not queue and table.get(slot) is queue:
                del table[slot]

    def _home_away(self, request: Request, endpoint: Endpoint) -> Endpoint | None:
        """The prefix's home, when the request was scheduled to another `endpoint` while the home, still one of its
        candidates, serves attempts."""
        key = request.key
        home = None if self._home_of is None or key is None else self._home_of(key)
        if home is None or home == endpoint or home not in request.candidates or home in request.excluded:
            return None
        return home if self._active.get(home, 0) > 0 else None

    def waiting(self, where: str | None = None) -> int:
        """Requests waiting behind a prefix (`where` PREFIX), for a slot at their home (HOME), or either (None), over
        every endpoint."""
        behind = sum(len(queue) for queue in self._waiting.values()) if where != HOME else 0
        homeward = sum(len(queue) for queue in self._homeward.values()) if where != PREFIX else 0
        return behind + homeward

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        if request.key is None:
            return
        slot = (endpoint, request.key.ring)
        attempt = (id(request), endpoint)
        self._end(attempt)
        self._busy[slot] = self._busy.get(slot, 0) + 1
        self._active[endpoint] = self._active.get(endpoint, 0) + 1
        self._open[attempt] = (slot, self._clock())
        while len(self._open) > TRACKED_ATTEMPTS:  # attempts that never end (`Scheduler.pick`) are let go
            self._end(next(iter(self._open)))

    def post_response(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None) -> None:
        ended = self._end((id(request), endpoint))
        if ended is not None and usage is not None:
            self._learn(request.model, usage, self._clock() - ended)

    def _end(self, attempt: tuple[int, Endpoint]) -> float | None:
        """The attempt no longer counts, and the oldest request waiting behind its prefix goes; when it was sent."""
        found = self._open.pop(attempt, None)
        if found is None:
            return None
        slot, started = found
        endpoint = slot[0]
        _decrement(self._busy, slot)
        _decrement(self._active, endpoint)
        if not _release(self._waiting.get(slot)):  # the freed slot goes to its prefix first, else to a homeward one
            _release(self._homeward.get(endpoint))
        return started

    def _learn(self, model: str, usage: PromptUsage, seconds: float) -> None:
        prompt, cached = usage.prompt_tokens, usage.cached_tokens
        if not isinstance(prompt, int) or not isinstance(cached, int) or prompt <= 0 or not 0 <= cached <= prompt:
            return
        share = cached / prompt
        if MISS_SHARE < share < HIT_SHARE:
            return
        means = self._means.get(model)
        if means is None:
            means = self._means[model] = _Means()
            while len(self._means) > MAX_MODELS:
                self._means.popitem(last=False)
        else:
            self._means.move_to_end(model)
        means.add(share >= HIT_SHARE, seconds)


def _decrement(counts: dict[_K, int], key: _K) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


def _release(queue: deque[asyncio.Future[None]] | None) -> bool:
    """Let the oldest waiter of `queue` go; whether one went."""
    while queue:
        waiter = queue.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return True
    return False
