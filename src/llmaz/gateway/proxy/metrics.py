"""The gateway's Prometheus metrics, in a registry of its own (served on the metrics port at `/metrics`).

The gateway's `/metrics` serves the runtime's registry too (`include`): leader election (the autoscaler's
Lease), the controllers' reconciles and work queues (idle detection, the activator), the API client's requests,
the informers and the process and garbage-collector series are all there beside the gateway's own.

Label `model` is a model the gateway routes (one a Playground or inference Service serves), or "" for a
request that named none it knows (invalid, unknown, unauthenticated): client input never becomes a label
value, so label cardinality is bounded by the cluster's objects, not by what clients send. Label `code` is the
HTTP status sent, or 499 when the client went away before the answer was complete (nginx's convention).

The labelled series a request touches are looked up once per model (and status) and kept: prometheus_client's
`labels()` validates and sorts its arguments and takes a lock on every call, six times a request otherwise. The
cache holds only series that exist in the registry anyway (which never drops a series), so it is bounded the
same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from llmaz.gateway.proxy.usage import Usage
from llmaz.gateway.routing.catalog import Catalog

CLIENT_CLOSED = 499
# LLM requests run from milliseconds (a cached short answer) to minutes (a long generation).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600)
# A request waits in a flow-control queue from nothing to its TTL (60 s by default).
FLOW_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120)
# The endpoint picker names a destination in well under a millisecond when its core is free (2 ms is the bound it
# is held to); a request held for a starting or waking replica waits up to the hold's bound (30 s, 300 s).
EPP_DECISION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 300)
TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60)


M = TypeVar("M", Counter, Gauge, Histogram)


class _ByModel(Generic[M]):
    """A metric labelled by model alone, and the children already looked up. A child is created on first use, as
    `labels()` creates it, so the registry exposes exactly the series it would without the cache."""

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._children: dict[str, M] = {}

    def __call__(self, model: str) -> M:
        child = self._children.get(model)
        if child is None:
            child = self._children[model] = self._metric.labels(model=model)
        return child


class Included:
    """A collector that serves every metric of another registry, as it is at each scrape."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()

    def describe(self) -> Iterable[Metric]:
        return ()  # its names are the other registry's to check, and may grow after this one is registered


class GatewayMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        process_collectors: bool = True,
        include: CollectorRegistry | None = None,
    ) -> None:
        """`include`: another registry served with this one (the runtime's, which has the process collectors:
        then they are not added a second time)."""
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        if include is not None:
            r.register(Included(include))
            process_collectors = False
        self.requests = Counter(
            "llmaz_gateway_requests", "Inference requests answered, by model and HTTP status.", ["model", "code"],
            registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "llmaz_gateway_request_duration_seconds",
            "Time from a request's arrival to the end of its answer.",
            ["model"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.time_to_first_byte = Histogram(
            "llmaz_gateway_time_to_first_byte_seconds",
            "Time from a request's arrival to the first body byte relayed from the engine (for a stream, about the "
            "time to the first token).",
            ["model"],
            buckets=TTFB_BUCKETS,
            registry=r,
        )
        self.epp_decision = Histogram(
            "llmaz_gateway_epp_decision_seconds",
            "The endpoint picker's time from a request's headers to its destination: reading the body (BUFFERED: "
            "one message; FULL_DUPLEX_STREAMED: every chunk), parsing it, holding it while its model has no ready "
            "endpoint, and scheduling. Requests it refuses are not counted.",
            buckets=EPP_DECISION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "llmaz_gateway_requests_in_flight", "Inference requests being handled, by model.", ["model"], registry=r
        )
        self.prompt_tokens = Counter(
            "llmaz_gateway_prompt_tokens", "Prompt tokens reported in responses' usage.", ["model"], registry=r
        )
        self.completion_tokens = Counter(
            "llmaz_gateway_completion_tokens", "Completion tokens reported in responses' usage.", ["model"], registry=r
        )
        self.prompt_cached_tokens = Counter(
            "llmaz_gateway_prompt_cached_tokens",
            "Prompt tokens the engine found in its prefix cache, as responses' usage reports them "
            "(prompt_tokens_details.cached_tokens; engines that do not report it add nothing).",
            ["model"],
            registry=r,
        )
        self.prefix_index_corrections = Counter(
            "llmaz_gateway_prefix_index_corrections",
            "Times an engine's usage showed it had evicted prompt blocks the prefix index still held for it, and the "
            "index forgot them (prefix-aware routing).",
            ["model"],
            registry=r,
        )
        self.prefix_holds = Counter(
            "llmaz_gateway_prefix_holds",
            "Requests held at the gateway for an engine that reuses a cached prompt serially (llama.cpp), by where "
            "they waited (prefix: behind a request of their prefix; home: for a slot at their prefix's home) and how "
            "the wait ended (released: a request there ended; expired: recomputing was cheaper than waiting longer).",
            ["model", "where", "outcome"],
            registry=r,
        )
        self.prefix_hold_seconds = Histogram(
            "llmaz_gateway_prefix_hold_seconds",
            "How long requests were held behind their prefix (see llmaz_gateway_prefix_holds_total).",
            ["model"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        self.upstream_retries = Counter(
            "llmaz_gateway_upstream_retries",
            "Requests sent to another endpoint, by why the previous one failed (connect_error, unavailable).",
            ["model", "reason"],
            registry=r,
        )
        self.requests_held = Gauge(
            "llmaz_gateway_requests_held",
            "Requests waiting for a ready endpoint of their model (a replica starting, waking from zero, or coming "
            "with the adapter they name), by model.",
            ["model"],
            registry=r,
        )
        self.tenant_requests = Counter(
            "llmaz_gateway_tenant_requests",
            "Requests answered, by the tenant of their API key and HTTP status.",
            ["tenant", "code"],
            registry=r,
        )
        self.tenant_tokens = Counter(
            "llmaz_gateway_tenant_tokens",
            "Tokens reported in responses' usage, by the tenant of the request's API key and kind (prompt, "
            "completion).",
            ["tenant", "kind"],
            registry=r,
        )
        self.tenant_rejections = Counter(
            "llmaz_gateway_tenant_rejections",
            "Requests of a tenant refused by the gateway's limits, by reason (requests, tokens, streams, max_tokens, "
            "may_wake, expired, refused_key).",
            ["tenant", "reason"],
            registry=r,
        )
        self.flow_queue_depth = Gauge(
            "llmaz_gateway_flow_queue_depth",
            'Requests waiting in a saturated model\'s flow-control queue, by model, priority band and tenant ("" '
            "without API keys).",
            ["model", "band", "tenant"],
            registry=r,
        )
        self.flow_wait_seconds = Histogram(
            "llmaz_gateway_flow_wait_seconds",
            "Time a request waited in its model's flow-control queue before it was sent, by model and priority band "
            "(0 for a request sent at once).",
            ["model", "band"],
            buckets=FLOW_WAIT_BUCKETS,
            registry=r,
        )
        self.flow_sheds = Counter(
            "llmaz_gateway_flow_shed_requests",
            "Requests flow control refused, by model, tenant, priority band and reason: queue_full (shed, 429), "
            "queue_ttl (waited the TTL while the model stayed saturated, 429), no_endpoint (waited the TTL while the "
            "model had no endpoint, 503).",
            ["model", "tenant", "band", "reason"],
            registry=r,
        )
        if process_collectors:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        self._answered: dict[tuple[str, int], Counter] = {}
        self._flow_wait: dict[tuple[str, int], Histogram] = {}
        self._duration = _ByModel(self.duration)
        self._time_to_first_byte = _ByModel(self.time_to_first_byte)
        self._prompt_tokens = _ByModel(self.prompt_tokens)
        self._completion_tokens = _ByModel(self.completion_tokens)
        self._prompt_cached_tokens = _ByModel(self.prompt_cached_tokens)
        self._prefix_index_corrections = _ByModel(self.prefix_index_corrections)
        self.in_flight_of = _ByModel(self.in_flight)
        self.held_of = _ByModel(self.requests_held)
        """`held_of(model)`: the held-requests gauge of `model`."""
        """`in_flight_of(model)`: the in-flight gauge of `model`."""

    def in_flight_changed(self, model: str, count: int) -> None:
        """An `InFlight` watcher: the gauge follows the gateway's one count of requests in flight."""
        self.in_flight_of(model).set(count)

    def answered(self, model: str, code: int, seconds: float) -> None:
        counter = self._answered.get((model, code))
        if counter is None:
            counter = self._answered[(model, code)] = self.requests.labels(model=model, code=str(code))
        counter.inc()
        self._duration(model).observe(seconds)

    def epp_decided(self, seconds: float) -> None:
        """The endpoint picker named a request's destination `seconds` after its headers came."""
        self.epp_decision.observe(seconds)

    def first_byte(self, model: str, seconds: float) -> None:
        self._time_to_first_byte(model).observe(seconds)

    def tokens(self, model: str, usage: Usage) -> None:
        """The usage of one answered request (the attempt that answered; once per request)."""
        self._prompt_tokens(model).inc(usage.prompt_tokens)
        self._completion_tokens(model).inc(usage.completion_tokens)
        if usage.cached_tokens is not None:
            self._prompt_cached_tokens(model).inc(usage.cached_tokens)

    def prefix_index_corrected(self, model: str) -> None:
        """The prefix index was corrected from an engine's usage (`routing.scorers.PrefixMatch`)."""
        self._prefix_index_corrections(model).inc()

    def prefix_held(self, model: str, where: str, outcome: str, seconds: float) -> None:
        """A request was held behind its prefix (`routing.holds.PrefixHolds`)."""
        self.prefix_holds.labels(model=model, where=where, outcome=outcome).inc()
        self.prefix_hold_seconds.labels(model=model).observe(seconds)

    def tenant_answered(self, tenant: str, code: int, usage: Usage | None, rejection: str | None) -> None:
        """One request of `tenant` (the tenant of a key the gateway holds: bounded by the keys file and Secrets)."""
        self.tenant_requests.labels(tenant=tenant, code=str(code)).inc()
        if usage is not None:
            self.tenant_tokens.labels(tenant=tenant, kind="prompt").inc(usage.prompt_tokens)
            self.tenant_tokens.labels(tenant=tenant, kind="completion").inc(usage.completion_tokens)
        if rejection is not None:
            self.tenant_rejections.labels(tenant=tenant, reason=rejection).inc()

    def flow_queued(self, model: str, band: int, tenant: str, change: int) -> None:
        """A model's queue depth for (band, tenant) changed (`flow.control.FlowMetrics`); `tenant` is a key's."""
        self.flow_queue_depth.labels(model=model, band=str(band), tenant=tenant).inc(change)

    def flow_waited(self, model: str, band: int, seconds: float) -> None:
        child = self._flow_wait.get((model, band))
        if child is None:  # every request is observed: its child is looked up once
            child = self._flow_wait[(model, band)] = self.flow_wait_seconds.labels(model=model, band=str(band))
        child.observe(seconds)

    def flow_shed(self, model: str, band: int, tenant: str, reason: str) -> None:
        self.flow_sheds.labels(model=model, tenant=tenant, band=str(band), reason=reason).inc()

    def retried(self, model: str, reason: str) -> None:
        self.upstream_retries.labels(model=model, reason=reason).inc()


class ModelReadiness(Collector):
    """Per served model, read from the catalog at each scrape: `llmaz_gateway_model_ready_endpoints` (the endpoints
    requests can go to now) and `llmaz_gateway_model_desired_replicas` (what its Playgrounds ask for,
    `Catalog.readiness`). Nothing is reported until the catalog has synced, so a starting gateway does not report a
    model without endpoints."""

    def __init__(self, catalog: Catalog, registry: CollectorRegistry) -> None:
        self._catalog = catalog
        registry.register(self)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        ready, desired = self._families()
        if self._catalog.has_synced():
            for model, (endpoints, replicas) in sorted(self._catalog.readiness().items()):
                ready.add_metric([model], endpoints)
                desired.add_metric([model], replicas)
        return ready, desired

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        ready = GaugeMetricFamily(
            "llmaz_gateway_model_ready_endpoints",
            "Ready endpoints of each served model: where its requests can be sent now.",
            labels=["model"],
        )
        desired = GaugeMetricFamily(
            "llmaz_gateway_model_desired_replicas",
            "Replicas the Playgrounds (or inference Services) serving each model ask for; 0 while it sleeps.",
            labels=["model"],
        )
        return ready, desired
