"""The autoscaler's decisions for one Playground, pure: load samples in, a replica count out.

The load is the requests the Playground's ready endpoints hold, running plus waiting, summed, plus those flow
control holds for its model (see `autoscaler` for how it is read). Each tick gives `Scaler.decide` the time, the
current replica count, how many of them are ready (serve requests), the load (None when it is not known), and the
policy (`AutoscalePolicy`). The rules, as Knative's KPA has them:
- Two averages of the load: over the last `stableWindow` and over the last `panicWindow` seconds (over what has
  been seen, while less has). The wanted count of each is ceil(average / targetPerReplica).
- Panic: when the panic average reaches `panicThreshold` x the current capacity (ready replicas x target: as
  Knative counts ready pods, a replica still loading its model carries nothing yet; at least one), the count
  rises at once to the panic window's wanted count. Panic lasts until a whole stable window has passed since
  the load last reached the threshold (so at least a stable window after it began); while it lasts the count
  never falls: it is the highest of the current count, the highest panic count of this panic and the panic
  window's wanted count.
- Otherwise the stable window decides. Up: at once. Down: only when every count wanted in the last
  `scaleDownDelay` (the stable window's, or while panicking the panic's) was below the current count, and the
  history covers that delay (a new leader, or a Playground just seen, waits a whole delay before scaling down);
  then by one replica per decision.
- Bounds: never above maxReplicas, never below minReplicas, applied at once (a changed bound, or a Playground
  someone else scaled out of them). Zero only through scale to zero: a Playground at 0 that opted in
  (`llmaz.io/scale-to-zero-after`) stays there (a request wakes it); one that did not is raised to minReplicas.
- No load known (no ready endpoint, no signal from any): hold the current count within the bounds. The samples
  that were not known are left out of the averages; nothing is ever decided down on missing data.
Each decision says which window decided (`Window`).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from typing import TypeVar

from llmaz.apis.validation.autoscale import AutoscalePolicy

_T = TypeVar("_T")


class Window(enum.StrEnum):
    STABLE = "stable"
    """The stable window's average decided."""
    PANIC = "panic"
    """Panicking: the panic window's average decided, and the count does not fall."""
    NO_SIGNAL = "no-signal"
    """The load is not known: the count is held (within the bounds)."""
    ASLEEP = "asleep"
    """Scaled to zero, and opted in to scale to zero: left asleep until a request wakes it."""


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    current: int
    load: float | None
    """The load of the window that decided (its average), None when none was known."""
    window: Window

    @property
    def changes(self) -> bool:
        return self.desired != self.current


def wanted(load: float, target: float) -> int:
    """Replicas carrying `load` at `target` requests each."""
    return math.ceil(load / target - 1e-9) if load > 0 else 0


class Scaler:
    """The history of one Playground's load and decisions, and the decision rules (see the module docstring)."""

    def __init__(self) -> None:
        self._loads: deque[tuple[float, float]] = deque()  # (time, load) of the known samples
        self._needs: deque[tuple[float, int]] = deque()  # (time, the count the deciding window wanted)
        self._first_seen: float | None = None
        self._panic_since: float | None = None
        self._last_over: float = 0.0  # when the load last reached the panic threshold
        self._panic_peak = 0

    @property
    def panicking(self) -> bool:
        return self._panic_since is not None

    def decide(
        self,
        now: float,
        current: int,
        load: float | None,
        policy: AutoscalePolicy,
        scale_to_zero: bool,
        *,
        ready: int | None = None,
    ) -> Decision:
        """The count for now, given the current count, the replicas of it that are ready (None: all of them) and the
        load now (None: not known)."""
        if self._first_seen is None:
            self._first_seen = now
        if load is not None:
            self._loads.append((now, load))
        _drop_before(self._loads, now - max(policy.stable_window, policy.panic_window))
        _drop_before(self._needs, now - policy.scale_down_delay)
        if current == 0 and scale_to_zero:
            self._end_panic()
            return Decision(0, 0, load, Window.ASLEEP)
        stable_load = self._average(now, policy.stable_window)
        panic_load = self._average(now, policy.panic_window)
        if load is None or stable_load is None or panic_load is None:
            return Decision(_bounded(current, policy), current, None, Window.NO_SIGNAL)
        panic = wanted(panic_load, policy.target_per_replica)
        capacity = max(1, current if ready is None else min(ready, current)) * policy.target_per_replica
        if panic_load > 0 and panic_load >= policy.panic_threshold * capacity:
            self._last_over = now
            if self._panic_since is None:
                self._panic_since, self._panic_peak = now, 0
        elif self._panic_since is not None and now - self._last_over >= policy.stable_window:
            self._end_panic()
        if self._panic_since is not None:
            self._panic_peak = max(self._panic_peak, panic, current)
            self._needs.append((now, self._panic_peak))
            return Decision(_bounded(self._panic_peak, policy), current, panic_load, Window.PANIC)
        stable = wanted(stable_load, policy.target_per_replica)
        self._needs.append((now, stable))
        desired = stable if stable >= current else self._scale_down(now, current, policy)
        return Decision(_bounded(desired, policy), current, stable_load, Window.STABLE)

    def _scale_down(self, now: float, current: int, policy: AutoscalePolicy) -> int:
        """One fewer than `current` when fewer have been enough for the whole delay, else `current`."""
        seen_for = now - (self._first_seen if self._first_seen is not None else now)
        if seen_for < policy.scale_down_delay:
            return current
        needed = max(count for _, count in self._needs)
        return current - 1 if needed < current else current

    def _average(self, now: float, window: float) -> float | None:
        loads = [load for at, load in self._loads if at > now - window]
        return sum(loads) / len(loads) if loads else None

    def _end_panic(self) -> None:
        self._panic_since, self._panic_peak = None, 0


def _drop_before(samples: deque[tuple[float, _T]], oldest: float) -> None:
    while samples and samples[0][0] <= oldest:
        samples.popleft()


def _bounded(count: int, policy: AutoscalePolicy) -> int:
    return min(max(count, policy.min_replicas), policy.max_replicas)
