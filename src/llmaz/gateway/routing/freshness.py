"""How old each engine's metrics are: `llmaz_gateway_engine_metrics_age_seconds`, read at each scrape of the gateway.

One series per routed endpoint whose engine was recognised at least once (`EngineSignals`), labelled `endpoint`
(`address:port`) and `engine` (a key of `ENGINE_METRICS`): the seconds since its metrics were last read
successfully. It stays small while reads succeed (about the read interval) and grows from the first failed read,
so a value far above the interval means that engine's load has been unknown that long and routing and scaling fall
back to the gateway's own counts for it. Endpoints never recognised (Ollama, llama.cpp without `--metrics`) have
no series: for them a missing signal is normal, and `llmaz_gateway_stale_endpoints` counts them. An endpoint that
leaves the routes loses its series at the next read cycle, so the series are bounded by the routed endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from llmaz.gateway.routing.routes import Endpoint

NAME = "llmaz_gateway_engine_metrics_age_seconds"


class Read(Protocol):
    """What the engine signals know of one endpoint's reads."""

    @property
    def engine(self) -> str | None: ...

    @property
    def read_at(self) -> float:
        """When its metrics were last read successfully (the signals' clock)."""
        ...


class EngineMetricsAge(Collector):
    """The collector (see the module docstring) over `known()`, the signals' current endpoints, and `now`, their
    clock; registered into `registry` when one is given."""

    def __init__(
        self,
        known: Callable[[], Mapping[Endpoint, Read]],
        now: Callable[[], float],
        registry: CollectorRegistry | None,
    ) -> None:
        self._known = known
        self._now = now
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = self._family()
        now = self._now()
        for endpoint, read in sorted(self._known().items(), key=lambda item: str(item[0])):
            if read.engine is not None:
                family.add_metric([str(endpoint), read.engine], max(0.0, now - read.read_at))
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            NAME,
            "Seconds since the metrics of a routed engine endpoint were last read successfully (only endpoints whose "
            "engine was recognised at least once).",
            labels=["endpoint", "engine"],
        )
