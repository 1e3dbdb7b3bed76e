"""The scheduler's scorers: each rates every candidate from 0 to 1 by one measure (`scheduler.Scorer`).

- `FewestInFlight` (balance): 1 / (1 + this replica's requests in flight to the endpoint); the fewest score highest
  and equal counts score equal. The least-outstanding strategy's one scorer.
- `Queue` (balance): 1 - load / room, at least 0; load is the engine's running + waiting or this replica's own,
  the larger (`scheduler.Load`), against the cycle's CHWBL bound (`filters.WithinBound`; without one, the largest
  load + 1), or the engine's slots when it says it has more (`scheduler.Load.room`). Scored against the bound,
  not the least loaded, one request more moves a score by a fraction.
- `FreeCapacity` (balance): 1 - the engine's utilisation (KV-cache use), clamped to [0, 1]; an engine that does
  not say counts load / bound. An engine of slots (llama.cpp) scores 1: its utilisation is its busy slots, the
  queue it is already scored by, and counting them twice would move a prompt off the engine holding it while a
  request there still starts sooner than a recompute elsewhere (`filters.WithinBound`).
- `PrefixMatch` (affinity): the longest chain of the request's blocks the endpoint was sent (`PrefixIndex`), over
  the request's blocks; 0 without a key. When no candidate holds any of them (a prefix new here), the first in
  the cycle's order (the home: the first on the ring within the bound) counts as a full match, so every gateway
  replica starts a prefix on the same engine. It records the request's blocks for the endpoint before each
  attempt (`pre_request`), and corrects the index from the engine's usage after it (`post_response`, below).

The correction. The index predicts what an engine holds; the engine may have evicted it since (its KV cache holds
less than the index, or it restarted). Before recording an attempt, `PrefixMatch` notes how many of its blocks the
index held for the endpoint (the prediction) and the stamp of the oldest of them (`PrefixIndex.recorded_at`).
When the attempt ends with the engine's `prompt_tokens` and `cached_tokens`, the cached tokens are turned into
blocks at the prompt's own rate, cached x blocks / prompt_tokens (blocks are characters, not tokens: the gateway
has no tokenizer). When that is clearly fewer than predicted (short by at least CORRECTION_MIN_BLOCKS and by
CORRECTION_SHARE of the prediction), the engine evicted a block the index holds; engines evict the least recently
used first, so everything sent to that endpoint before that block was sent is gone too: the index forgets it
(`PrefixIndex.forget_through`) and a request for those prefixes is no longer drawn to an engine that lost them.
The attempt's own blocks stay: they were recorded again before it, and the engine has just computed them.
- A prediction counts only when every attempt that recorded its blocks had ended before this one was sent: a
  burst of requests sharing a new prefix finds it recorded but not yet computed, which is no eviction.
- Nothing changes without both counts (engines that do not report cached tokens), for an attempt without a
  prediction, or for a key at MAX_BLOCKS whose cached tokens are not 0 (the key may stop before the prompt does,
  so its rate is not known).
- The other way round: an answer with clearly more cached than predicted (by CORRECTION_MIN_BLOCKS and by
  CORRECTION_SHARE of the prompt's blocks), at least half of the prompt, shows that the engine holds a prefix this
  replica did not send there (another gateway replica did). `found` is told, so the prefix's home can move there
  (`homes.PrefixHomes.adopt`). Any surplus of CORRECTION_MIN_BLOCKS or more raises the endpoint's learned capacity
  in the index (`PrefixIndex.grow`), which a correction lowered to what was left.
- A correction never raises: it runs on the data path. At most TRACKED_ATTEMPTS attempts are followed; the
  oldest are dropped (never corrected) past that, e.g. attempts of `Scheduler.pick` that never end.

A scorer changes no state; only its hooks do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from llmaz.gateway.routing.prefix import MAX_BLOCKS
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import AFFINITY, BALANCE, Cycle, PromptUsage, Request, Scorer
from llmaz.runtime.log import get_logger

# "Clearly fewer": the engine's cached blocks fall short of the prediction by both. Two blocks absorb an engine's
# own granularity (vLLM caches whole 16-token blocks and never the prompt's last token); a quarter absorbs how
# unevenly a prompt's characters turn into tokens (the rate is the whole prompt's).
CORRECTION_MIN_BLOCKS: Final = 2
CORRECTION_SHARE: Final = 0.25
# Attempts followed at once: the gateway's default bound on client connections (each holds its request's key).
TRACKED_ATTEMPTS: Final = 4096

_LOG = get_logger("llmaz.gateway.routing")


class FewestInFlight(Scorer):
    name = "fewest-in-flight"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        return [1.0 / (1 + cycle.outstanding(i)) for i in positions]


def _bound(cycle: Cycle, positions: list[int]) -> int:
    return cycle.bound if cycle.bound is not None else 1 + max(cycle.load(i).requests for i in positions)


class Queue(Scorer):
    name = "queue"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        bound = _bound(cycle, positions)
        return [max(0.0, 1.0 - cycle.load(i).requests / cycle.load(i).room(bound)) for i in positions]


class FreeCapacity(Scorer):
    name = "free-capacity"
    category = BALANCE

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        bound = _bound(cycle, positions)
        scores = []
        for i in positions:
            load = cycle.load(i)
            if load.slots is not None:
                scores.append(1.0)
                continue
            used = load.utilisation if load.utilisation is not None else load.requests / bound
            scores.append(1.0 - min(1.0, max(0.0, used)))
        return scores


class BlockIndex(Protocol):
    """Per endpoint, the prompt blocks sent there (`picker.PrefixIndex`)."""

    @property
    def stamp(self) -> int: ...

    def match(self, endpoint: Endpoint, blocks: Sequence[int]) -> int: ...

    def record(self, endpoint: Endpoint, blocks: Sequence[int]) -> None: ...

    def recorded_at(self, endpoint: Endpoint, block: int) -> int | None: ...

    def forget_through(self, endpoint: Endpoint, stamp: int) -> int: ...

    def grow(self, endpoint: Endpoint, blocks: int) -> None: ...


@dataclass(frozen=True, slots=True)
class _Sent:
    """An attempt in flight: its request (held, so its id stays its own), its record's stamp, the prediction."""

    request: Request
    stamp: int
    predicted: int
    """The request's blocks the index held for the endpoint before the attempt was recorded."""
    oldest: int | None
    """The stamp of the oldest of them, when every attempt that recorded them had ended; else None."""


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def confirmed_blocks(usage: PromptUsage, blocks: int) -> int | None:
    """How many of a request's `blocks` the engine found cached, at the prompt's rate of tokens per block; None
    when its usage does not tell (a count missing or out of range, or a key that may stop before the prompt)."""
    prompt, cached = _count(usage.prompt_tokens), _count(usage.cached_tokens)
    if prompt is None or cached is None or not prompt or cached > prompt or not blocks:
        return None
    if cached == 0:
        return 0
    if blocks >= MAX_BLOCKS:
        return None
    return cached * blocks // prompt


class PrefixMatch(Scorer):
    name = "prefix-match"
    category = AFFINITY
    needs_key = True

    def __init__(
        self,
        index: BlockIndex,
        corrected: Callable[[str], None] | None = None,
        found: Callable[[Request, Endpoint], None] | None = None,
    ) -> None:
        """`corrected(model)`: called after each correction of the index (a metric). `found(request, endpoint)`:
        called when the engine at `endpoint` had clearly more of the request's prompt cached than the index
        predicted, at least half of it (another gateway replica sent the prefix there)."""
        self.index = index
        self.corrected = corrected
        self.found = found
        self.corrections = 0
        """Corrections made so far."""
        self._sent: OrderedDict[tuple[int, Endpoint], _Sent] = OrderedDict()
        # Per endpoint, the stamps of its attempts in flight, oldest first (stamps grow as attempts are recorded).
        self._open: dict[Endpoint, OrderedDict[int, int]] = {}

    def score(self, cycle: Cycle, positions: list[int]) -> list[float]:
        key = cycle.request.key
        if key is None or not positions:
            return [0.0] * len(positions)
        blocks = key.blocks
        matches = [self.index.match(cycle.candidates[i], blocks) / len(blocks) if blocks else 0.0 for i in positions]
        if not any(matches):  # a prefix new here: the home (the first in order) starts it
            matches[0] = 1.0
        return matches

    @property
    def followed(self) -> int:
        """Attempts recorded and not ended yet, as far as they are followed (at most TRACKED_ATTEMPTS)."""
        return len(self._sent)

    def pre_request(self, request: Request, endpoint: Endpoint) -> None:
        if request.key is None:
            return
        blocks = request.key.blocks
        predicted = self.index.match(endpoint, blocks)
        oldest = self.index.recorded_at(endpoint, blocks[predicted - 1]) if predicted else None
        opened = self._open.get(endpoint)
        if oldest is not None and opened and oldest >= next(iter(opened.values())):
            oldest = None  # recorded by an attempt still in flight: maybe not computed yet
        self.index.record(endpoint, blocks)
        self._track((id(request), endpoint), _Sent(request, self.index.stamp, predicted, oldest))

    def post_response(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None) -> None:
        try:
            self._correct(request, endpoint, usage)
        except Exception as exc:  # the data path goes on; the index is only less accurate
            _LOG.warning("prefix index correction failed", error=type(exc).__name__)

    def _track(self, attempt: tuple[int, Endpoint], sent: _Sent) -> None:
        self._untrack(attempt)
        self._sent[attempt] = sent
        self._open.setdefault(attempt[1], OrderedDict())[attempt[0]] = sent.stamp
        while len(self._sent) > TRACKED_ATTEMPTS:
            self._untrack(next(iter(self._sent)))

    def _untrack(self, attempt: tuple[int, Endpoint]) -> _Sent | None:
        sent = self._sent.pop(attempt, None)
        if sent is not None:
            opened = self._open[attempt[1]]
            del opened[attempt[0]]
            if not opened:
                del self._open[attempt[1]]
        return sent

    def _correct(self, request: Request, endpoint: Endpoint, usage: PromptUsage | None) -> None:
        sent = self._untrack((id(request), endpoint))
        if sent is None or usage is None or request.key is None:
            return
        blocks = len(request.key.blocks)
        confirmed = confirmed_blocks(usage, blocks)
        if confirmed is None:
            return
        surplus = confirmed - sent.predicted
        if surplus >= CORRECTION_MIN_BLOCKS:  # the engine holds more than the index keeps for it
            self.index.grow(endpoint, surplus)
        if (
            self.found is not None
            and 2 * confirmed >= blocks
            and surplus >= CORRECTION_MIN_BLOCKS
            and surplus >= CORRECTION_SHARE * blocks
        ):
            self.found(request, endpoint)
        if sent.oldest is None:
            return
        shortfall = sent.predicted - confirmed
        if shortfall < CORRECTION_MIN_BLOCKS or shortfall < CORRECTION_SHARE * sent.predicted:
            return
        self.index.forget_through(endpoint, sent.oldest)
        self.corrections += 1
        if self.corrected is not None:
            self.corrected(request.model)
