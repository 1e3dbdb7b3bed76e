"""The tenancy benchmark's pure parts: the interactive schedule, Jain's index, the served tokens of a window, a
budget's overshoot, the goals, the keys and the gateway's flags it deploys, and its report."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from suite.tenancy_bench import (
    BATCH,
    INTERACTIVE,
    MAX_TOKENS,
    TEAM_A,
    TEAM_B,
    Answer,
    Plan,
    admitted_until,
    allowed,
    budget_figures,
    budget_key,
    fairness_figures,
    gateway_patch,
    goals,
    jain,
    key_secrets,
    model_objects,
    overshoot,
    pause_after,
    priority_figures,
    report,
    retry_after,
    schedule,
)

from llmaz.gateway.proxy.keys import KeyPolicy, compact_secret, parse_secret


def ok(tenant: str, ended: float, tokens: int = 100, ttft: float | None = 0.5) -> Answer:
    return Answer(tenant, ended - 1, ended, 200, ttft, tokens, ok=True)


def shed(tenant: str, ended: float, status: int = 429, after: float = 5.0) -> Answer:
    return Answer(tenant, ended, ended, status, retry_after=after)


def test_the_interactive_schedule_is_evenly_paced_and_bounded_by_the_seconds() -> None:
    assert schedule(1.0, 5.0) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert schedule(2.0, 1.5) == [0.0, 0.5, 1.0]
    assert len(schedule(1.0, 60.0)) == 60


def test_jains_index_is_1_for_equal_shares_and_1_over_n_when_one_has_everything() -> None:
    assert jain([500.0, 500.0]) == 1.0
    assert jain([1000.0, 0.0]) == 0.5
    four_to_one = jain([800.0, 200.0])
    assert four_to_one is not None
    assert abs(four_to_one - 1000**2 / (2 * (800**2 + 200**2))) < 1e-12
    assert four_to_one < 0.95
    assert jain([]) is None
    assert jain([0.0, 0.0]) == 1.0


def test_fairness_counts_the_tokens_of_answers_that_ended_within_the_window_only() -> None:
    answers = [
        ok(TEAM_A.tenant, 5, 1000),  # before the window: the queue filling
        ok(TEAM_A.tenant, 12, 300),
        ok(TEAM_A.tenant, 20, 300),
        ok(TEAM_B.tenant, 15, 280),
        ok(TEAM_B.tenant, 25, 300),
        ok(TEAM_B.tenant, 60, 5000),  # after it: the streams stopping
        shed(TEAM_B.tenant, 30),
    ]
    figures = fairness_figures(answers, 10, 60)
    assert figures["served"] == {TEAM_A.tenant: 600, TEAM_B.tenant: 580}
    assert figures["jain"] == pytest.approx(1180**2 / (2 * (600**2 + 580**2)))
    assert figures["requests"][TEAM_B.tenant] == {"requests": 4, "ok": 3, "shed": 1, "failed": 0}


def test_a_budgets_overshoot_is_what_was_served_beyond_a_full_bucket_and_its_refill() -> None:
    assert allowed(1200, 60) == 2400
    assert allowed(1200, 30) == 1800
    assert overshoot(2400, 1200, 60) == 0
    assert overshoot(2430, 1200, 60) == 30
    assert overshoot(100, 1200, 60) == 0
    spent = [ok("budgeted", t, 120) for t in range(1, 21)] + [shed("budgeted", 21)]
    assert admitted_until(spent, 0) == 19  # the last admitted was sent at 19 (ended at 20); the refused at 21
    assert admitted_until([shed("budgeted", 3)], 2) == 2
    figures = budget_figures(spent, 1200, 0, 60)
    assert (figures["served"], figures["allowed"], figures["overshoot"]) == (2400, 2400, 0)
    assert figures["requests"] == {"requests": 21, "ok": 20, "shed": 1, "failed": 0}


def test_the_priority_ratio_is_the_interactive_p90_loaded_over_alone_and_ignores_the_batch() -> None:
    # p90 of ten: the 9th (nearest rank of 0.9 x 9 = 8.1, from 0), 0.28 alone and 0.38 beside the batch.
    unloaded = [ok(INTERACTIVE.tenant, t, ttft=0.2 + t / 100) for t in range(10)]
    loaded = [ok(INTERACTIVE.tenant, t, ttft=0.3 + t / 100) for t in range(10)]
    loaded += [ok(BATCH.tenant, t, ttft=20.0) for t in range(30)] + [shed(BATCH.tenant, 3)]
    figures = priority_figures(unloaded, loaded)
    assert figures["unloaded_p90"] == pytest.approx(0.28)
    assert figures["loaded_p90"] == pytest.approx(0.38)
    assert figures["ratio"] == pytest.approx(0.38 / 0.28)
    assert figures["interactive"] == {"requests": 10, "ok": 10, "shed": 0, "failed": 0}
    assert figures["batch"]["shed"] == 1


def figures_of(ratio: float | None, interactive_shed: int, jain_index: float | None, over: float) -> dict[str, Any]:
    return {
        "priority": {"ratio": ratio, "interactive": {"ok": 10, "shed": interactive_shed}},
        "fairness": {"jain": jain_index},
        "budget": {"overshoot": over, "requests": {"ok": 5}, "without_usage": 0},
        "failed": 0,
    }


def test_every_goal_passes_at_its_bound_and_fails_past_it_or_unmeasured() -> None:
    at_bounds = goals(figures_of(1.5, 0, 0.95, MAX_TOKENS), MAX_TOKENS)
    assert [g["pass"] for g in at_bounds] == [True] * 5
    past = goals(figures_of(1.51, 1, 0.949, MAX_TOKENS + 1), MAX_TOKENS)
    assert [g["pass"] for g in past] == [False, False, False, False, True]
    unmeasured = goals(figures_of(None, 0, None, 0), MAX_TOKENS)
    assert [g["pass"] for g in unmeasured] == [False, True, False, True, True]


def test_a_budget_measured_without_the_engines_usage_does_not_pass() -> None:
    figures = figures_of(1.0, 0, 1.0, 0)
    figures["budget"]["without_usage"] = 3
    assert not goals(figures, MAX_TOKENS)[3]["pass"]


def test_a_refused_request_pauses_its_client_for_its_retry_after_within_the_part() -> None:
    assert pause_after(shed("t", 0, after=5), remaining=30) == 5
    assert pause_after(shed("t", 0, after=5), remaining=2) == 2
    assert pause_after(shed("t", 0, status=503, after=0), remaining=30) == 1
    assert pause_after(ok("t", 0), remaining=30) == 0
    assert (retry_after("3"), retry_after(None), retry_after("soon")) == (3, 0, 0)


def test_the_keys_are_secrets_the_gateway_accepts_with_their_priority_and_budget() -> None:
    secrets = key_secrets([BATCH, INTERACTIVE, budget_key(1200)])
    parsed = [stored_policy(secret) for secret in secrets]
    assert [(p.tenant, p.priority) for p in parsed] == [("batch", 2), ("interactive", 7), ("budgeted", 5)]
    assert parsed[2].tokens_per_minute == 1200
    assert parsed[0].tokens_per_minute is None
    assert all(s["metadata"]["labels"] == {"llmaz.io/api-key": "true"} for s in secrets)


def stored_policy(secret: dict[str, Any]) -> KeyPolicy:
    """The key the gateway reads from `secret` once the API server has stored its stringData as data."""
    data = {name: base64.b64encode(value.encode()).decode() for name, value in secret["stringData"].items()}
    entry = parse_secret(compact_secret({"metadata": secret["metadata"], "data": data}))
    assert entry.refused is None
    assert entry.policy is not None
    return entry.policy


def test_the_gateway_is_patched_with_flow_control_api_key_secrets_and_a_reserved_slot() -> None:
    patch = gateway_patch()
    assert [op["value"] for op in patch] == [
        "--flow-control=true",
        "--api-key-secrets=true",
        "--flow-reserved-slots=1",
    ]
    assert {op["path"] for op in patch} == {"/spec/template/spec/containers/0/args/-"}


def test_the_playground_runs_one_llama_cpp_replica_with_two_slots() -> None:
    playground = model_objects("s3://models/m/m.gguf", "http://10.0.0.1:9000")[-1]
    assert playground["spec"]["replicas"] == 1
    args = playground["spec"]["backendRuntimeConfig"]["args"]
    assert args[args.index("-np") + 1] == "2"
    # Every tenant sends one short prompt: routed by load, so no band waits behind another's request of it.
    assert playground["metadata"]["annotations"] == {"llmaz.io/routing-strategy": "least-outstanding"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seconds": 0}, "seconds and rate must be positive"),
        ({"fair_streams": (4, 0)}, "at least one stream per tenant"),
        ({"warmup": 60}, "warmup must be at least 0 and below seconds"),
        ({"tpm": 0}, "tpm and max_tokens must be positive"),
    ],
)
def test_a_plan_out_of_range_is_refused_naming_the_knob(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plan(**changes)


def test_the_report_shows_each_goal_and_not_measured_for_a_figure_that_never_came() -> None:
    figures = {
        "priority": priority_figures([], [ok(INTERACTIVE.tenant, 1)]),
        "fairness": fairness_figures([ok(TEAM_A.tenant, 20, 300), ok(TEAM_B.tenant, 20, 300)], 10, 60),
        "budget": budget_figures([ok("budgeted", 5, 100)], 1200, 0, 60),
        "failed": 0,
    }
    text = report({"plan": {"batch_streams": 32}, "figures": figures, "goals": goals(figures, MAX_TOKENS)})
    assert "not measured" in text.splitlines()[0]
    assert "Jain 1.000" in text
    assert "| Jain's index of served tokens, 4:1 offered >= 0.95 | 1 | PASS |" in text
    assert "| interactive TTFT p90 loaded <= 1.5x unloaded | not measured | FAIL |" in text
