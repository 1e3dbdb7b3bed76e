"""Engine signals: the metrics pages of each engine read, and the scraper's bounds, freshness, logs and gauge, against
fake engines on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway
from llmaz.gateway.routing import signals as signals_module
from llmaz.gateway.routing.load import EngineLoad, NoSignals
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.signals import (
    DEFAULT_TIMEOUT,
    MAX_PAGE_BYTES,
    STALE_AFTER_FAILURES,
    EngineSignals,
    ScrapeError,
    read_page,
    scan_samples,
    total_slots,
)
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

from . import engine_pages as pages
from .support import WAIT, Cluster, FakeEngine, endpoint_slice, engines, refused_endpoint, scraping

# --- the pages ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "engine", "load"),
    [
        (pages.llamacpp(2, 1), "llamacpp", EngineLoad(2, 1, None)),
        (pages.vllm((3,), (4,), (0.42,)), "vllm", EngineLoad(3, 4, 0.42)),
        (pages.vllm((3,), (0,), (0.5,), kv_metric="vllm:gpu_cache_usage_perc"), "vllm", EngineLoad(3, 0, 0.5)),
        (pages.sglang(5, 7, 0.28), "sglang", EngineLoad(5, 7, 0.28)),
        (pages.tgi(6, 2), "tgi", EngineLoad(6, 2, None)),
    ],
    ids=["llamacpp", "vllm", "vllm-before-0.10", "sglang", "tgi"],
)
def test_each_engines_page_gives_its_engine_and_load(page: str, engine: str, load: EngineLoad) -> None:
    assert read_page(page) == (engine, load)


def test_request_counts_are_summed_over_label_sets_and_utilisation_is_the_fullest() -> None:
    page = pages.vllm((2, 3), (1, 0), (0.25, 0.75))
    assert read_page(page) == ("vllm", EngineLoad(5, 1, 0.75))


def test_label_values_with_braces_quotes_and_spaces_do_not_confuse_the_scanner() -> None:
    page = pages.vllm((2,), (1,), (0.5,), model='org/m {v2} \\"q\\" x')
    assert read_page(page) == ("vllm", EngineLoad(2, 1, 0.5))


def test_only_exact_names_on_sample_lines_count() -> None:
    page = (
        "# HELP tgi_queue_size 99\n# TYPE tgi_queue_size gauge\n"
        "tgi_queue_size_total 50\ntgi_queue_size 3 1700000000000\ntgi_batch_current_size\t4\r\n"
    )
    assert scan_samples(page, {"tgi_queue_size", "tgi_batch_current_size"}) == {
        "tgi_queue_size": [3.0],
        "tgi_batch_current_size": [4.0],
    }
    assert read_page(page) == ("tgi", EngineLoad(4, 3, None))


def test_an_out_of_range_utilisation_is_clamped_and_nan_is_unknown() -> None:
    assert read_page(pages.sglang(1, 0, 1.5))[1].utilisation == 1.0
    assert read_page(pages.sglang(1, 0, float("nan")))[1].utilisation is None


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        ("<html><body>Not Found</body></html>", "none of the known engine metrics"),
        (pages.llamacpp(1, 0).replace("llamacpp:requests_deferred 0", ""), "without llamacpp:requests_deferred"),
        (pages.llamacpp(1, 0).replace("processing 1", "processing one"), "no number for llamacpp:requests_processing"),
        (pages.tgi(1, 0).replace("tgi_queue_size 0", "tgi_queue_size -2"), "tgi_queue_size is -2"),
        ('vllm:num_requests_running{model_name="m 1.0\n', "unterminated labels"),
        ("tgi_batch_current_size\ntgi_queue_size 0\n", "no number for tgi_batch_current_size"),
    ],
    ids=["not-metrics", "missing-waiting", "not-a-number", "negative", "unterminated-labels", "no-value"],
)
def test_a_page_without_a_readable_load_says_why(page: str, reason: str) -> None:
    with pytest.raises(ScrapeError, match=reason):
        read_page(page)


def test_total_slots_comes_from_props() -> None:
    assert total_slots(pages.llamacpp_props(4)) == 4
    for bad in (b"[]", b"not json", b'{"total_slots": 0}', b'{"total_slots": true}', b"{}"):
        with pytest.raises(ScrapeError):
            total_slots(bad)


def test_a_large_vllm_page_sums_every_sample() -> None:
    # How long the scan takes is a benchmark's reading (make bench-picker), not this test's.
    page = pages.vllm((3,), (1,), (0.5,)) * 200  # about 1 MiB of histograms and gauges
    engine, load = read_page(page)
    assert (engine, load.running, load.waiting) == ("vllm", 600, 200)


# --- the scraper -------------------------------------------------------------------------------------------------


def serve_page(engine: FakeEngine, metrics: str | bytes, props: bytes | None = None, status: int = 200) -> None:
    """`engine` answers /metrics with `metrics` (and `status`), /props with `props`, anything else with 404."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/metrics":
            body = metrics.encode() if isinstance(metrics, str) else metrics
            return web.Response(body=body, status=status, content_type="text/plain")
        if request.path == "/props" and props is not None:
            return web.Response(body=props, content_type="application/json")
        return web.Response(status=404)

    engine.handler = handle


def paths(engine: FakeEngine) -> list[str]:
    return [seen.path_qs for seen in engine.requests]


def failures(signals: EngineSignals, kind: str) -> float:
    return next(
        s.value
        for m in signals.failures.collect()
        for s in m.samples
        if s.labels.get("kind") == kind and s.name.endswith("_total")
    )


def stale_gauge(signals: EngineSignals) -> float:
    (family,) = signals.stale_gauge.collect()
    (sample,) = family.samples
    return sample.value


def transitions(logs: list[MutableMapping[str, Any]]) -> list[tuple[str, str]]:
    return [(log["event"], log["endpoint"]) for log in logs if "engine load" in log["event"]]


async def test_every_routed_endpoint_is_read_and_unrouted_ones_are_not() -> None:
    cluster = Cluster().synced()
    async with engines(3) as (llama, vllm, unrouted), scraping(cluster) as signals:
        serve_page(llama, pages.llamacpp(1, 0), pages.llamacpp_props(4))
        serve_page(vllm, pages.vllm((2,), (3,), (0.6,)))
        serve_page(unrouted, pages.tgi(1, 1))
        cluster.serve("a", llama.endpoint)
        cluster.serve("b", vllm.endpoint)
        await signals.scrape()
        assert signals.load(llama.endpoint) == EngineLoad(1, 0, 0.25)
        assert signals.load(vllm.endpoint) == EngineLoad(2, 3, 0.6)
        assert [load.slots for load in map(signals.load, (llama.endpoint, vllm.endpoint)) if load] == [4, None]
        assert (signals.engine(llama.endpoint), signals.engine(vllm.endpoint)) == ("llamacpp", "vllm")
        assert signals.load(unrouted.endpoint) is None
        assert paths(unrouted) == []
        assert stale_gauge(signals) == 0


async def test_a_load_says_when_its_engine_was_asked() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (llama,), scraping(cluster, clock=clock) as signals:
        serve_page(llama, pages.llamacpp(1, 0), pages.llamacpp_props(2))
        cluster.serve("a", llama.endpoint)
        asked = clock.now()
        await signals.scrape()
        load = signals.load(llama.endpoint)
        assert load is not None
        assert load.observed_at == asked


async def test_llamacpp_slots_are_read_once_and_again_after_a_failure() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (llama,), scraping(cluster) as signals:
        cluster.serve("a", llama.endpoint)
        serve_page(llama, pages.llamacpp(1, 0), pages.llamacpp_props(2))
        for _ in range(3):
            await signals.scrape()
        assert paths(llama).count("/props") == 1
        assert signals.load(llama.endpoint) == EngineLoad(1, 0, 0.5)

        serve_page(llama, "", status=503)  # restarting
        for _ in range(STALE_AFTER_FAILURES):
            await signals.scrape()
        assert signals.load(llama.endpoint) is None
        serve_page(llama, pages.llamacpp(1, 3), pages.llamacpp_props(4))  # back, with more slots
        await signals.scrape()
        assert paths(llama).count("/props") == 2
        assert signals.load(llama.endpoint) == EngineLoad(1, 3, 0.25)


async def test_llamacpp_slots_are_read_again_when_more_requests_run_than_it_had() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (llama,), scraping(cluster) as signals:
        cluster.serve("a", llama.endpoint)
        serve_page(llama, pages.llamacpp(1, 0), pages.llamacpp_props(2))
        await signals.scrape()
        serve_page(llama, pages.llamacpp(3, 0), pages.llamacpp_props(6))
        await signals.scrape()
        assert paths(llama).count("/props") == 2
        assert signals.load(llama.endpoint) == EngineLoad(3, 0, 0.5)


async def test_without_props_llamacpp_load_is_known_without_utilisation_and_props_is_retried_later() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (llama,), scraping(cluster, clock=clock) as signals:
        cluster.serve("a", llama.endpoint)
        serve_page(llama, pages.llamacpp(1, 0))
        with capture_logs() as logs:
            await signals.scrape()
            await signals.scrape()
            clock.step(10.0)
            await signals.scrape()
        assert signals.load(llama.endpoint) == EngineLoad(1, 0, None)
        assert paths(llama).count("/props") == 2
        assert [log["reason"] for log in logs if log["event"] == "llama.cpp slots unknown"] == ["HTTP 404 from /props"]
        clock.step(10.0)
        serve_page(llama, pages.llamacpp(1, 0), pages.llamacpp_props(4))
        await signals.scrape()
        assert signals.load(llama.endpoint) == EngineLoad(1, 0, 0.25)


async def test_an_engine_that_never_answers_is_stale_and_the_cycle_ends_within_its_timeout() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (silent, fast), scraping(cluster, timeout=0.3) as signals:
        silent.handler = silent.hang
        serve_page(fast, pages.tgi(1, 2))
        cluster.serve("a", silent.endpoint, fast.endpoint)
        with capture_logs() as logs:
            for _ in range(STALE_AFTER_FAILURES):
                started_at = time.monotonic()
                await asyncio.wait_for(signals.scrape(), WAIT)
                elapsed = time.monotonic() - started_at
                assert elapsed < 0.3 + 2.0, f"a cycle took {elapsed:.2f} s with a 0.3 s timeout"
        assert signals.load(silent.endpoint) is None
        assert signals.load(fast.endpoint) == EngineLoad(1, 2, None)
        assert stale_gauge(signals) == 1
        stale = [log for log in logs if log["event"] == "engine load unknown: metrics scrape failed"]
        assert [(log["endpoint"], log["reason"]) for log in stale] == [(str(silent.endpoint), "no answer within 0.3 s")]


@pytest.mark.parametrize(
    ("metrics", "status", "reason"),
    [
        (pages.tgi(1, 1), 500, "HTTP 500 from /metrics"),
        ("tgi_batch_current_size one\ntgi_queue_size 0\n", 200, "malformed page: no number"),
        (b"\xff\xfe" + pages.tgi(1, 1).encode(), 200, "malformed page: not UTF-8"),
        ("# nothing here\nprocess_cpu_seconds_total 3.2\n", 200, "none of the known engine metrics"),
    ],
    ids=["500", "malformed", "not-utf8", "missing-metrics"],
)
async def test_failed_scrapes_keep_the_last_load_until_several_in_a_row_make_it_stale_with_its_reason(
    metrics: str | bytes, status: int, reason: str
) -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        cluster.serve("a", engine.endpoint)
        serve_page(engine, pages.tgi(1, 1))
        await signals.scrape()
        assert signals.load(engine.endpoint) == EngineLoad(1, 1, None)
        serve_page(engine, metrics, status=status)
        with capture_logs() as logs:
            for _ in range(STALE_AFTER_FAILURES - 1):
                await signals.scrape()
                assert signals.load(engine.endpoint) == EngineLoad(1, 1, None)
                assert stale_gauge(signals) == 0
            await signals.scrape()
        assert signals.load(engine.endpoint) is None
        assert stale_gauge(signals) == 1
        assert [log["event"] for log in logs] == [
            "engine metrics scrape failed: keeping the last sample",
            "engine load unknown: metrics scrape failed",
        ]
        assert all(reason in log["reason"] for log in logs)
        assert failures(signals, "malformed") == STALE_AFTER_FAILURES


async def test_an_exception_nobody_foresaw_in_a_read_is_counted_logged_once_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        cluster.serve("a", engine.endpoint)
        serve_page(engine, pages.tgi(1, 1))

        def broken(page: str) -> Any:
            raise KeyError("a bug")

        monkeypatch.setattr(signals_module, "read_page", broken)
        with capture_logs() as logs:
            for _ in range(5):
                await signals.scrape()
        assert signals.load(engine.endpoint) is None
        assert failures(signals, "unexpected") == 5
        raised = [log for log in logs if log["event"] == "engine metrics scrape raised"]
        assert len(raised) == 1
        assert "KeyError" in raised[0]["reason"]
        monkeypatch.undo()
        await signals.scrape()
        assert signals.load(engine.endpoint) == EngineLoad(1, 1, None)


async def test_a_cycle_that_fails_as_a_whole_is_counted_and_the_loop_runs_the_next_one() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with scraping(cluster, clock=clock) as signals:
        calls = 0

        def broken() -> list[Endpoint]:
            nonlocal calls
            calls += 1
            raise RuntimeError("the catalog is broken")

        signals.catalog.routed_endpoints = broken  # type: ignore[method-assign]
        with capture_logs() as logs:
            async with started(signals):
                await clock.wait_for_sleepers()
                clock.step(0.25)
                await eventually(lambda: calls == 2 and clock.sleepers == 1, WAIT, "the second cycle")
        assert failures(signals, "unexpected") == 2
        assert [log["event"] for log in logs].count("engine metrics cycle failed; trying again next interval") == 1


async def test_a_refused_endpoint_is_stale() -> None:
    cluster = Cluster().synced()
    with refused_endpoint() as refused:
        async with scraping(cluster) as signals:
            cluster.serve("a", refused)
            with capture_logs() as logs:
                for _ in range(STALE_AFTER_FAILURES):
                    await signals.scrape()
            assert signals.load(refused) is None
            assert stale_gauge(signals) == 1
            assert "ClientConnectorError" in logs[0]["reason"]


async def test_a_page_over_the_bound_is_malformed_even_without_a_length() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster, timeout=5.0) as signals:
        chunk = b"# padding " + b"x" * 65_000 + b"\n"

        async def endless(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            await resp.write(pages.tgi(1, 1).encode())
            for _ in range(MAX_PAGE_BYTES // len(chunk) + 2):
                await resp.write(chunk)
            await resp.write_eof()
            return resp

        engine.handler = endless
        cluster.serve("a", engine.endpoint)
        with capture_logs() as logs:
            await signals.scrape()
        assert signals.load(engine.endpoint) is None
        assert logs[0]["reason"] == f"/metrics is larger than {MAX_PAGE_BYTES} bytes"


async def test_one_log_line_per_transition_never_one_per_cycle() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        cluster.serve("a", engine.endpoint)
        where = str(engine.endpoint)
        with capture_logs() as logs:
            serve_page(engine, pages.sglang(1, 0, 0.1))
            for _ in range(3):
                await signals.scrape()
            serve_page(engine, "", status=500)
            for _ in range(3):
                await signals.scrape()
            serve_page(engine, "not metrics")  # another reason, still stale
            await signals.scrape()
            serve_page(engine, pages.sglang(2, 0, 0.1))
            for _ in range(3):
                await signals.scrape()
        assert transitions(logs) == [
            ("engine load known", where),
            ("engine load unknown: metrics scrape failed", where),
            ("engine load known again", where),
        ]
        assert signals.load(engine.endpoint) == EngineLoad(2, 0, 0.1)
        assert stale_gauge(signals) == 0


async def test_a_sample_older_than_stale_after_is_not_used() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (engine,), scraping(cluster, clock=clock, interval=0.25, stale_after=1.0) as signals:
        cluster.serve("a", engine.endpoint)
        serve_page(engine, pages.tgi(3, 0))
        await signals.scrape()
        clock.step(0.99)
        assert signals.load(engine.endpoint) == EngineLoad(3, 0, None)
        assert signals.stale_endpoints() == 0
        clock.step(0.01)
        assert signals.load(engine.endpoint) is None
        assert signals.stale_endpoints() == 1


async def test_endpoints_that_leave_the_catalog_are_forgotten() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (staying, leaving), scraping(cluster) as signals:
        serve_page(staying, pages.tgi(1, 0))
        leaving.handler = leaving.unavailable
        cluster.serve("a", staying.endpoint, leaving.endpoint)
        await signals.scrape()
        assert stale_gauge(signals) == 1
        assert signals.engine(staying.endpoint) == "tgi"
        cluster.slices.delete(endpoint_slice("pg-a-lb-1", "pg-a-lb", leaving.port, ("127.0.0.1", True, False)))
        seen = len(leaving.requests)
        await signals.scrape()
        assert len(leaving.requests) == seen
        assert stale_gauge(signals) == 0
        assert signals.stale_endpoints() == 0
        assert signals.load(leaving.endpoint) is None
        assert signals.load(staying.endpoint) == EngineLoad(1, 0, None)
        cluster.slices.delete(endpoint_slice("pg-a-lb-0", "pg-a-lb", staying.port, ("127.0.0.1", True, False)))
        await signals.scrape()
        assert signals.engine(staying.endpoint) is None
        assert signals.load(staying.endpoint) is None


async def test_at_most_max_concurrent_scrapes_run_at_once() -> None:
    cluster = Cluster().synced()
    active, peak, gate = 0, 0, asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            await gate.wait()
        finally:
            active -= 1
        return web.Response(text=pages.tgi(1, 0))

    async with engines(6) as fakes, scraping(cluster, max_concurrent=2, timeout=WAIT) as signals:
        for engine in fakes:
            engine.handler = slow
        cluster.serve("a", *(engine.endpoint for engine in fakes))
        cycle = asyncio.create_task(signals.scrape())
        await eventually(lambda: active == 2, WAIT, "two scrapes at the engines")
        assert sum(len(engine.requests) for engine in fakes) == 2
        gate.set()
        await asyncio.wait_for(cycle, WAIT)
        assert peak == 2
        assert all(signals.load(engine.endpoint) == EngineLoad(1, 0, None) for engine in fakes)


async def test_resolve_scrapes_another_address_and_keeps_the_endpoints_own() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster, resolve={"10.255.0.7": "127.0.0.1"}) as signals:
        serve_page(engine, pages.tgi(2, 5))
        remote = Endpoint("10.255.0.7", engine.port)
        cluster.serve("a", remote)
        await signals.scrape()
        assert signals.load(remote) == EngineLoad(2, 5, None)
        assert paths(engine) == ["/metrics"]


async def test_it_runs_a_cycle_every_interval_until_stopped() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (engine,), scraping(cluster, clock=clock) as signals:
        serve_page(engine, pages.tgi(1, 0))
        cluster.serve("a", engine.endpoint)
        async with started(signals):
            await clock.wait_for_sleepers()
            assert signals.cycles == 1
            assert signals.load(engine.endpoint) == EngineLoad(1, 0, None)
            serve_page(engine, pages.tgi(4, 0))
            clock.step(0.25)
            await eventually(lambda: signals.cycles == 2 and clock.sleepers == 1, WAIT, "the second cycle")
            assert signals.load(engine.endpoint) == EngineLoad(4, 0, None)
            assert len(engine.requests) == 2


async def test_listeners_hear_every_cycle_with_its_loads_in_place() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        serve_page(engine, pages.tgi(3, 2))
        cluster.serve("a", engine.endpoint)
        heard: list[EngineLoad | None] = []
        signals.on_cycle(lambda: heard.append(signals.load(engine.endpoint)))
        await signals.cycle()
        await signals.cycle()
        assert heard == [EngineLoad(3, 2, None), EngineLoad(3, 2, None)]


async def test_an_unknown_endpoint_has_no_load() -> None:
    async with scraping(Cluster().synced()) as signals:
        assert signals.load(Endpoint("10.0.0.1", 8080)) is None
        assert signals.engine(Endpoint("10.0.0.1", 8080)) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"interval": 0}, "interval must be a positive number of seconds, got 0 (0 turns engine signals off"),
        ({"interval": float("inf")}, "interval must be"),
        ({"timeout": -1.0}, "timeout must be a positive number of seconds, got -1.0"),
        ({"stale_after": 0.0}, "stale_after must be"),
        ({"max_concurrent": 0}, "max_concurrent must be at least 1, got 0"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_setting(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EngineSignals(Cluster().catalog(), **options)


def test_the_timeout_is_its_own_setting_above_the_interval_and_staleness_covers_a_slow_cycle() -> None:
    catalog = Cluster().catalog()
    defaults = EngineSignals(catalog)
    assert (defaults.interval, defaults.timeout, defaults.stale_after) == (0.25, DEFAULT_TIMEOUT, 2.0)
    assert defaults.timeout > defaults.interval
    quick = EngineSignals(catalog, interval=0.1)
    assert quick.timeout == DEFAULT_TIMEOUT
    assert quick.stale_after == pytest.approx(1.4)
    slow = EngineSignals(catalog, interval=2.0, timeout=3.0)
    assert (slow.timeout, slow.stale_after) == (3.0, 11.0)


async def test_an_engine_working_for_direct_clients_is_seen_by_its_requests_and_its_moving_counters() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (llama,), scraping(cluster, clock=clock) as signals:
        cluster.serve("a", llama.endpoint)
        serve_page(llama, pages.llamacpp(0, 0, predicted=100), pages.llamacpp_props(2))
        await signals.scrape()
        assert signals.idle_for(llama.endpoint) is None  # never seen working yet
        serve_page(llama, pages.llamacpp(1, 0, predicted=100), pages.llamacpp_props(2))
        clock.step(0.25)
        await signals.scrape()
        assert signals.idle_for(llama.endpoint) == 0.0  # a request running
        serve_page(llama, pages.llamacpp(0, 0, predicted=140), pages.llamacpp_props(2))
        clock.step(0.25)
        await signals.scrape()
        assert signals.idle_for(llama.endpoint) == 0.0  # none running now, but it generated tokens since
        clock.step(0.25)
        await signals.scrape()
        clock.step(10.0)
        assert signals.idle_for(llama.endpoint) == pytest.approx(10.25)  # its counters stood still since


def test_the_gateway_keeps_the_signals_it_is_given_and_none_by_default() -> None:
    catalog = Cluster().catalog()
    metrics = GatewayMetrics(process_collectors=False)
    assert isinstance(Gateway(catalog, metrics=metrics).signals, NoSignals)
    signals = EngineSignals(catalog)
    assert Gateway(catalog, metrics=metrics, signals=signals).signals is signals
