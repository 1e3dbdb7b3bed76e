"""Engine signals: each routed engine's own view of its load, scraped from its Prometheus `/metrics` page.

`EngineSignals` is the `LoadSignals` the gateway runs. Every `interval` seconds it reads `GET /metrics` of every
endpoint the catalog routes (`Catalog.routed_endpoints`) and keeps, per endpoint, the latest `EngineLoad`.

What is read, and where, is the engine table's (`routing.engines`): which engine an endpoint runs is recognised
from its page, not from its Playground (the first engine whose running-requests metric the page exports), so a
custom BackendRuntime that runs, say, vLLM is read as vLLM. Per engine: its running and waiting requests, its
utilisation (a 0-1 cache gauge; for llama.cpp, running over the `total_slots` of `GET /props`, read once per
endpoint and again after the endpoint comes back from failed scrapes, as it may have restarted with other
settings, or reports more running requests than slots), and its activity counters (tokens prefilled and
generated: they moving means the engine worked, `idle_for`). An engine the table does not know (Ollama has no
metrics page) is never known. The same table says where an engine lists the LoRA adapters it holds
(`routing.adapters`); a listing is read only from the endpoints of models that have adapters, when the endpoint
is first read and then every `adapters_interval` seconds (10), after its load. Request counts are summed over
label sets (vLLM labels by `model_name`); a utilisation, a fraction of one cache, is the largest over label sets,
clamped to 0-1.

Invariants:
- Bounded work: at most `max_concurrent` scrapes at once, each given `timeout` seconds (its `/props` read
  included), a body of at most `MAX_PAGE_BYTES`; a cycle starts only after the previous one ended, so a slow
  engine delays the next cycle by at most its timeout and never piles up requests.
- `timeout` is a setting of its own (default `DEFAULT_TIMEOUT`, 1 s, four intervals): a loaded engine answers its
  page late, and a read cut at the interval would lose the signal exactly when it matters.
- A load is used only while younger than `stale_after` seconds (default the timeout plus four intervals) and until
  `STALE_AFTER_FAILURES` (3) reads in a row have failed (refused, timed out, not 200, malformed, none of the known
  metrics, or anything else raised): one failed read keeps the last sample. A stale endpoint's `load` answers
  None, and callers fall back to the gateway's own counts.
- Nothing raised by a read, expected or not, ends the scrape loop: every failure is counted in
  `llmaz_gateway_engine_scrape_failures_total` (by kind), and a cycle that itself fails is counted and the loop
  goes on at the next interval. One log line when an endpoint's reads start failing (with the reason; an
  unexpected exception with its traceback), one when it turns stale, one when it recovers, never one per cycle.
  `llmaz_gateway_stale_endpoints` counts the routed endpoints whose load is not known (engines without metrics
  included), set after every cycle.
- Memory is bounded by the routed endpoints: an endpoint that leaves the catalog is forgotten at the next cycle.
- `load` and `adapters` never await and never raise.
- A listing is used only while younger than 3 `adapters_interval`s and until the endpoint's load turns stale; a
  failed listing read (its own `timeout`, at most MAX_LISTING_BYTES) makes it unknown at once, and is logged
  once when it turns unknown and once when it is known again. It is read again at once when the endpoint comes
  back from a failed load read (it may have restarted with other adapters). A listing that changes wakes the
  requests held on the catalog for the endpoint's models (`Catalog.notify_endpoint`): one may be waiting for a
  replica holding its adapter.
- The gateway's `--resolve` map applies as it does to forwarded requests: an endpoint at `address` is scraped
  at `resolve[address]`, and is still known by its own address.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import hdrs
from prometheus_client import CollectorRegistry, Counter, Gauge

from llmaz.gateway.routing import engines
from llmaz.gateway.routing.adapters import MAX_LISTING_BYTES, EngineAdapters
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.freshness import EngineMetricsAge
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.routes import Endpoint
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.log import bounded, get_logger

DEFAULT_INTERVAL = 0.25
DEFAULT_MAX_CONCURRENT = 32
# One read's bound, its own setting: a busy engine answers its metrics page late, and a read cut at the interval
# would turn a loaded engine's signal off exactly when it matters.
DEFAULT_TIMEOUT = 1.0
# An endpoint's load turns unknown after this many failed reads in a row (or when its last sample is too old).
STALE_AFTER_FAILURES = 3
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
    """The engine a metrics page comes from (an `engines.ENGINES` name) and the load it reports (a llama.cpp page has
    no utilisation here; `work` is the sum of its activity counters, None when it exports none).

    Raises ScrapeError when no known engine's metrics are on the page, or one of them is malformed."""
    samples = scan_samples(page, engines.SCANNED)
    engine = engines.recognise(samples)
    if engine is None or engine.metrics is None:
        raise ScrapeError("none of the known engine metrics on the page")
    metrics = engine.metrics
    if metrics.waiting not in samples:
        raise ScrapeError(f"{engine.name} metrics without {metrics.waiting}")
    utilisation = next((max(samples[n]) for n in metrics.utilisation if n in samples), None)
    counters = [math.fsum(samples[n]) for n in metrics.activity if n in samples]
    work = math.fsum(counters) if counters else None
    return engine.name, EngineLoad(
        running=_count(samples[metrics.running], metrics.running),
        waiting=_count(samples[metrics.waiting], metrics.waiting),
        utilisation=None if utilisation is None else _fraction(utilisation),
        work=work if work is not None and math.isfinite(work) else None,
    )


def total_slots(props: bytes) -> int:
    """llama.cpp's `total_slots` from its `GET /props` answer; raises ScrapeError when it has none."""
    try:
        value = orjson.loads(props).get("total_slots")
    except (orjson.JSONDecodeError, AttributeError):
        raise ScrapeError("/props is not a JSON object") from None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ScrapeError(f"/props has no positive total_slots (got {value!r})")
    return value


class FailureKind(enum.StrEnum):
    """Why a read failed, as `llmaz_gateway_engine_scrape_failures_total` labels it (a bounded set)."""

    TIMEOUT = "timeout"
    CONNECTION = "connection"
    MALFORMED = "malformed"
    """Not 200, too large, not a page, none of the known metrics."""
    UNEXPECTED = "unexpected"
    """Anything else raised: a bug, caught so that the loop goes on."""


@dataclass(slots=True)
class _Known:
    """What is known about one routed endpoint."""

    engine: str | None = None
    load: EngineLoad | None = None
    read_at: float = -math.inf
    failure: str | None = None
    """Why the last scrape failed; None after a successful one."""
    failures: int = 0
    """Failed scrapes in a row (0 after a successful one)."""
    busy_at: float | None = None
    """When a read last saw the engine working (requests running or waiting, or its activity counters moved)."""
    working: bool = False
    """The last read saw it working."""
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
        timeout: float = DEFAULT_TIMEOUT,
        stale_after: float | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        adapters_interval: float = DEFAULT_ADAPTERS_INTERVAL,
        resolve: Mapping[str, str] | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        """`timeout` bounds one endpoint's read (default 1 s, whatever the interval); `stale_after` defaults to the
        timeout plus 4 intervals (a cycle that waited for a slow engine does not age every other sample out);
        `adapters_interval` is the seconds between two listings of an endpoint's adapters; `resolve` is the
        gateway's `--resolve` map; the gauges and counters go into `registry`."""
        _require_seconds("interval", interval, "(0 turns engine signals off: use NoSignals then)")
        stale_after = timeout + 4 * interval if stale_after is None else stale_after
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
        self._listeners: list[Callable[[], None]] = []
        self._clock = clock
        self._known: dict[Endpoint, _Known] = {}
        self._limit = asyncio.Semaphore(max_concurrent)
        self._session: aiohttp.ClientSession | None = None
        self._cycle_failure: str | None = None
        self._log = get_logger("llmaz.gateway.signals")
        registry = registry if registry is not None else CollectorRegistry()
        self.stale_gauge = Gauge(
            "llmaz_gateway_stale_endpoints",
            "Routed engine endpoints whose load is not known now: their metrics scrapes failed several times in a "
            "row (engines without metrics included) or their last sample is older than the freshness bound. "
            "Routing falls back to the gateway's own counts for them.",
            registry=registry,
        )
        self.failures = Counter(
            "llmaz_gateway_engine_scrape_failures",
            "Engine metrics reads that failed, by kind: timeout, connection, malformed (not 200, too large, no "
            "known metric), unexpected (anything else raised; the scrape loop goes on). A cycle that failed as a "
            "whole counts as unexpected.",
            ["kind"],
            registry=registry,
        )
        for kind in FailureKind:
            self.failures.labels(kind.value)
        EngineMetricsAge(lambda: self._known, clock.now, registry)

    def on_cycle(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every scrape cycle, the new loads in place (flow control looks for room then). It
        must not await; what it raises counts as a failed cycle."""
        self._listeners.append(listener)

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        known = self._known.get(endpoint)
        if known is None or not self._fresh(known, self._clock.now()):
            return None
        return known.load

    def idle_for(self, endpoint: Endpoint) -> float | None:
        known = self._known.get(endpoint)
        if known is None or known.busy_at is None:
            return None
        now = self._clock.now()
        if known.working and self._fresh(known, now):
            return 0.0
        return max(0.0, now - known.busy_at)

    def adapters(self, endpoint: Endpoint) -> EngineAdapters | None:
        known = self._known.get(endpoint)
        if known is None or known.failures >= STALE_AFTER_FAILURES or known.adapters is None:
            return None
        if self._clock.now() - known.adapters_read_at >= ADAPTERS_STALE_INTERVALS * self.adapters_interval:
            return None
        return known.adapters

    def engine(self, endpoint: Endpoint) -> str | None:
        """The engine last recognised at `endpoint` (a key of `engines.ENGINES`), or None."""
        known = self._known.get(endpoint)
        return None if known is None else known.engine

    def stale_endpoints(self) -> int:
        now = self._clock.now()
        return sum(1 for known in self._known.values() if not self._fresh(known, now))

    def _fresh(self, known: _Known, now: float) -> bool:
        return (
            known.failures < STALE_AFTER_FAILURES and known.load is not None and now - known.read_at < self.stale_after
        )

    async def run(self) -> None:
        try:
            while True:
                started = self._clock.now()
                await self.cycle()
                await self._clock.sleep(self.interval - (self._clock.now() - started))
        finally:
            await self.close()

    async def cycle(self) -> None:
        """One scrape cycle that never raises (but for cancellation): a failure is counted, logged once until a cycle
        succeeds again, and the loop goes on."""
        try:
            await self.scrape()
        except Exception as exc:
            self.failures.labels(FailureKind.UNEXPECTED.value).inc()
            if self._cycle_failure is None:
                self._log.exception("engine metrics cycle failed; trying again next interval")
            self._cycle_failure = f"{type(exc).__name__}: {exc}"
            self.cycles += 1
        else:
            if self._cycle_failure is not None:
                self._log.info("engine metrics cycles succeed again")
            self._cycle_failure = None

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
        for listener in self._listeners:
            listener()

    async def _scrape(self, endpoint: Endpoint, known: _Known, list_adapters: bool) -> None:
        async with self._limit:
            asked = self._clock.now()
            try:
                async with asyncio.timeout(self.timeout):
                    engine, load = await self._read(endpoint, known)
                    load = dataclasses.replace(load, observed_at=asked)
            except ScrapeError as exc:
                self._failed(endpoint, known, FailureKind.MALFORMED, str(exc))
            except TimeoutError:
                self._failed(endpoint, known, FailureKind.TIMEOUT, f"no answer within {self.timeout:g} s")
            except (aiohttp.ClientError, OSError) as exc:
                self._failed(endpoint, known, FailureKind.CONNECTION, f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug, or an engine answer nobody foresaw: never the end of the loop
                self._failed(endpoint, known, FailureKind.UNEXPECTED, f"{type(exc).__name__}: {exc}", exc)
            else:
                self._succeeded(endpoint, known, engine, load)
                adapter_api = engines.engine(engine).adapters
                if list_adapters and adapter_api.listing_path is not None and self._clock.now() >= known.adapters_due:
                    await self._list_adapters(endpoint, known, adapter_api)

    async def _list_adapters(self, endpoint: Endpoint, known: _Known, api: engines.AdapterApi) -> None:
        known.adapters_due = self._clock.now() + self.adapters_interval
        assert api.listing_path is not None
        assert api.parse is not None
        try:
            async with asyncio.timeout(self.timeout):
                url = endpoint.connect_url(self.resolve) + api.listing_path
                found = api.parse(await self._get(url, MAX_LISTING_BYTES, accept="application/json"))
        except (ScrapeError, ValueError) as exc:
            reason = str(exc)
        except TimeoutError:
            reason = f"no answer within {self.timeout:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # as for a load read: counted, and the loop goes on
            self.failures.labels(FailureKind.UNEXPECTED.value).inc()
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if known.adapters_failure is not None:
                self._log.info("engine adapters known again", endpoint=str(endpoint))
            changed = found != known.adapters
            known.adapters, known.adapters_read_at, known.adapters_failure = found, self._clock.now(), None
            if changed:
                self.catalog.notify_endpoint(endpoint)
            return
        if known.adapters_failure is None:
            self._log.warning("engine adapters unknown: listing failed", endpoint=str(endpoint), reason=bounded(reason))
        if known.adapters is not None:
            self.catalog.notify_endpoint(endpoint)  # every endpoint of the model counts as a holder again
        known.adapters, known.adapters_failure = None, reason

    def _failed(
        self, endpoint: Endpoint, known: _Known, kind: FailureKind, reason: str, exc: BaseException | None = None
    ) -> None:
        self.failures.labels(kind.value).inc()
        known.failures += 1
        if known.failures == 1:  # the state changes: failing (its load kept until it turns stale)
            fields = {"endpoint": str(endpoint), "reason": bounded(reason), "kind": kind.value}
            if exc is not None:
                self._log.error("engine metrics scrape raised", exc_info=exc, **fields)
            else:
                self._log.warning("engine metrics scrape failed: keeping the last sample", **fields)
        if known.failures == STALE_AFTER_FAILURES:
            self._log.warning(
                "engine load unknown: metrics scrape failed",
                endpoint=str(endpoint),
                reason=bounded(reason),
                failures=known.failures,
            )
        known.failure = reason
        known.adapters_due = -math.inf  # listed again once it answers: it may have restarted with other adapters

    def _succeeded(self, endpoint: Endpoint, known: _Known, engine: str, load: EngineLoad) -> None:
        if known.failures >= STALE_AFTER_FAILURES:
            self._log.info("engine load known again", endpoint=str(endpoint), engine=engine)
        elif known.failures:
            self._log.info("engine metrics scrape succeeds again", endpoint=str(endpoint), engine=engine)
        elif known.engine is None:
            self._log.info("engine load known", endpoint=str(endpoint), engine=engine)
        now = self._clock.now()
        previous = known.load.work if known.load is not None and known.engine == engine else None
        moved = previous is not None and load.work is not None and load.work > previous
        known.working = load.requests > 0 or moved
        if known.working:
            known.busy_at = now
        known.engine, known.load, known.read_at, known.failure, known.failures = engine, load, now, None, 0

    async def _read(self, endpoint: Endpoint, known: _Known) -> tuple[str, EngineLoad]:
        base_url = endpoint.connect_url(self.resolve)
        page = await self._get(base_url + "/metrics", MAX_PAGE_BYTES)
        try:
            engine, load = read_page(page.decode("utf-8"))
        except UnicodeDecodeError:
            raise ScrapeError("malformed page: not UTF-8") from None
        metrics = engines.engine(engine).metrics
        if metrics is not None and metrics.slots_utilisation:
            if known.failures or (known.slots is not None and load.running > known.slots):
                known.slots, known.props_due = None, -math.inf  # back from a failure: it may have restarted
            if known.slots is None and self._clock.now() >= known.props_due:
                known.slots = await self._read_slots(endpoint, base_url, known)
            if known.slots is not None:
                utilisation = min(1.0, load.running / known.slots)
                load = dataclasses.replace(load, utilisation=utilisation, slots=known.slots)
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
