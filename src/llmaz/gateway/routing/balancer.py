"""Fewest outstanding requests: send each request to the endpoint this gateway has the fewest requests on.

LLM requests vary in cost by orders of magnitude (a 5-token answer or a 4,000-token stream), so counting what
is still in flight tracks an engine's load far better than round robin. The counts are this replica's only
(`inflight.InFlight`, per endpoint); several gateway replicas each balance their own share.

`LeastOutstanding` is a configuration of the one `scheduler.Scheduler`:

    filters:  HoldsAdapter, Untried
    scorers:  FewestInFlight x 1
    picker:   MaxScore (no ring: ties at random)

Invariants:
- It never picks an excluded endpoint (those already tried by a retry); among the least loaded of the rest it
  picks at random (the generator is injectable), so idle endpoints share the load instead of the first one in
  sort order taking every request that arrives while all are idle.
- Nothing awaits between a decision and the `pre_request` that follows it (both are synchronous), so two
  concurrent requests cannot both see the same endpoint as idle.
"""

from __future__ import annotations

import random

from llmaz.apis.routing import LEAST_OUTSTANDING
from llmaz.gateway.routing.filters import HoldsAdapter, Untried
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import AdapterSignals
from llmaz.gateway.routing.scheduler import MaxScore, Scheduler
from llmaz.gateway.routing.scorers import FewestInFlight


class LeastOutstanding(Scheduler):
    """The `least-outstanding` strategy: it reads no routing key."""

    def __init__(
        self, in_flight: InFlight, rng: random.Random | None = None, adapters: AdapterSignals | None = None
    ) -> None:
        super().__init__(
            LEAST_OUTSTANDING,
            in_flight,
            filters=[HoldsAdapter(adapters), Untried()],
            scorers=[(FewestInFlight(), 1.0)],
            picker=MaxScore(rng),
        )
