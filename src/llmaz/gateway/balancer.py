"""Fewest outstanding requests: send each request to the endpoint this gateway has the fewest requests on.

LLM requests vary in cost by orders of magnitude (a 5-token answer or a 4,000-token stream), so counting what
is still in flight tracks an engine's load far better than round robin. The counts are this replica's only;
several gateway replicas each balance their own share.

Invariants:
- `outstanding(e)` is the number of `acquire(e)` calls not yet matched by `release(e)`; endpoints with no
  outstanding request are not stored, so the table holds only busy endpoints whatever the churn.
- `pick` never returns an excluded endpoint (those already tried by a retry); among the least loaded of the
  rest it picks at random (the generator is injectable), so idle endpoints share the load instead of the
  first one in sort order taking every request that arrives while all are idle.
- Nothing awaits between a `pick` and the `acquire` that follows it (both are synchronous), so two concurrent
  requests cannot both see the same endpoint as idle.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from llmaz.gateway.routes import Endpoint


class LeastOutstanding:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._outstanding: dict[Endpoint, int] = {}

    def outstanding(self, endpoint: Endpoint) -> int:
        return self._outstanding.get(endpoint, 0)

    def pick(self, candidates: Sequence[Endpoint], exclude: Collection[Endpoint] = ()) -> Endpoint | None:
        """The least loaded candidate not in `exclude`, or None when none is left."""
        best: list[Endpoint] = []
        fewest = 0
        for endpoint in candidates:
            if endpoint in exclude:
                continue
            load = self._outstanding.get(endpoint, 0)
            if not best or load < fewest:
                best, fewest = [endpoint], load
            elif load == fewest:
                best.append(endpoint)
        if not best:
            return None
        return best[0] if len(best) == 1 else self._rng.choice(best)

    def acquire(self, endpoint: Endpoint) -> None:
        self._outstanding[endpoint] = self._outstanding.get(endpoint, 0) + 1

    def release(self, endpoint: Endpoint) -> None:
        left = self._outstanding.get(endpoint, 0) - 1
        if left > 0:
            self._outstanding[endpoint] = left
        else:
            self._outstanding.pop(endpoint, None)

    def busy(self) -> dict[Endpoint, int]:
        """A copy of the table of busy endpoints (for tests and debugging)."""
        return dict(self._outstanding)
