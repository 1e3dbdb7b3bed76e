"""The routing benchmark's pure parts: the ceiling any router could reach, the median over runs, the caches'
sizes, the same prompts for every strategy, and the goals it reports."""

from __future__ import annotations

from typing import Any

import pytest
from suite.routing_bench import (
    KV_BYTES_PER_TOKEN,
    MIB,
    STRATEGIES,
    WORKLOADS,
    Outcome,
    Sample,
    figures,
    goals,
    median_figures,
    report,
    reusable_tokens,
    sessions,
)


@pytest.mark.parametrize(
    ("prompts", "reusable", "total"),
    [
        ([], 0, 0),
        ([[1, 2, 3]], 0, 3),  # the first prompt is new
        ([[1, 2, 3], [1, 2, 3]], 2, 6),  # the same again: all but its last token
        ([[1, 2, 3], [1, 2, 9, 9]], 2, 7),  # a shared prefix of 2
        ([[5, 6], [1, 2, 3], [1, 2, 3, 4]], 3, 9),  # the best earlier prompt counts, not the latest
        ([[1, 2, 3, 4], [1, 2]], 1, 6),  # a prompt inside an earlier one: all but its last token
        ([[1, 2, 3], [4, 5, 6]], 0, 6),  # nothing shared
    ],
)
def test_a_prompt_can_reuse_at_most_its_longest_prefix_shared_with_an_earlier_one_less_its_last_token(
    prompts: list[list[int]], reusable: int, total: int
) -> None:
    assert reusable_tokens(prompts) == (reusable, total)


def test_the_ceiling_of_groups_sharing_a_system_prompt_is_every_request_but_each_groups_first() -> None:
    system, questions = list(range(1000)), [[2000 + q, 3000 + q] for q in range(4)]
    groups = [[[g, *system, *question] for question in questions] for g in range(2)]
    prompts = [prompt for group in groups for prompt in group]
    reusable, total = reusable_tokens(prompts)
    assert reusable == 2 * 3 * 1001  # 3 later requests of each group reuse the group's 1,001-token prefix
    assert total == 8 * 1003


def test_efficiency_is_the_cached_ratio_over_the_ceiling() -> None:
    outcome = Outcome([Sample(ok=True, prompt_tokens=100, cached_tokens=40), Sample(ok=True, prompt_tokens=100)], 2.0)
    found = figures(outcome, ceiling=0.5)
    assert found["cached_ratio"] == pytest.approx(0.2)
    assert found["efficiency"] == pytest.approx(0.4)
    assert figures(outcome)["efficiency"] is None


def test_over_runs_each_figure_is_the_median_and_the_failures_are_summed() -> None:
    runs = [
        {"requests": 64, "failed": 0, "errors": [], "cached_ratio": 0.5, "ttft_p50": 1.0, "ceiling": None},
        {"requests": 64, "failed": 1, "errors": ["HTTP 503"], "cached_ratio": 0.7, "ttft_p50": 3.0, "ceiling": None},
        {"requests": 64, "failed": 0, "errors": [], "cached_ratio": 0.6, "ttft_p50": 2.0, "ceiling": None},
    ]
    found = median_figures(runs)
    assert found == {
        "runs": 3, "requests": 192, "failed": 1, "errors": ["HTTP 503"], "cached_ratio": 0.6, "ttft_p50": 2.0,
        "ceiling": None,
    }  # fmt: skip


def test_every_strategy_of_a_run_gets_the_same_prompts_and_another_run_other_ones() -> None:
    first = [(s.system, s.turns) for s in sessions("shared-prefix", 0)]
    assert first == [(s.system, s.turns) for s in sessions("shared-prefix", 0)]
    assert first != [(s.system, s.turns) for s in sessions("shared-prefix", 1)]


def test_each_host_cache_holds_its_prefixes_with_the_margin_and_no_more_than_one_more() -> None:
    for workload in WORKLOADS:
        state = workload.prefix_tokens * KV_BYTES_PER_TOKEN
        held = workload.cache_ram_mib * MIB / state
        assert workload.held_prefixes * 1.25 <= held < workload.held_prefixes + 1 + 0.5, workload.name


def test_the_saturation_workload_keeps_more_requests_in_flight_than_the_replicas_have_slots() -> None:
    (saturation,) = [w for w in WORKLOADS if w.name == "saturation"]
    assert saturation.in_flight > 4 * 2


def _figures(**by_workload: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {w.name: {s: {"failed": 0, **by_workload.get(w.name, {}).get(s, {})} for s in STRATEGIES} for w in WORKLOADS}


def test_the_goals_judge_efficiency_against_the_ceiling_and_requests_per_second_at_saturation() -> None:
    found = _figures(**{
        "shared-prefix": {"prefix-aware": {"efficiency": 0.93}, "prefix-aware x2": {"efficiency": 0.80}},
        "saturation": {"prefix-aware": {"requests_per_second": 4.0}, "least-outstanding": {"requests_per_second": 4.4}},
    })  # fmt: skip
    verdicts = {row["goal"]: row["pass"] for row in goals(found)}
    assert verdicts["(a) efficiency, prefix-aware >= 0.90 of the ceiling"] is True
    assert verdicts["(a) efficiency, prefix-aware x2 >= 0.85"] is False
    assert verdicts["(d) requests/s at 16 in flight, prefix-aware / least-outstanding >= 0.95"] is False
    assert verdicts["(b) efficiency, prefix-aware >= 0.92 of the ceiling"] is None  # not measured
    assert verdicts["failed requests, every strategy and workload = 0"] is True


def test_the_report_shows_the_ceiling_and_the_efficiency_beside_the_ratio() -> None:
    row = {
        "requests": 64, "failed": 0, "cached_ratio": 0.61, "ceiling": 0.861, "efficiency": 0.71,
        "prefill_tokens": 26000, "ttft_p50": 0.5, "ttft_p90": 1.0, "total_p50": 0.8, "requests_per_second": 3.0,
    }  # fmt: skip
    result = {
        "slots": 2, "runs": 3,
        "workloads": [{"name": "shared-prefix", "title": "(a)", "cache_ram_mib": 3, "in_flight": 4}],
        "figures": {"shared-prefix": {"prefix-aware": row}},
        "goals": [],
    }  # fmt: skip
    text = report(result)
    assert "medians of 3 runs" in text
    assert "| prefix-aware | 0.61 | 0.861 | 0.71 | 26000 |" in text
