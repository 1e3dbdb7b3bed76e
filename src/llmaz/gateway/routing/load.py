"""What an engine says about its own load, as the gateway's routing and scaling parts read it.

The engines count what the gateway cannot: requests sent by other gateway replicas or straight to the `-lb`
Service, requests queued inside the engine, and how full its KV cache or its slots are. `LoadSignals` is the one
way to ask: an implementation scrapes the engines' metrics and answers from its latest fresh sample.
`AdapterSignals` asks the same engines which LoRA adapters they hold (`routing.adapters`); `EngineActivity` when
they last worked (idle detection counts the requests the gateway never saw).

Invariants:
- `load` never waits and never raises: it answers from what is already known.
- None means "not known now" (never scraped, stale, or an engine that exports nothing): callers then fall back
  to the gateway's own in-flight counts, so a missing signal costs routing quality, never a request. An adapter
  listing not known means every endpoint of the model is taken to hold its adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from llmaz.gateway.routing.adapters import EngineAdapters
from llmaz.gateway.routing.routes import Endpoint


@dataclass(frozen=True, slots=True)
class EngineLoad:
    running: int
    """Requests the engine is processing now."""
    waiting: int
    """Requests the engine has accepted and queued, not yet started."""
    utilisation: float | None = None
    """How full the engine is, 0 to 1: KV-cache use (vLLM, SGLang), or busy slots over total slots (llama.cpp);
    None when the engine does not say."""
    observed_at: float | None = field(default=None, compare=False)
    """When the engine was asked (monotonic seconds), None when not known: requests that ended here after that may
    still be in these counts (`InFlight.released_since`). Not part of equality: a load is its counts."""
    slots: int | None = field(default=None, compare=False)
    """How many requests the engine serves at once, when it says (llama.cpp's slots, `GET /props`): past that,
    requests queue inside it. Not part of equality."""
    work: float | None = field(default=None, compare=False)
    """The sum of the engine's activity counters (prompt and generated tokens, `engines.MetricNames.activity`) when
    it exports them: it moving between two reads means the engine worked meanwhile. Not part of equality."""

    @property
    def requests(self) -> int:
        """Running plus waiting: the load a replica carries."""
        return self.running + self.waiting


class LoadSignals(Protocol):
    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        """The endpoint's latest fresh load, or None when it is not known now."""
        ...


class AdapterSignals(Protocol):
    def adapters(self, endpoint: Endpoint) -> EngineAdapters | None:
        """The LoRA adapters the endpoint's engine lists now, or None when it is not known."""
        ...

    def engine(self, endpoint: Endpoint) -> str | None:
        """The engine recognised at the endpoint (a BackendRuntime name), or None."""
        ...


class EngineActivity(Protocol):
    def idle_for(self, endpoint: Endpoint) -> float | None:
        """Seconds since the endpoint's engine last reported work of its own (requests running or waiting, or its
        token counters moving; 0 while it does), or None when that is not known (never read, never seen working, or
        an engine that exports nothing)."""
        ...


class NoSignals:
    """Signals off: nothing is ever known, so everyone uses the gateway's own counts."""

    def idle_for(self, endpoint: Endpoint) -> float | None:
        return None

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return None

    def adapters(self, endpoint: Endpoint) -> EngineAdapters | None:
        return None

    def engine(self, endpoint: Endpoint) -> str | None:
        return None
