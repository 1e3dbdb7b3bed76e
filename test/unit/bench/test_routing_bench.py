"""The routing benchmark's pure parts: the ceiling any router could reach, the median over runs, the caches'
sizes, the same prompts for every strategy, the trace workload's arrivals and knee, the goals it reports, and the
objects every node scenario serves its model with."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from suite.routing_bench import (
    EPP_STRATEGY,
    KV_BYTES_PER_TOKEN,
    LLMD_STRATEGY,
    MIB,
    STRATEGIES,
    TRACE,
    TRACE_BASELINE,
    TRACE_CHAT_SHARE,
    TRACE_DOCUMENTS,
    TRACE_LIVE_CHATS,
    TRACE_TURNS,
    WORKLOADS,
    Outcome,
    Sample,
    TraceRequest,
    arrivals,
    common_unloaded,
    drive_trace,
    figures,
    goals,
    knee,
    median_figures,
    past_knee,
    report,
    request_records,
    reusable_each,
    reusable_tokens,
    select_strategies,
    served_model,
    sessions,
    step_figures,
    trace_documents,
    trace_requests,
)
from suite.settings import ROUTING_WORKLOADS, Settings


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


def test_each_requests_record_says_its_session_turn_and_what_it_reused_against_what_it_could_have() -> None:
    prompts = [[1, 2, 3], [1, 2, 3, 4, 5], [7, 8]]
    assert reusable_each(prompts) == [0, 3, 0]
    system = {"role": "system", "content": "s"}
    turn = [system, {"role": "user", "content": "q1"}]
    samples = [
        Sample(ok=True, messages=turn, prompt_tokens=3, session=0, sent_at=0.0, ttft=0.5, total=1.0, prompt_ms=412.25),
        Sample(
            ok=True,
            messages=[*turn, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}],
            prompt_tokens=5,
            cached_tokens=2,
            session=0,
            sent_at=1.25,
        ),
        Sample(ok=False, messages=turn, session=1, sent_at=1.5, error="HTTP 503"),
    ]
    records = request_records(Outcome(samples, 2.0), reusable_each(prompts))
    assert [(r["session"], r["turn"], r["sent_at"]) for r in records] == [(0, 1, 0.0), (0, 2, 1.25), (1, 1, 1.5)]
    assert [(r["prompt_tokens"], r["cached_tokens"], r["reusable_tokens"], r["ok"]) for r in records] == [
        (3, 0, 0, True), (5, 2, 3, True), (0, 0, 0, False)
    ]  # fmt: skip
    assert [r["prompt_ms"] for r in records] == [412.2, None, None]  # the engine's own, only when it said
    assert json.loads(json.dumps(records)) == records
    with pytest.raises(ValueError, match="shorter"):  # one reusable figure per request, never a silent cut
        request_records(Outcome(samples, 2.0), [0, 3])


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
    for workload in (*WORKLOADS, TRACE):
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


def test_our_epp_is_judged_against_llm_ds_on_each_workload_only_when_that_epp_ran() -> None:
    assert not [row for row in goals(_figures()) if LLMD_STRATEGY in row["goal"]]
    found = _figures()
    found["shared-prefix"][EPP_STRATEGY] = {"failed": 0, "cached_ratio": 0.70, "ttft_p50": 0.30}
    found["shared-prefix"][LLMD_STRATEGY] = {"failed": 2, "cached_ratio": 0.60, "ttft_p50": 0.25}
    verdicts = {row["goal"]: row["pass"] for row in goals(found)}
    assert verdicts[f"(a) cached-token ratio, {EPP_STRATEGY} / {LLMD_STRATEGY} >= 1 (or within 0.001 of it)"] is True
    assert verdicts[f"(a) TTFT p50, {EPP_STRATEGY} / {LLMD_STRATEGY} <= 1"] is False
    assert not [goal for goal in verdicts if goal.startswith("(b)") and LLMD_STRATEGY in goal]  # it did not run there
    assert verdicts["failed requests, every strategy and workload = 0"] is False  # the peer's failures count too


@pytest.mark.parametrize(
    ("workload", "ours", "theirs", "verdict"),
    [
        ("multi-turn", 0.8168, 0.8169, True),  # both at the ceiling: a token's accounting apart
        ("multi-turn", 0.8000, 0.8169, False),  # short of theirs
        ("multi-turn", 0.8150, 0.8169, False),  # short by more than the accounting
        ("multi-turn", 0.8170, 0.8169, True),  # at least theirs
        ("unique", 0.00257, 0.00259, True),  # the control: nothing to reuse but the template's first tokens
    ],
)
def test_our_epp_reusing_what_llm_ds_does_to_the_engines_accounting_counts_as_at_least_it(
    workload: str, ours: float, theirs: float, verdict: bool
) -> None:
    found = _figures()
    for strategy, cached_ratio in ((EPP_STRATEGY, ours), (LLMD_STRATEGY, theirs)):
        found[workload][strategy] = {"failed": 0, "cached_ratio": cached_ratio}
    verdicts = {row["goal"]: row["pass"] for row in goals(found)}
    title = next(w.title for w in WORKLOADS if w.name == workload).split()[0]
    assert (
        verdicts[f"{title} cached-token ratio, {EPP_STRATEGY} / {LLMD_STRATEGY} >= 1 (or within 0.001 of it)"]
        is verdict
    )


def test_a_run_may_choose_its_strategies_in_the_benchs_order_and_is_told_which_cannot_run() -> None:
    available = (*STRATEGIES, EPP_STRATEGY)
    assert select_strategies(available, None) == available
    assert select_strategies(available, [EPP_STRATEGY, "prefix-aware"]) == ("prefix-aware", EPP_STRATEGY)
    with pytest.raises(ValueError, match="strategies \\['llm-d EPP'\\] cannot run here"):
        select_strategies(available, [LLMD_STRATEGY])


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


# The trace workload (e) and its knee


def test_a_trace_step_is_a_function_of_the_seed_the_step_and_its_rate_alone() -> None:
    first = trace_requests(0, 1, 4.0, 40.0)
    assert first == trace_requests(0, 1, 4.0, 40.0)
    assert first != trace_requests(1, 1, 4.0, 40.0)
    assert first != trace_requests(0, 2, 4.0, 40.0)


def test_every_step_of_a_seed_asks_about_the_same_shared_documents_with_new_questions() -> None:
    documents = set(trace_documents(0))
    assert len(documents) == TRACE_DOCUMENTS
    steps = [trace_requests(0, step, rate, 40.0) for step, rate in enumerate((1.0, 4.0, 8.0))]
    for requests in steps:
        asked = {r.messages[0]["content"] for r in requests if r.kind == "document"}
        assert asked <= documents
        assert len(asked) > TRACE_DOCUMENTS // 2  # many prefixes, each asked several times
    questions = [r.messages[-1]["content"] for requests in steps for r in requests if r.kind == "document"]
    assert len(set(questions)) == len(questions)
    assert not documents & set(trace_documents(1))


def test_a_chat_resends_its_whole_history_and_grows_by_one_answer_and_one_question_per_turn() -> None:
    requests = trace_requests(0, 3, 8.0, 40.0)
    by_chat: dict[str, list[list[dict[str, str]]]] = {}
    for r in requests:
        if r.kind == "chat":
            by_chat.setdefault(r.session, []).append(r.messages)
    assert len(by_chat) > TRACE_LIVE_CHATS
    assert max(len(turns) for turns in by_chat.values()) == TRACE_TURNS
    for turns in by_chat.values():
        for earlier, later in itertools.pairwise(turns):
            assert later[: len(earlier)] == earlier
            assert [m["role"] for m in later[len(earlier) :]] == ["assistant", "user"]
    systems = [turns[0][0]["content"] for turns in by_chat.values()]
    assert len(set(systems)) == len(systems)  # each chat its own system prompt
    share = sum(r.kind == "chat" for r in requests) / len(requests)
    assert abs(share - TRACE_CHAT_SHARE) < 0.1


def test_arrivals_are_poisson_at_the_rate_within_the_step_and_seeded() -> None:
    times = arrivals(random.Random(7), 10.0, 1000.0)
    assert times == arrivals(random.Random(7), 10.0, 1000.0)
    assert times == sorted(times)
    assert times[0] >= 0
    assert times[-1] < 1000.0
    assert abs(len(times) - 10_000) < 400  # 4 standard deviations of a Poisson count
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.1, rel=0.05)  # exponential: the deviation is the mean
    requests = trace_requests(0, 1, 4.0, 40.0)
    assert [r.at for r in requests] == sorted(r.at for r in requests)
    assert requests[-1].at < 40.0


def test_a_failed_request_counts_as_the_timeout_in_a_steps_ttft() -> None:
    samples = [Sample(ok=True, prompt_tokens=100, cached_tokens=50, ttft=0.2) for _ in range(8)]
    samples += [Sample(ok=False, error="TimeoutError"), Sample(ok=False, error="HTTP 503")]
    found = step_figures(Outcome(samples, 10.0), rate=2.0, timeout=30.0)
    assert found["rate"] == 2.0
    assert found["failed"] == 2
    assert found["ttft_p50"] == pytest.approx(0.2)
    assert found["ttft_p90"] == 30.0
    assert found["cached_ratio"] == pytest.approx(0.5)


def _steps(*p90s: float | None) -> list[dict[str, Any]]:
    return [{"rate": float(rate), "ttft_p90": p90} for rate, p90 in zip((2, 4, 8, 16), p90s, strict=False)]


@pytest.mark.parametrize(
    ("p90s", "knee_", "first_over"),
    [
        ((0.5, 0.7, 0.9, 1.5), 8.0, 16.0),  # the last step within twice the unloaded p90
        ((0.5, 1.0), 4.0, None),  # exactly twice stays within; every step passed
        ((1.5, 0.9), None, 2.0),  # never within: past the knee at the first step
        ((0.5, 1.2, 0.8), 2.0, 4.0),  # non-monotone: the first step over ends it, a later one within does not count
        ((0.5, None), 2.0, 4.0),  # a step with no answer at all is over
    ],
)
def test_the_knee_is_the_highest_rate_before_the_first_step_over_twice_the_unloaded_ttft_p90(
    p90s: tuple[float | None, ...], knee_: float | None, first_over: float | None
) -> None:
    found = knee(_steps(*p90s), unloaded_p90=0.5)
    assert (found["knee"], found["first_over"], found["bound"]) == (knee_, first_over, 1.0)
    assert found["censored"] is (first_over is None)


def test_the_knee_of_a_strategy_with_no_unloaded_figure_is_unknown() -> None:
    assert knee(_steps(0.5), unloaded_p90=None)["knee"] is None


def test_the_unloaded_figure_is_the_lowest_of_the_strategies_so_none_gets_a_looser_bound() -> None:
    assert common_unloaded({"kube-proxy": 0.9, "least-outstanding": 0.6, "prefix-aware": None}) == 0.6
    assert common_unloaded({"kube-proxy": None}) is None


def test_the_ladder_stops_after_a_step_over_twice_the_strategys_own_unloaded_p90() -> None:
    assert not past_knee({"ttft_p90": 1.0}, own_unloaded_p90=0.5)
    assert past_knee({"ttft_p90": 1.01}, own_unloaded_p90=0.5)
    assert past_knee({"ttft_p90": None}, own_unloaded_p90=0.5)
    assert past_knee({"ttft_p90": 0.1}, own_unloaded_p90=None)  # nothing to climb from


def _knee(value: float | None, censored: bool = False) -> dict[str, Any]:
    return {"knee": value, "censored": censored}


@pytest.mark.parametrize(
    ("prefix_aware", "baseline", "measured", "verdict"),
    [
        (_knee(8.0), _knee(4.0), 2.0, True),
        (_knee(6.0), _knee(4.0), 1.5, False),
        (_knee(None), _knee(4.0), 0.0, False),  # prefix-aware never within
        (_knee(8.0), _knee(None), None, None),  # the baseline never within: the ladder starts too high to say
        (_knee(16.0, censored=True), _knee(11.0), 16 / 11, None),  # prefix-aware's knee is above the ladder
        (_knee(16.0, censored=True), _knee(6.0), 16 / 6, True),
    ],
)
def test_the_trace_goal_passes_when_prefix_awares_knee_is_at_least_twice_the_baselines(
    prefix_aware: dict[str, Any], baseline: dict[str, Any], measured: float | None, verdict: bool | None
) -> None:
    trace = {"knees": {"prefix-aware": prefix_aware, TRACE_BASELINE: baseline}}
    (row,) = [r for r in goals(_figures(), trace) if r["goal"].startswith("(e)")]
    assert row["measured"] == (None if measured is None else pytest.approx(measured))
    assert row["pass"] is verdict


def test_without_a_trace_run_its_goal_is_not_judged() -> None:
    (row,) = [r for r in goals(_figures()) if r["goal"].startswith("(e)")]
    assert row["pass"] is None


def test_the_report_shows_each_strategys_ladder_and_its_knee() -> None:
    step = {"rate": 4.0, "requests": 160, "failed": 1, "cached_ratio": 0.7, "ttft_p50": 0.3, "ttft_p90": 0.9,
            "requests_per_second": 3.9}  # fmt: skip
    result = {
        "slots": 2, "runs": 3, "workloads": [], "figures": {}, "goals": [],
        "trace": {
            "title": "(e) trace", "cache_ram_mib": 4, "step_seconds": 40.0, "unloaded_p90": 0.45,
            "strategies": {"prefix-aware": {"unloaded": {**step, "rate": 1.0}, "steps": [step]}},
            "knees": {"prefix-aware": {"knee": 4.0, "bound": 0.9, "first_over": None, "censored": True}},
        },
    }  # fmt: skip
    text = report(result)
    assert "| prefix-aware | 4 | 160 | 0.30 s | 0.90 s | 0.70 | 3.90 | 1 |" in text
    assert "| prefix-aware | 1 (unloaded) |" in text
    assert "| prefix-aware | >= 4 | 0.90 s |" in text


def test_a_trace_that_failed_is_reported_with_its_error_and_its_goal_is_not_judged() -> None:
    result: dict[str, Any] = {"workloads": [], "figures": {}, "goals": goals({})}
    result["trace_error"] = "TimeoutError: 4 ready endpoints not reached"
    text = report(result)
    assert "failed, TimeoutError: 4 ready endpoints not reached" in text
    assert "| (e) trace workload, knee, prefix-aware / kube-proxy >= 2 | - | n/a |" in text


def test_the_workloads_scenario_12_can_select_are_the_ones_it_runs() -> None:
    assert (*(w.name for w in WORKLOADS), TRACE.name) == ROUTING_WORKLOADS


def test_an_unknown_workload_or_a_falling_ladder_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BENCH_SERVING_WORKLOADS", "trace traces")
    with pytest.raises(SystemExit, match=r"BENCH_SERVING_WORKLOADS \['traces'\]"):
        Settings.from_env()
    monkeypatch.setenv("BENCH_SERVING_WORKLOADS", "trace, unique")
    assert Settings.from_env().serving_workloads == ("unique", "trace")
    monkeypatch.setenv("BENCH_TRACE_RATES", "2 8 4")
    with pytest.raises(SystemExit, match="BENCH_TRACE_RATES must rise"):
        Settings.from_env()


class _Engine:
    """A stand-in engine streaming a one-token answer with its usage; it answers nothing until `hold` requests
    are in, and never answers a prompt containing `never`."""

    def __init__(self, hold: int) -> None:
        self.hold, self.received, self.all_in = hold, 0, asyncio.Event()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received += 1
        if self.received >= self.hold:
            self.all_in.set()
        if "never" in body["messages"][-1]["content"]:
            await asyncio.Event().wait()
        await self.all_in.wait()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        usage = {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}
        for chunk in ({"choices": [{"delta": {"content": "x"}}]}, {"choices": [], "usage": usage}):
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


async def _serve(engine: _Engine) -> TestServer:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.chat)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


def _request(at: float, text: str) -> TraceRequest:
    return TraceRequest(at, "document", "document-0", [{"role": "user", "content": text}])


async def test_the_trace_sends_each_request_at_its_time_whatever_is_still_in_flight() -> None:
    engine = _Engine(hold=3)  # answers none until all three are in: a client waiting on answers would time out
    server = await _serve(engine)
    try:
        url = str(server.make_url("")).rstrip("/")
        requests = [_request(at, "q") for at in (0.0, 0.01, 0.02)]
        outcome = await drive_trace(url, requests, max_tokens=1, request_seconds=10.0)
    finally:
        await server.close()
    assert [(s.ok, s.prompt_tokens, s.cached_tokens) for s in outcome.samples] == [(True, 10, 4)] * 3
    assert all(s.ttft > 0 for s in outcome.samples)


async def test_a_trace_request_unanswered_in_its_time_fails_and_counts_as_that_time() -> None:
    engine = _Engine(hold=1)
    server = await _serve(engine)
    try:
        url = str(server.make_url("")).rstrip("/")
        outcome = await drive_trace(url, [_request(0.0, "q"), _request(0.0, "never")], 1, request_seconds=0.5)
    finally:
        await server.close()
    assert [s.ok for s in outcome.samples] == [True, False]
    assert outcome.samples[1].error
    assert step_figures(outcome, rate=2.0, timeout=0.5)["ttft_p90"] == 0.5


@pytest.mark.parametrize(
    ("options", "namespace", "replicas", "args", "elastic"),
    [
        ({}, "default", 1, ["--alias", "m", "-c", "4096", "-np", "2", "-t", "1"], None),
        (
            {"namespace": "tenants", "replicas": 4, "context": 1024, "slots": 3},
            "tenants",
            4,
            ["--alias", "m", "-c", "1024", "-np", "3", "-t", "1"],
            None,
        ),
        (
            {"engine_args": ("--cache-ram", "1030")},
            "default",
            1,
            ["--alias", "m", "-c", "4096", "-np", "2", "--cache-ram", "1030", "-t", "1"],
            None,
        ),
        (
            {"elastic_config": {"minReplicas": 1, "maxReplicas": 4}},
            "default",
            1,
            ["--alias", "m", "-c", "4096", "-np", "2", "-t", "1"],
            {"minReplicas": 1, "maxReplicas": 4},
        ),
    ],
)
def test_a_served_model_is_the_store_secret_the_open_model_and_a_llama_cpp_playground_of_the_options(
    options: dict[str, Any], namespace: str, replicas: int, args: list[str], elastic: dict[str, Any] | None
) -> None:
    sizes = {"context": 4096, "slots": 2}
    secret, model, playground = served_model("m", "s3://models/m.gguf", "http://10.0.0.9:9000", **(sizes | options))
    assert (secret["kind"], secret["metadata"]["namespace"]) == ("Secret", namespace)
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert (model["kind"], model["metadata"]) == ("OpenModel", {"name": "m"})
    assert model["spec"]["source"] == {"uri": "s3://models/m.gguf"}
    assert (playground["kind"], playground["metadata"]) == ("Playground", {"name": "m", "namespace": namespace})
    spec = playground["spec"]
    assert (spec["replicas"], spec["modelClaim"]) == (replicas, {"modelName": "m"})
    assert spec["backendRuntimeConfig"] == {
        "backendName": "llamacpp",
        "args": args,
        "envs": [{"name": "AWS_ENDPOINT_URL", "value": "http://10.0.0.9:9000"}],
    }
    assert spec.get("elasticConfig") == elastic
