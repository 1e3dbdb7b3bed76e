"""The gateway scenario's proxy comparison: CPU per chunk, histogram arithmetic and the goals' PASS/FAIL."""

from __future__ import annotations

import math
from typing import Any

import pytest
from suite import gateway_goals as goals
from suite.gateway_launcher import HELD_MODEL, StaticInformer, held_objects
from suite.gateway_proxies import DECISION_METRIC, decision_reading
from suite.gateway_streams import held_count
from suite.settings import Settings

from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.scaling.outlook import Coming
from llmaz.gateway.scaling.waker import Waker

PAGE = """# HELP llmaz_gateway_epp_decision_seconds The endpoint picker's time
# TYPE llmaz_gateway_epp_decision_seconds histogram
llmaz_gateway_epp_decision_seconds_bucket{{le="0.001"}} {a}
llmaz_gateway_epp_decision_seconds_bucket{{le="0.002"}} {b}
llmaz_gateway_epp_decision_seconds_bucket{{le="0.005"}} {c}
llmaz_gateway_epp_decision_seconds_bucket{{le="+Inf"}} {d}
llmaz_gateway_epp_decision_seconds_count {d}
llmaz_gateway_requests_total{{model="m",code="200"}} 3.0
"""


def page(a: float, b: float, c: float, d: float) -> str:
    return PAGE.format(a=a, b=b, c=c, d=d)


def test_cpu_per_chunk_is_each_process_and_their_sum_in_microseconds() -> None:
    per = goals.cpu_us_per_chunk({"envoy": 0.5, "epp": 0.25}, 10_000)
    assert per == {"envoy": 50.0, "epp": 25.0, "total": 75.0}


def test_cpu_per_chunk_without_chunks_is_not_a_number() -> None:
    assert all(math.isnan(v) for v in goals.cpu_us_per_chunk({"envoy": 1.0}, 0).values())


@pytest.mark.parametrize(
    ("streams", "errors", "chunks", "intact"),
    [(100, 0, 25_600, True), (100, 1, 25_600, False), (100, 0, 25_599, False), (0, 0, 0, False)],
)
def test_chunks_are_intact_only_with_every_stream_whole(streams: int, errors: int, chunks: int, intact: bool) -> None:
    assert goals.chunks_intact(streams, errors, chunks, 256) is intact


def test_the_histogram_is_read_from_its_page_and_the_delta_is_between_scrapes() -> None:
    before = goals.parse_histogram(page(1, 2, 3, 3), DECISION_METRIC)
    after = goals.parse_histogram(page(91, 101, 103, 104), DECISION_METRIC)
    assert before == [(0.001, 1.0), (0.002, 2.0), (0.005, 3.0), (math.inf, 3.0)]
    assert goals.bucket_delta(after, before) == [(0.001, 90.0), (0.002, 99.0), (0.005, 100.0), (math.inf, 101.0)]


def test_a_page_without_the_histogram_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=DECISION_METRIC):
        goals.parse_histogram("up 1\n", DECISION_METRIC)


def test_the_share_within_a_bound_is_exact_at_a_bucket_bound() -> None:
    buckets = [(0.001, 90.0), (0.002, 99.0), (0.005, 100.0), (math.inf, 100.0)]
    assert goals.share_within(buckets, 0.002) == 0.99
    with pytest.raises(ValueError, match="bucket bound"):
        goals.share_within(buckets, 0.003)


def test_the_quantile_interpolates_within_its_bucket_as_promql_does() -> None:
    buckets = [(0.001, 50.0), (0.002, 100.0), (math.inf, 100.0)]
    assert goals.histogram_quantile(buckets, 0.5) == pytest.approx(0.001)
    assert goals.histogram_quantile(buckets, 0.75) == pytest.approx(0.0015)
    assert goals.histogram_quantile(buckets, 0.25) == pytest.approx(0.0005)


def test_a_quantile_in_the_infinite_bucket_is_the_last_finite_bound_and_none_is_nan() -> None:
    assert goals.histogram_quantile([(0.001, 1.0), (math.inf, 10.0)], 0.99) == 0.001
    assert math.isnan(goals.histogram_quantile([(0.001, 0.0), (math.inf, 0.0)], 0.5))


def test_the_decision_reading_counts_only_the_phases_decisions() -> None:
    sent = {"sent": 100, "failed": 0}
    reading = decision_reading(page(1, 2, 3, 3), page(91, 101, 103, 103), sent, 300.0)
    assert reading["decisions"] == 100
    assert reading["share_within_bound"] == pytest.approx(0.99)
    assert reading["p99_ms"] == pytest.approx(2.0)


def stream(cpu_total: float, p99: float, errors: int = 0, intact: bool = True) -> dict[str, Any]:
    return {"cpu_us_per_chunk": {"total": cpu_total}, "percentiles": {"chunk_delay": {"p99": p99}},
            "errors": errors, "direct_errors": 0, "chunks": 25_600, "streams": 100, "tokens": 256,
            "intact": intact}  # fmt: skip


def test_envoy_with_the_picker_passes_within_its_cpu_and_delay_bounds() -> None:
    streams = {
        goals.ENVOY: stream(40.0, 1.0),
        goals.ENVOY_EPP: stream(52.0, 1.2),
        goals.ENVOY_EPP_DUPLEX: stream(70, 2),
    }
    decision = {"rate": 300.0, "p99_ms": 1.5, "share_within_bound": 0.995, "decisions": 3000, "failed": 0}
    found = goals.evaluate(streams, decision)
    assert all(g.passed for g in found), [g.row() for g in found]
    assert len(found) == 5


def test_each_goal_fails_past_its_bound() -> None:
    streams = {
        goals.ENVOY: stream(40.0, 1.0),
        goals.ENVOY_EPP: stream(52.1, 1.21),  # 1.3025 x the CPU, the floor's p99 + 0.21 ms
        goals.ENVOY_EPP_DUPLEX: stream(70.0, 2.0, errors=1, intact=False),
    }
    decision = {"rate": 300.0, "p99_ms": 2.1, "share_within_bound": 0.989, "decisions": 3000, "failed": 2}
    found = goals.evaluate(streams, decision)
    assert not any(g.passed for g in found), [g.row() for g in found]
    failed = next(g for g in found if g.name.startswith("failed requests"))
    assert failed.measured == f"{goals.ENVOY_EPP_DUPLEX} 1, EPP decision phase 2"


def test_a_goal_whose_subjects_did_not_run_is_left_out() -> None:
    found = goals.evaluate({goals.GATEWAY: stream(100.0, 5.0)}, None)
    assert [g.name for g in found] == ["failed requests, every path"]
    assert found[0].passed
    assert found[0].row() == "| failed requests, every path | 0 | none | PASS |"


def test_the_stream_subjects_are_named_comma_separated_and_an_unknown_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BENCH_GATEWAY_STREAM_SUBJECTS", f"{goals.ENVOY}, {goals.ENVOY2_EPP}")
    assert Settings.from_env().gateway_stream_subjects == (goals.ENVOY, goals.ENVOY2_EPP)
    monkeypatch.setenv("BENCH_GATEWAY_STREAM_SUBJECTS", "envoy,nginx")
    with pytest.raises(ValueError, match="BENCH_GATEWAY_STREAM_SUBJECTS: unknown nginx"):
        Settings.from_env()


HELD_PAGE = """# HELP llmaz_gateway_requests_held Requests waiting for a ready endpoint, by model.
# TYPE llmaz_gateway_requests_held gauge
llmaz_gateway_requests_held{model="bench-model"} 0.0
llmaz_gateway_requests_held{model="bench-held"} 250.0
"""


def test_the_held_requests_of_a_model_are_read_from_the_pickers_gauge_and_none_is_zero() -> None:
    assert held_count(HELD_PAGE, "bench-held") == 250
    assert held_count(HELD_PAGE, "bench-model") == 0
    assert held_count(HELD_PAGE, "another") == 0
    assert held_count("", "bench-held") == 0


async def test_the_launchers_held_model_is_served_and_its_requests_wait_for_a_starting_replica() -> None:
    open_model, playground = held_objects()
    catalog = Catalog(StaticInformer([playground]), StaticInformer([]), StaticInformer([open_model]), [])
    assert catalog.serves(HELD_MODEL)
    assert catalog.endpoints(HELD_MODEL) == []
    coming = await Waker(catalog, None).wake(HELD_MODEL)
    assert coming is Coming.STARTING
