"""The autoscale benchmark's pure parts: a staircase timeline to figures and goals, the answers' figures, Event
times, the Playground it serves (admissible, with the policy it states) and its report."""

from __future__ import annotations

from typing import Any

import pytest
from suite.autoscale_bench import (
    POLICY,
    Answer,
    Point,
    Policy,
    answer_figures,
    changes,
    event_at,
    goals,
    model_objects,
    report,
    scale_figures,
)
from suite.routing_bench import ready_count

from llmaz.apis.validation.autoscale import autoscale_policy

STEP_UP, LOAD_STOPPED = 60.0, 180.0


def timeline(*spans: tuple[float, float, int, int]) -> list[Point]:
    """A reading every second over each (start, end, replicas, ready) span, end excluded."""
    points: list[Point] = []
    for start, end, replicas, ready in spans:
        at = start
        while at < end:
            points.append(Point(at, replicas, ready, 8 if STEP_UP <= at < LOAD_STOPPED else 0))
            at += 1.0
    return points


# 1 replica while warm; the panic takes it to 3 then 4; Ready 9 s later; steady; down one by one after the delay.
GOOD = timeline(
    (0, 64, 1, 1), (64, 66, 3, 1), (66, 75, 4, 1), (75, 250, 4, 4), (250, 258, 3, 4), (258, 265, 2, 3),
    (265, 300, 1, 1),
)  # fmt: skip


def test_a_staircase_that_scales_at_once_holds_and_comes_back_gives_its_times_and_passes_every_goal() -> None:
    figures = scale_figures(GOOD, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1)
    assert figures == {
        "target": 4,
        "peak": 4,
        "to_target_seconds": 6.0,
        "to_target_ready_seconds": 15.0,
        "to_peak_seconds": 6.0,
        "to_peak_ready_seconds": 15.0,
        "steady_changes": 0,
        "steady_seconds": 114.0,
        "scale_down_seconds": 85.0,
        "max_replicas_seen": 4,
    }
    found = goals(figures, failed=0, policy=POLICY)
    assert [(g["measured"], g["pass"]) for g in found] == [(6.0, True), (0, True), (85.0, True), (4, True), (0, True)]


def test_a_count_that_flaps_at_steady_load_is_counted_and_fails_the_steady_goal() -> None:
    flapping = timeline((0, 62, 1, 1), (62, 100, 4, 4), (100, 110, 3, 3), (110, 140, 4, 4), (140, 150, 3, 3),
                        (150, 300, 4, 4))  # fmt: skip
    figures = scale_figures(flapping, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1)
    assert figures["steady_changes"] == 4
    assert figures["scale_down_seconds"] is None  # never back to 1 while sampled
    verdicts = {g["goal"].split(":")[0]: g["pass"] for g in goals(figures, failed=0, policy=POLICY)}
    assert verdicts == {"scale up": True, "steady load": False, "scale down": False,
                        "never above maxReplicas (4)": True, "failed requests = 0": True}  # fmt: skip


def test_a_target_never_reached_is_none_and_fails_and_the_peak_is_what_was_reached() -> None:
    short = timeline((0, 70, 1, 1), (70, 200, 2, 2), (200, 300, 1, 1))
    figures = scale_figures(short, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1)
    assert figures["to_target_seconds"] is None
    assert figures["to_target_ready_seconds"] is None
    assert (figures["peak"], figures["to_peak_seconds"], figures["to_peak_ready_seconds"]) == (2, 10.0, 10.0)
    assert figures["scale_down_seconds"] == 20.0
    scale_up = goals(figures, failed=0, policy=POLICY)[0]
    assert (scale_up["measured"], scale_up["pass"]) == (None, False)


def test_no_readings_during_the_step_leave_every_step_figure_none() -> None:
    figures = scale_figures(timeline((0, 50, 1, 1)), STEP_UP, LOAD_STOPPED, target=4, min_replicas=1)
    assert figures["peak"] is None
    assert figures["to_peak_seconds"] is None
    assert figures["steady_changes"] is None
    assert figures["max_replicas_seen"] == 1
    assert not any(g["pass"] for g in goals(figures, failed=0, policy=POLICY)[:3])


@pytest.mark.parametrize(("seconds", "passes"), [(90.0, True), (90.5, False)])
def test_the_scale_down_goal_is_the_delay_plus_30_seconds(seconds: float, passes: bool) -> None:
    figures = scale_figures(GOOD, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1) | {"scale_down_seconds": seconds}
    down = goals(figures, failed=0, policy=POLICY)[2]
    assert "(90 s)" in down["goal"]
    assert down["pass"] is passes


def test_above_max_replicas_and_failed_requests_fail_their_goals() -> None:
    figures = scale_figures(GOOD, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1) | {"max_replicas_seen": 5}
    found = goals(figures, failed=3, policy=POLICY)
    assert [(g["measured"], g["pass"]) for g in found[3:]] == [(5, False), (3, False)]


def test_changes_counts_transitions_between_readings_in_the_window_only() -> None:
    points = [Point(float(at), replicas, 0, 0) for at, replicas in enumerate([1, 2, 2, 3, 2, 2, 4])]
    assert changes(points, 0, 6) == 4
    assert changes(points, 2, 5) == 2
    assert changes(points, 5, 5) == 0


@pytest.mark.parametrize(("streams", "target"), [(1, 1), (3, 2), (8, 4), (20, 4)])
def test_the_target_is_the_streams_at_target_per_replica_within_the_bounds(streams: int, target: int) -> None:
    assert POLICY.target(streams) == target


def test_the_served_playground_is_admissible_and_states_the_benchs_policy() -> None:
    *_, playground = model_objects("s3://models/m.gguf", "http://127.0.0.1:9000", POLICY)
    parsed = autoscale_policy(playground)
    assert parsed is not None
    assert (parsed.min_replicas, parsed.max_replicas, parsed.target_per_replica) == (1, 4, 2.0)
    assert (parsed.stable_window, parsed.panic_window, parsed.scale_down_delay) == (30.0, 6.0, 60.0)
    assert playground["spec"]["replicas"] == 1
    args = playground["spec"]["backendRuntimeConfig"]["args"]
    assert args[args.index("-np") + 1] == "2"
    assert args[args.index("-t") + 1] == "1"
    # One short prompt for every stream: routed by load, not held behind itself (prefix-aware's holds).
    assert playground["metadata"]["annotations"] == {"llmaz.io/routing-strategy": "least-outstanding"}


def test_a_policy_with_fractional_durations_renders_them_as_go_durations() -> None:
    elastic = Policy(stable_window=1.5, panic_window=0.5, scale_down_delay=0).elastic_config()
    assert elastic["scaleTrigger"]["requests"] | {"targetPerReplica": 0} == {
        "targetPerReplica": 0, "stableWindow": "1.5s", "panicWindow": "0.5s", "scaleDownDelay": "0s"
    }  # fmt: skip


def test_answer_figures_count_failures_per_phase_and_take_ttft_from_answered_streams_only() -> None:
    answers = [
        Answer("warm", 0, 1, 0.2, 200, ok=True),
        Answer("step", 1, 2, 0.4, 200, ok=True),
        Answer("step", 1, 2, 0.6, 200, ok=True),
        Answer("step", 1, 2, 0.1, 200, ok=False, error="the stream ended without [DONE]"),
        Answer("step", 1, 2, None, 503, ok=False, error="HTTP 503: no endpoint"),
    ]
    found = answer_figures(answers)
    assert list(found) == ["all", "warm", "step"]
    assert found["all"]["requests"] == 5
    assert found["all"]["failed"] == 2
    assert found["all"]["errors"] == ["HTTP 503: no endpoint", "the stream ended without [DONE]"]
    assert (found["step"]["ttft_p50"], found["step"]["ttft_p90"]) == (0.4, 0.6)
    assert (found["warm"]["requests"], found["warm"]["failed"], found["warm"]["ttft_p50"]) == (1, 0, 0.2)


def test_event_times_are_seconds_since_the_runs_start_from_the_best_stamp_an_event_has() -> None:
    zero = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert event_at({"eventTime": "2027-01-15T08:00:12.500000Z"}, zero) == pytest.approx(12.5)
    assert event_at({"eventTime": None, "lastTimestamp": "2027-01-15T08:01:00Z"}, zero) == pytest.approx(60.0)
    assert event_at({"metadata": {"creationTimestamp": "2027-01-15T07:59:59Z"}}, zero) == pytest.approx(-1.0)
    assert event_at({"metadata": {}}, zero) is None


def test_the_report_shows_the_figures_goals_phases_and_the_autoscalers_events() -> None:
    figures = scale_figures(GOOD, STEP_UP, LOAD_STOPPED, target=4, min_replicas=1) | {"scale_down_seconds": None}
    answers = answer_figures([Answer("step", 1, 2, 0.4, 200, ok=True)])
    result: dict[str, Any] = {
        "policy": {"min_replicas": 1, "max_replicas": 4, "target_per_replica": 2.0, "stable_window": 30.0,
                   "panic_window": 6.0, "scale_down_delay": 60.0},
        "staircase": {"streams": 8, "warm": 60.0, "step": 120.0, "idle": 180.0},
        "slots": 2, "max_tokens": 64, "figures": figures, "requests": answers,
        "goals": goals(figures, answers["all"]["failed"], POLICY),
        "events": [
            {"at": 64.2, "reason": "ScaledUp", "message": "Scaled from 1 to 3 replicas: load 7 over the panic window"},
            {"at": 3.0, "reason": "Pulled", "message": "image pulled"},
        ],
    }  # fmt: skip
    text = report(result)
    assert "stableWindow 30s, panicWindow 6s, scaleDownDelay 60s" in text
    assert "| step up -> spec.replicas at the target | 6.0 s |" in text
    assert "| load stopped -> back to minReplicas | never |" in text
    assert "| never | FAIL |" in text
    assert "| 6 | PASS |" in text
    assert "| step | 1 | 0 | 0.40 s | 0.40 s |" in text
    assert "| 64.2 | ScaledUp | Scaled from 1 to 3 replicas" in text
    assert "Pulled" not in text


def test_ready_pods_are_those_ready_and_not_being_deleted() -> None:
    def pod(ready: str, deleting: bool = False) -> dict[str, Any]:
        metadata = {"deletionTimestamp": "2027-01-15T08:00:00Z"} if deleting else {}
        return {"metadata": metadata, "status": {"conditions": [{"type": "Ready", "status": ready}]}}

    pods = [pod("True"), pod("False"), pod("True", deleting=True), {"metadata": {}, "status": {}}, pod("True")]
    assert ready_count(pods) == 2
