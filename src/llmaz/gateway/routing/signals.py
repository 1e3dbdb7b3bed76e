"""Engine signals: each routed engine's own view of its load, scraped from its Prometheus `/metrics` page.

`EngineSignals` is the `LoadSignals` the gateway runs. Every `interval` seconds it reads `GET /metrics` of every
endpoint the catalog routes (`Catalog.routed_endpoints`) and keeps, per endpoint, the latest `EngineLoad`.

Which engine an endpoint runs is recognised from its page, not from its Playground: the first entry of
`ENGINE_METRICS` whose running-requests metric the page exports. So an engine is one entry in that table, and a
custom BackendRuntime that runs, say, vLLM is read as vLLM. What is read:
- llama.cpp: `llamacpp:requests_processing` (running), `llamacpp:requests_deferred` (waiting); utilisation is
  running over the `total_slots` of `GET /props` (it has no KV-cache gauge), read once per endpoint and again
  after the endpoint comes back from a failed scrape (it may have restarted with other settings) or reports more
  running requests than slots.
- vLLM: `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (older releases:
  `vllm:gpu_cache_usage_perc`).
- SGLang: `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`.
- TGI: `tgi_batch_current_size`, `tgi_queue_size`; no utilisation.
- Anything else (Ollama has no metrics page): nothing, so its load is never known.
The same table says where an engine lists the LoRA adapters it holds (`routing.adapters`): llama.cpp's
`GET /lora-adapters`, vLLM's `GET /v1/models`. A listing is read only from the endpoints of models that have
adapters, when the endpoint is first read and then every `adapters_interval` seconds (10), after its load.
Request counts are summed over label sets (vLLM labels by `model_name`); a utilisation, a fraction of one cache,
is the largest over label sets, clamped to 0-1.

Invariants:
- Bounded work: at most `max_concurrent` scrapes at once, each given `timeout` seconds (its `/props` read
  included), a body of at most `MAX_PAGE_BYTES`; a cycle starts only after the previous one ended, so a slow
  engine delays the next cycle by at most its timeout and never piles up requests.
- A load is used only while younger than `stale_after` seconds. A failed scrape (refused, timed out, not 200,
  malformed, none of the known metrics) makes the endpoint stale at once: `load` answers None, and callers
  fall back to the gateway's own counts.
- One log line when an endpoint turns stale (with the reason) and one when it recovers, never one per cycle.
  `llmaz_gateway_stale_endpoints` counts the routed endpoints whose load is not known (engines without metrics
  included), set after every cycle.
- Memory is bounded by the routed endpoints: an endpoint that leaves the catalog is forgotten at the next cycle.
- `load` and `adapters` never await and never raise.
- A listing is used only while younger than 3 `adapters_interval`s and while the endpoint's load reads succeed; a
  failed listing read (its own `timeout`, at most MAX_LISTING_BYTES) makes it unknown at once, and is logged
  once when it turns unknown and once when it is known again. It is read again at once when the endpoint comes
  back from a failed load read (it may have restarted with other adapters). A listing that changes wakes the
  requests held on the catalog (`Catalog.notify`): one may be waiting for a replica holding its adapter.
- The gateway's `--resolve` map applies as it does to forwarded requests: an endpoint at `address` is scraped
  at `resolve[address]`, and is still known by its own address.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import hdrs
from prometheus_client import CollectorRegistry, Gauge

from llmaz.gateway.routing.adapters import (
    MAX_LISTING_BYTES,
    EngineAdapters,
    parse_lora_adapters,
    parse_served_adapters,
)
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.freshness import EngineMetricsAge
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.routes import Endpoint
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import bounded, get_logger

DEFAULT_INTERVAL = 0.25
DEFAULT_MAX_CONCURRENT = 32
MIN_DEFAULT_TIMEOUT = 0.2
MIN_DEFAULT_STALE_AFTER = 1.0
# A vLLM page with every histogram of a busy server is a few hundred KiB; far more is not a metrics page.
MAX_PAGE_BYTES = 4 * 1024 * 1024
MAX_PROPS_BYTES = 1024 * 1024
# After a failed `/props` read, llama.cpp's utilisation stays unknown this long before the next try.
PROPS_RETRY_SECONDS = 10.0
# Each endpoint is scraped by one request at a time; a second connection covers a pooled one closing under it.
CONNECTIONS_PER_ENDPOINT = 2
# Below the 5 s keep-alive timeout of uvicorn (vLLM, SGLang), so a pooled connection is not reused as it closes.
KEEPALIVE_SECONDS = 4.0
# The classic text format: engines that also speak OpenMetrics or protobuf answer with the one this parser reads.
ACCEPT = "text/plain;version=0.0.4"
# Adapters change only with a rollout (new replicas): read far less often than the load.
DEFAULT_ADAPTERS_INTERVAL = 10.0
ADAPTERS_STALE_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class AdapterListing:
    """Where an engine lists its LoRA adapters, and how its answer is read (ValueError when it cannot be)."""

    path: str
    parse: Callable[[bytes], EngineAdapters]


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """The metric names one engine exports its load as (gauges)."""

    running: str
    waiting: str
    utilisation: tuple[str, ...] = ()
    """0-1 gauges of how full the engine is; the first one the page exports is read."""
    slots_utilisation: bool = False
    """Utilisation is running requests over the `total_slots` of `GET /props` (llama.cpp)."""
    adapters: AdapterListing | None = None
    """Where the engine lists the LoRA adapters it holds; None: it does not say."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.running, self.waiting, *self.utilisation)


ENGINE_METRICS: Mapping[str, EngineMetrics] = {
    "llamacpp": EngineMetrics(
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        slots_utilisation=True,
        adapters=AdapterListing("/lora-adapters", parse_lora_adapters),
    ),
    "vllm": EngineMetrics(
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        adapters=AdapterListing("/v1/models", parse_served_adapters),
    ),
    "sglang": EngineMetrics("sglang:num_running_reqs", "sglang:num_queue_reqs", ("sglang:token_usage",)),
    "tgi": EngineMetrics("tgi_batch_current_size", "tgi_queue_size"),
}
"""BackendRuntime name -> the metrics its engine exports (and where it lists its adapters). The first entry whose
running metric a page has wins."""

WANTED = frozenset(name for engine in ENGINE_METRICS.values() for name in engine.names)


# What may follow a metric name on its sample line (a line with the name alone is one without a value).
_NAME_ENDS = frozenset({"{", " ", "\t", "\r", "\n", ""})


class ScrapeError(Exception):
    """Why an endpoint's load could not be read; the message is the reason logged."""


def _sample_value(rest: str, name: str) -> float:
    """The value of a sample line, from just after its metric name: `{labels} value [timestamp]`."""
    if rest.startswith("{"):
        quoted = escaped = False
        for i, char in enumerate(rest):
            if escaped:
                escaped = False
            elif quoted:
                escaped, quoted = char == "\\", char != '"'
            elif char == '"':
                quoted = True
            elif char == "}":
                rest = rest[i + 1 :]
                break
        else:
            raise ScrapeError(f"malformed page: unterminated labels of {name}")
    fields = rest.split()
    try:
        return float(fields[0])
    except (IndexError, ValueError):
        raise ScrapeError(f"malformed page: no number for {name}") from None


def scan_samples(page: str, names: Collection[str]) -> dict[str, list[float]]:
    """The sample values of `names` on a Prometheus text page, each name's in page order (one per label set).

    Only the lines of the wanted names are looked at, found by a substring search: a large page with many
    histograms costs a few scans of the text, not a parse of every family. Raises ScrapeError when one of the
    wanted lines is malformed.
    """
    text = "\n" + page
    found: dict[str, list[float]] = {}
    for name in names:
        needle = "\n" + name
        start = text.find(needle)
        while start != -1:
            after = start + len(needle)
            end = text.find("\n", after)
            end = len(text) if end == -1 else end
            # The name must end here: `vllm:num_requests_running` is not `vllm:num_requests_running_total`.
            if text[after : after + 1] in _NAME_ENDS:
                found.setdefault(name, []).append(_sample_value(text[after:end], name))
            start = text.find(needle, end)
    return found


def _count(values: list[float], name: str) -> int:
    total = math.fsum(values)
    if not math.isfinite(total) or total < 0:
        raise ScrapeError(f"malformed page: {name} is {total}")
    return round(total)


def _fraction(value: float) -> float | None:
    return min(1.0, max(0.0, value)) if math.isfinite(value) else None


def read_page(page: str) -> tuple[str, EngineLoad]:
    """The engine a metrics page comes from and the load it reports (a llama.cpp page has no utilisation here).

    Raises ScrapeError when no known engine's metrics are on the page, or one of them is malformed."""
    samples = scan_samples(page, WANTED)
    for engine, metrics in ENGINE_METRICS.items():
        if metrics.running not in samples:
            continue
        if metrics.waiting not in samples:
            raise ScrapeError(f"{engine} metrics without {metrics.waiting}")
        utilisation = next((max(samples[n]) for n in metrics.utilisation if n in samples), None)
        return engine, EngineLoad(
            running=_count(samples[metrics.running], metrics.running),
            waiting=_count(samples[metrics.waiting], metrics.waiting),
            utilisation=None if utilisation is None else _fraction(utilisation),
        )
    raise ScrapeError("none of the known engine metrics on the page")


def total_slots(props: bytes) -> int:
    """llama.cpp's `total_slots` from its `GET /props` answer; raises ScrapeError when it has none."""
    try:
        value = orjson.loads(props).get("total_slots")
    except (orjson.JSONDecodeError, AttributeError):
        raise ScrapeError("/props is not a JSON object") from None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ScrapeError(f"/props has no positive total_slots (got {value!r})")
    return value


@dataclass(slots=True)
class _Known:
    """What is known about one routed endpoint."""

    engine: str | None = None
    load: EngineLoad | None = None
    read_at: float = -math.inf
    failure: str | None = None
    """Why the last scrape failed; None after a successful one."""
    slots: int | None = None
    """llama.cpp's total slots, from `/props`."""
    props_due: float = -math.inf
    """When `/props` may be read (again)."""
    adapters: EngineAdapters | None = None
    """The LoRA adapters the engine listed last; None when not known."""
    adapters_read_at: float = -math.inf
    adapters_due: float = -math.inf
    """When the adapters may be listed (again)."""
    adapters_failure: str | None = None
    """Why the last listing failed; None after a successful one."""


class EngineSignals:
    """`LoadSignals` from the engines' metrics pages (see the module docstring); a Runnable on every replica."""

    needs_leader_election = False

    def __init__(
        self,
        catalog: Catalog,
        *,
        interval: float = DEFAULT_INTERVAL,
        timeout: float | None = None,
        stale_after: float | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        adapters_interval: float = DEFAULT_ADAPTERS_INTERVAL,
        resolve: Mapping[str, str] | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        """`timeout` defaults to `interval` (at least 0.2 s), `stale_after` to 4 times `interval` (at least 1 s);
        `adapters_interval` is the seconds between two listings of an endpoint's adapters; `resolve` is the
        gateway's `--resolve` map; the stale-endpoints gauge goes into `registry`."""
        _require_seconds("interval", interval, "(0 turns engine signals off: use NoSignals then)")
        timeout = max(interval, MIN_DEFAULT_TIMEOUT) if timeout is None else timeout
        stale_after = max(4 * interval, MIN_DEFAULT_STALE_AFTER) if stale_after is None else stale_after
        _require_seconds("timeout", timeout)
        _require_seconds("stale_after", stale_after)
        _require_seconds("adapters_interval", adapters_interval)
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        self.catalog = catalog
        self.interval, self.timeout, self.stale_after = interval, timeout, stale_after
        self.max_concurrent = max_concurrent
        self.adapters_interval = adapters_interval
        self.resolve = dict(resolve or {})
        self.cycles = 0
        """Scrape cycles completed (tests wait on it)."""
        self._clock = clock
        self._known: dict[Endpoint, _Known] = {}
        self._limit = asyncio.Semaphore(max_concurrent)
        self._session: aiohttp.ClientSession | None = None
        self._log = get_logger("llmaz.gateway.signals")
        self.stale_gauge = Gauge(
            "llmaz_gateway_stale_endpoints",
            "Routed engine endpoints whose load is not known now: their last metrics scrape failed (engines without "
            "metrics included) or is older than the freshness bound. Routing falls back to the gateway's own counts "
            "for them.",
            registry=registry if registry is not None else CollectorRegistry(),
        )
        EngineMetricsAge(lambda: self._known, clock.now, registry)

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        known = self._known.get(endpoint)
        if known is None or not self._fresh(known, self._clock.now()):
            return None
        return known.load

    def adapters(self, endpoint: Endpoint) -> EngineAdapters | None:
        known = self._known.get(endpoint)
        if known is None or known.failure is not None or known.adapters is None:
            return None
        if self._clock.now() - known.adapters_read_at >= ADAPTERS_STALE_INTERVALS * self.adapters_interval:
            return None
        return known.adapters

    def engine(self, endpoint: Endpoint) -> str | None:
        """The engine last recognised at `endpoint` (a key of `ENGINE_METRICS`), or None."""
        known = self._known.get(endpoint)
        return None if known is None else known.engine

    def stale_endpoints(self) -> int:
        now = self._clock.now()
        return sum(1 for known in self._known.values() if not self._fresh(known, now))

    def _fresh(self, known: _Known, now: float) -> bool:
        return known.failure is None and known.load is not None and now - known.read_at < self.stale_after

    async def run(self) -> None:
        try:
            while True:
                started = self._clock.now()
                await self.scrape()
                await self._clock.sleep(self.interval - (self._clock.now() - started))
        finally:
            await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape(self) -> None:
        """One cycle: every routed endpoint scraped once, within the concurrency and time bounds."""
        # Endpoints that left the catalog are dropped here, new ones start unknown.
        self._known = known = {
            endpoint: self._known.get(endpoint) or _Known() for endpoint in self.catalog.routed_endpoints()
        }
        if known:
            listed = self.catalog.endpoints_with_adapters()
            await asyncio.gather(
                *(self._scrape(endpoint, state, endpoint in listed) for endpoint, state in known.items())
            )
        self.stale_gauge.set(self.stale_endpoints())
        self.cycles += 1

    async def _scrape(self, endpoint: Endpoint, known: _Known, list_adapters: bool) -> None:
        async with self._limit:
            asked = self._clock.now()
            try:
                async with asyncio.timeout(self.timeout):
                    engine, load = await self._read(endpoint, known)
                    load = dataclasses.replace(load, observed_at=asked)
            except ScrapeError as exc:
                self._failed(endpoint, known, str(exc))
            except TimeoutError:
                self._failed(endpoint, known, f"no answer within {self.timeout:g} s")
            except (aiohttp.ClientError, OSError) as exc:
                self._failed(endpoint, known, f"{type(exc).__name__}: {exc}")
            else:
                self._succeeded(endpoint, known, engine, load)
                listing = ENGINE_METRICS[engine].adapters
                if list_adapters and listing is not None and self._clock.now() >= known.adapters_due:
                    await self._list_adapters(endpoint, known, listing)

    async def _list_adapters(self, endpoint: Endpoint, known: _Known, listing: AdapterListing) -> None:
        known.adapters_due = self._clock.now() + self.adapters_interval
        try:
            async with asyncio.timeout(self.timeout):
                url = endpoint.connect_url(self.resolve) + listing.path
                found = listing.parse(await self._get(url, MAX_LISTING_BYTES, accept="application/json"))
        except (ScrapeError, ValueError) as exc:
            reason = str(exc)
        except TimeoutError:
            reason = f"no answer within {self.timeout:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if known.adapters_failure is not None:
                self._log.info("engine adapters known again", endpoint=str(endpoint))
            changed = found != known.adapters
            known.adapters, known.adapters_read_at, known.adapters_failure = found, self._clock.now(), None
            if changed:
                self.catalog.notify()
            return
        if known.adapters_failure is None:
            self._log.warning("engine adapters unknown: listing failed", endpoint=str(endpoint), reason=bounded(reason))
        if known.adapters is not None:
            self.catalog.notify()  # every endpoint of the model counts as a holder again
        known.adapters, known.adapters_failure = None, reason

    def _failed(self, endpoint: Endpoint, known: _Known, reason: str) -> None:
        if known.failure is None:
            self._log.warning(
                "engine load unknown: metrics scrape failed", endpoint=str(endpoint), reason=bounded(reason)
            )
        known.failure = reason
        known.adapters_due = -math.inf  # listed again once it answers: it may have restarted with other adapters

    def _succeeded(self, endpoint: Endpoint, known: _Known, engine: str, load: EngineLoad) -> None:
        if known.failure is not None:
            self._log.info("engine load known again", endpoint=str(endpoint), engine=engine)
        elif known.engine is None:
            self._log.info("engine load known", endpoint=str(endpoint), engine=engine)
        known.engine, known.load, known.read_at, known.failure = engine, load, self._clock.now(), None

    async def _read(self, endpoint: Endpoint, known: _Known) -> tuple[str, EngineLoad]:
        base_url = endpoint.connect_url(self.resolve)
        page = await self._get(base_url + "/metrics", MAX_PAGE_BYTES)
        try:
            engine, load = read_page(page.decode("utf-8"))
        except UnicodeDecodeError:
            raise ScrapeError("malformed page: not UTF-8") from None
        if ENGINE_METRICS[engine].slots_utilisation:
            if known.failure is not None or (known.slots is not None and load.running > known.slots):
                known.slots, known.props_due = None, -math.inf  # back from a failure: it may have restarted
            if known.slots is None and self._clock.now() >= known.props_due:
                known.slots = await self._read_slots(endpoint, base_url, known)
            if known.slots is not None:
                load = EngineLoad(load.running, load.waiting, min(1.0, load.running / known.slots))
        return engine, load

    async def _read_slots(self, endpoint: Endpoint, base_url: str, known: _Known) -> int | None:
        try:
            return total_slots(await self._get(base_url + "/props", MAX_PROPS_BYTES))
        except (ScrapeError, aiohttp.ClientError, OSError) as exc:
            if known.props_due == -math.inf:  # the first failure since the endpoint was (re)found, not each retry
                self._log.info("llama.cpp slots unknown", endpoint=str(endpoint), reason=bounded(str(exc)))
            known.props_due = self._clock.now() + PROPS_RETRY_SECONDS
            return None

    async def _get(self, url: str, limit: int, accept: str = ACCEPT) -> bytes:
        async with self._client().get(url, headers={hdrs.ACCEPT: accept}, allow_redirects=False) as resp:
            if resp.status != 200:
                raise ScrapeError(f"HTTP {resp.status} from {resp.url.path}")
            if resp.content_length is not None and resp.content_length > limit:
                raise ScrapeError(f"{resp.url.path} is larger than {limit} bytes")
            body = bytearray()
            async for chunk in resp.content.iter_any():
                body += chunk
                if len(body) > limit:
                    raise ScrapeError(f"{resp.url.path} is larger than {limit} bytes")
            return bytes(body)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.max_concurrent, limit_per_host=CONNECTIONS_PER_ENDPOINT, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # Identity encoding: decompressing costs more CPU than the bytes cost on the cluster's network.
                skip_auto_headers=(hdrs.USER_AGENT, hdrs.ACCEPT_ENCODING),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # engine traffic stays in the cluster, whatever proxy the environment names
            )
        return self._session


def _require_seconds(name: str, value: float, hint: str = "") -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number of seconds, got {value} {hint}".rstrip())
