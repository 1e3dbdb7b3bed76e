"""Per-key limits: requests per minute, tokens per minute, concurrent streams (docs/tenancy.md).

- Requests and tokens per minute are token buckets holding up to one minute's budget and refilled continuously at
  budget/60 per second: a key idle for a minute may spend its whole minute at once, and then its rate.
- Tokens are reserved before a request is sent, settled after: the reservation is the tokens the request may
  generate (`max_tokens`, else `max_completion_tokens`, else `max_output_tokens`, else the configured default)
  plus an estimate of its prompt, a quarter of its body's bytes. A request is admitted only when the bucket holds
  its whole reservation (or, for a reservation above the minute's budget, a full bucket). When the engine's
  answer reports usage, the bucket is given back what was reserved and not used (or charged what was used beyond
  it, and may then go below zero); an answer without usage keeps the reservation spent, and a request no engine
  answered gets it all back. So the tokens spent in a minute exceed the budget by at most one request's excess
  over its reservation.
- Streams: requests with `"stream": true` in flight at once.
- A refusal takes nothing: a request refused for tokens spends no request of the per-minute count, and the
  reverse. It says which limit and when to retry (`Retry-After`, whole seconds until the bucket holds enough).
- Limits are kept per key source (its Secret): rotating a Secret's key keeps the budget spent; changing a limit
  starts that limit afresh. The state of a Secret is dropped with it (`forget`), so memory is bounded by the
  Secrets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from llmaz.gateway.proxy.keys import KeyPolicy
from llmaz.gateway.proxy.usage import Usage

BYTES_PER_TOKEN = 4
DEFAULT_MAX_TOKENS_RESERVATION = 1024
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class Bucket:
    """A token bucket of `per_minute`, full at first."""

    def __init__(self, per_minute: int, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._updated = now

    def _refill(self, now: float) -> None:
        if now > self._updated:
            self.level = min(self.capacity, self.level + (now - self._updated) * self.rate)
        self._updated = max(self._updated, now)

    def wait(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds `amount` (at most its capacity); 0 when it does now."""
        self._refill(now)
        missing = min(amount, self.capacity) - self.level
        return 0.0 if missing <= 0 else missing / self.rate

    def adjust(self, amount: float, now: float) -> None:
        """Take `amount` (give back when negative); never above capacity, possibly below zero."""
        self._refill(now)
        self.level = min(self.capacity, self.level - amount)


class LimitReachedError(Exception):
    def __init__(self, limit: str, retry_after: int, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        """`requests` (per minute), `tokens` (per minute) or `streams` (concurrent)."""
        self.retry_after = retry_after
        """Whole seconds until the limit may admit the request (at least 1)."""
        self.detail = detail


@dataclass(slots=True)
class _KeyState:
    policy: KeyPolicy
    requests: Bucket | None
    tokens: Bucket | None
    streams: int = 0


@dataclass(slots=True)
class Admission:
    """One admitted request's hold on its key's limits: `finish` settles its tokens and frees its stream."""

    _limits: Limits | None
    _state: _KeyState | None
    reserved: int = 0
    stream: bool = False
    _done: bool = field(default=False)

    def finish(self, usage: Usage | None, answered: bool) -> None:
        """Settle: `usage` the engine reported (None: not known), `answered` whether an engine's answer was
        relayed at all. Idempotent."""
        if self._done or self._limits is None or self._state is None:
            return
        self._done = True
        state = self._state
        if self.stream:
            state.streams -= 1
        if state.tokens is not None:
            if usage is not None:
                used = usage.prompt_tokens + usage.completion_tokens
                state.tokens.adjust(used - self.reserved, self._limits.clock())
            elif not answered:
                state.tokens.adjust(-self.reserved, self._limits.clock())


UNLIMITED = Admission(None, None)


class Limits:
    def __init__(self, clock: Callable[[], float]) -> None:
        """`clock`: monotonic seconds."""
        self.clock = clock
        self._states: dict[str, _KeyState] = {}

    def forget(self, source: str) -> None:
        self._states.pop(source, None)

    def _state(self, policy: KeyPolicy) -> _KeyState:
        """The state of the key's source; a limit whose value changed (or is new) starts afresh."""
        now = self.clock()
        state = self._states.get(policy.source)
        if state is None:
            state = self._states[policy.source] = _KeyState(policy, _bucket(policy.requests_per_minute, now), None)
            state.tokens = _bucket(policy.tokens_per_minute, now)
        if state.policy.requests_per_minute != policy.requests_per_minute:
            state.requests = _bucket(policy.requests_per_minute, now)
        if state.policy.tokens_per_minute != policy.tokens_per_minute:
            state.tokens = _bucket(policy.tokens_per_minute, now)
        state.policy = policy
        return state

    def admit(self, policy: KeyPolicy, reservation: int, stream: bool) -> Admission:
        """Hold the request on `policy`'s limits, or raise LimitReachedError (taking nothing)."""
        if not policy.limited:
            return UNLIMITED
        state = self._state(policy)
        now = self.clock()
        if stream and policy.max_streams is not None and state.streams >= policy.max_streams:
            raise LimitReachedError("streams", 1, f"{state.streams} streams in flight, the key's max-streams")
        if state.requests is not None and (wait := state.requests.wait(1, now)) > 0:
            raise LimitReachedError("requests", _seconds(wait), "requests-per-minute spent")
        if state.tokens is not None and (wait := state.tokens.wait(reservation, now)) > 0:
            raise LimitReachedError("tokens", _seconds(wait), f"tokens-per-minute: {reservation} to reserve")
        if state.requests is not None:
            state.requests.adjust(1, now)
        if state.tokens is not None:
            state.tokens.adjust(reservation, now)
        if stream:
            state.streams += 1
        return Admission(self, state, reservation, stream)


def _bucket(per_minute: int | None, now: float) -> Bucket | None:
    return None if per_minute is None else Bucket(per_minute, now)


def _seconds(wait: float) -> int:
    return max(1, math.ceil(wait - 1e-9))


def max_tokens_of(document: dict[str, object]) -> tuple[str, int] | None:
    """The field and value of the tokens a request asks to generate at most, when it asks (an integer >= 0)."""
    for name in MAX_TOKENS_FIELDS:
        value = document.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return name, value
    return None


def reservation_of(body: bytes, document: dict[str, object], default_max_tokens: int) -> int:
    """Tokens reserved for a request: what it may generate, plus its prompt estimated from its body's size."""
    asked = max_tokens_of(document)
    generated = default_max_tokens if asked is None else asked[1]
    return generated + math.ceil(len(body) / BYTES_PER_TOKEN)
