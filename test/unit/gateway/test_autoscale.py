"""The autoscaler's decisions: tables of (time, current replicas, load) ticks and the decision each one gets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmaz.apis.validation.autoscale import AutoscalePolicy, autoscale_policy
from llmaz.gateway.scaling.autoscale import Decision, Scaler, Window, wanted

# 10 requests per replica; averages over 60 s and 6 s; panic at twice the capacity; scale down after 300 s.
POLICY = AutoscalePolicy(
    target_per_replica=10,
    stable_window=60,
    panic_window=6,
    panic_threshold=2.0,
    scale_down_delay=300,
    min_replicas=1,
    max_replicas=10,
)
Tick = tuple[float, int, float | None]


def decisions(
    ticks: list[Tick], policy: AutoscalePolicy = POLICY, scale_to_zero: bool = False
) -> list[tuple[int, Window]]:
    scaler = Scaler()
    return [
        (d.desired, d.window)
        for d in (scaler.decide(now, current, load, policy, scale_to_zero) for now, current, load in ticks)
    ]


def steady(start: float, end: float, current: int, load: float | None, every: float = 2.0) -> list[Tick]:
    """A tick every `every` seconds from `start` up to (not including) `end`."""
    count = int((end - start) / every)
    return [(start + i * every, current, load) for i in range(count)]


S, P, N = Window.STABLE, Window.PANIC, Window.NO_SIGNAL


def test_wanted_is_the_ceiling_of_load_over_target() -> None:
    assert [wanted(load, 10) for load in (0, 0.5, 10, 10.0000000001, 10.5, 20, 21)] == [0, 1, 1, 1, 2, 2, 3]


def test_staircase_up_follows_the_stable_average() -> None:
    # Load rises slowly (never twice the capacity within the panic window): each rise of the 60 s average by one
    # target adds one replica, at once.
    ticks: list[Tick] = [(0, 1, 5), (10, 1, 15), (20, 2, 25), (30, 2, 30), (40, 3, 35)]
    # Averages: 5, 10, 15, 18.75, 22 -> 1, 1, 2, 2, 3.
    assert decisions(ticks) == [(1, S), (1, S), (2, S), (2, S), (3, S)]


def test_panic_scales_up_at_once_to_the_panic_window() -> None:
    # 2 replicas (capacity 20) at load 10 for a minute, then 60 requests. At 60 s the 6 s average is
    # (10 + 10 + 60) / 3 < 2 x 20; at 62 s it is (10 + 60 + 60) / 3 >= 40: panic, for ceil(43.3 / 10) = 5; at 64 s
    # the average is 60: 6.
    ticks = [*steady(0, 60, 2, 10), (60, 2, 60), (62, 2, 60), (64, 2, 60)]
    assert decisions(ticks)[-3:] == [(2, S), (5, P), (6, P)]


def test_no_panic_below_the_threshold() -> None:
    # 39 < 2 x 20: the stable window decides, and its average barely moves.
    ticks = [*steady(0, 60, 2, 10), (60, 2, 39)]
    assert decisions(ticks)[-1] == (2, S)


def test_panic_holds_the_count_and_ends_a_stable_window_after_the_load_last_crossed() -> None:
    scaler = Scaler()
    for now, current, load in steady(0, 62, 2, 10):
        scaler.decide(now, current, load, POLICY, False)
    # (10 + 10 + 100) / 3 >= 2 x 20: panic. The only crossing: after it the threshold is relative to 4, then 7.
    assert scaler.decide(62, 2, 100, POLICY, False) == Decision(4, 2, 40, P)
    assert scaler.decide(64, 4, 100, POLICY, False) == Decision(7, 4, 70, P)  # 70 < 2 x 40, still panicking
    assert scaler.decide(66, 7, 100, POLICY, False) == Decision(10, 7, 100, P)
    # The burst is over: the panic average is back to nothing, but the count does not fall while panicking.
    assert scaler.decide(72, 10, 0, POLICY, False) == Decision(10, 10, 0, P)
    assert scaler.decide(100, 10, 0, POLICY, False).window is P
    assert scaler.decide(121, 10, 0, POLICY, False).window is P
    # 60 s after the load last crossed the threshold: the stable window decides again, and holds (the delay).
    after = scaler.decide(122, 10, 0, POLICY, False)
    assert (after.window, after.desired) == (S, 10)
    assert not scaler.panicking


def test_panic_counts_only_the_ready_replicas_as_capacity() -> None:
    # 3 replicas, 1 of them ready (2 still loading their model): 25 requests are over twice the ready capacity
    # (2 x 10) though under twice that of all three (60). Knative counts ready pods the same way.
    assert Scaler().decide(0, 3, 25, POLICY, False, ready=1) == Decision(3, 3, 25, P)
    assert Scaler().decide(0, 3, 25, POLICY, False, ready=3).window is S
    # Never below one replica's capacity: no ready replica is not a panic at any load.
    assert Scaler().decide(0, 3, 15, POLICY, False, ready=0).window is S


def test_panic_keeps_its_peak_while_it_lasts() -> None:
    scaler = Scaler()
    assert scaler.decide(0, 1, 50, POLICY, False).desired == 5  # 50 >= 2 x 10
    # Still over 2 x 5 x 10 = 100? No, but panicking: the peak stays.
    assert scaler.decide(2, 5, 20, POLICY, False) == Decision(5, 5, 35, P)


def test_scale_down_waits_for_the_delay_then_goes_one_replica_per_decision() -> None:
    # Load 100 on 10 replicas for the first 300 s, then nothing (the ticks keep reporting 10 current replicas).
    ticks = [*steady(0, 300, 10, 100), *steady(300, 700, 10, 0)]
    result = decisions(ticks)
    # The stable average wants 10 until 302 s (29 and 28 busy samples of 30, then 27: 90, which 9 carry).
    first_down = next(i for i, (desired, _) in enumerate(result) if desired != 10)
    assert ticks[first_down][0] == 302 + 300  # once the last tick that wanted 10 has left the delay
    # One replica fewer than the current count per decision, no more.
    assert set(result[first_down:]) == {(9, S)}


def test_scale_down_steps_by_one_and_never_below_the_minimum() -> None:
    scaler = Scaler()
    current, seen = 4, []
    for now in range(0, 400, 2):
        decision = scaler.decide(now, current, 0, replace(POLICY, min_replicas=2), False)
        seen.append(decision.desired)
        current = decision.desired
    assert seen[:150] == [4] * 150  # the first 300 s: a new scaler has not seen a whole delay
    assert seen[150:153] == [3, 2, 2]
    assert set(seen[153:]) == {2}


def test_a_new_scaler_resumes_from_the_current_count() -> None:
    # A new leader: current 7, load for 7 -> it keeps 7; it does not start from the minimum.
    assert decisions([(0, 7, 70), (2, 7, 70)]) == [(7, S), (7, S)]


def test_bounds_apply_at_once() -> None:
    assert decisions([(0, 3, 1000)], replace(POLICY, max_replicas=4)) == [(4, P)]
    assert decisions([(0, 12, 50)]) == [(10, S)]  # above maxReplicas (lowered since)
    assert decisions([(0, 1, 0)], replace(POLICY, min_replicas=3)) == [(3, S)]


def test_zero_only_with_scale_to_zero() -> None:
    # Opted in and asleep: it stays asleep whatever the (missing) load; a request wakes it.
    assert decisions([(0, 0, None), (2, 0, 0)], scale_to_zero=True) == [(0, Window.ASLEEP), (0, Window.ASLEEP)]
    # Not opted in: zero is raised to the minimum, even without a signal.
    assert decisions([(0, 0, None)]) == [(1, N)]
    # The autoscaler itself never goes below the minimum, opted in or not.
    ticks = steady(0, 700, 1, 0)
    assert {desired for desired, _ in decisions(ticks, scale_to_zero=True)} == {1}


def test_missing_data_holds_the_count() -> None:
    ticks: list[Tick] = [(0, 5, 50), *steady(2, 700, 5, None)]
    result = decisions(ticks)
    assert result[0] == (5, S)
    assert set(result[1:]) == {(5, N)}


def test_missing_samples_are_left_out_of_the_averages() -> None:
    # Known samples of 40 with unknown ones between them: the average is 40, not diluted by the gaps.
    ticks: list[Tick] = [(0, 4, 40), (2, 4, None), (4, 4, 40), (6, 4, None), (8, 4, 40)]
    assert decisions(ticks)[-1] == (4, S)


def test_a_signal_after_missing_data_decides_again() -> None:
    ticks: list[Tick] = [(0, 2, 20), (2, 2, None), (4, 2, 30)]
    assert decisions(ticks) == [(2, S), (2, N), (3, S)]


class TestPolicy:
    def playground(self, requests: dict[str, object], **elastic: object) -> dict[str, object]:
        return {"spec": {"elasticConfig": {"maxReplicas": 5, **elastic, "scaleTrigger": {"requests": requests}}}}

    def test_defaults(self) -> None:
        policy = autoscale_policy(self.playground({"targetPerReplica": 8}, minReplicas=2))
        assert policy == AutoscalePolicy(8, 60, 6, 2.0, 300, 2, 5)

    def test_fields(self) -> None:
        fields = {"targetPerReplica": 3, "stableWindow": "2m", "panicWindow": "10s", "scaleDownDelay": "0"}
        assert autoscale_policy(self.playground({**fields, "panicThreshold": 1.5})) == AutoscalePolicy(
            3, 120, 10, 1.5, 0, 1, 5
        )

    def test_none_without_the_trigger(self) -> None:
        assert autoscale_policy({"spec": {"elasticConfig": {"maxReplicas": 3}}}) is None
        assert autoscale_policy({"spec": {}}) is None

    def test_a_stored_bad_value_is_an_error_with_admissions_text(self) -> None:
        with pytest.raises(ValueError, match=r"targetPerReplica: Invalid value: 0"):
            autoscale_policy(self.playground({"targetPerReplica": 0}))
        with pytest.raises(ValueError, match=r"minReplicas: Invalid value: 9: must be at least 1"):
            autoscale_policy(self.playground({"targetPerReplica": 2}, minReplicas=9))
