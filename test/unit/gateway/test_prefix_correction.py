"""The prefix index corrects itself from the engines' usage: an engine that reports clearly fewer cached prompt
tokens than the index predicted has evicted what the index still holds for it, and the index forgets it; the
token counters count each answered request once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from llmaz.apis.routing import PREFIX_AWARE, RoutingWeights
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import MIN_CAPACITY_BLOCKS, PrefixAware, PrefixIndex, RoutingOptions
from llmaz.gateway.routing.prefix import MAX_BLOCKS, RoutingKey
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.scheduler import PromptUsage, Request
from llmaz.gateway.routing.scorers import TRACKED_ATTEMPTS, confirmed_blocks

from .support import Cluster, engines, refused_endpoint, running_gateway

A, B = Endpoint("10.3.0.1", 8000), Endpoint("10.3.0.2", 8000)
OLD = tuple(range(1, 9))  # a prompt of 8 blocks sent to A first
NEW = tuple(range(101, 109))  # another, sent to A after it
TOKENS_PER_BLOCK = 10


def usage(blocks: int, cached_blocks: int | None) -> PromptUsage:
    """An engine's usage for a prompt of `blocks` blocks, `cached_blocks` of them found cached (None: not said)."""
    cached = None if cached_blocks is None else cached_blocks * TOKENS_PER_BLOCK
    return PromptUsage(blocks * TOKENS_PER_BLOCK, cached)


class Traffic:
    """A prefix-aware scheduler over A and B, prefix alone deciding, and attempts sent and ended through it."""

    def __init__(self) -> None:
        self.scheduler = PrefixAware(InFlight(), weights=RoutingWeights(prefix=1, queue=0, utilisation=0))
        self.corrected: list[str] = []
        self.scheduler.prefix_match.corrected = self.corrected.append

    def request(self, blocks: Sequence[int], ring: int = 7) -> Request:
        return Request("m", [A, B], RoutingKey(tuple(blocks), ring))

    def send(self, endpoint: Endpoint, blocks: Sequence[int], ended: PromptUsage | None = None) -> None:
        request = self.request(blocks)
        self.scheduler.pre_request(request, endpoint)
        self.scheduler.post_response(request, endpoint, ended)

    def pick(self, blocks: Sequence[int]) -> Endpoint | None:
        return self.scheduler.schedule(self.request(blocks)).endpoint


def settled() -> Traffic:
    """A was sent OLD then NEW, B the first half of OLD; every attempt ended without usage."""
    traffic = Traffic()
    traffic.send(A, OLD)
    traffic.send(B, OLD[:4])
    traffic.send(A, NEW)
    assert traffic.pick(OLD) == A
    return traffic


# The correction


def test_an_engine_that_lost_a_prefix_no_longer_draws_the_prefixes_sent_to_it_before() -> None:
    traffic = settled()
    # A answers NEW without a cached token: it evicted NEW, and OLD, sent to it before NEW, with it.
    traffic.send(A, NEW, usage(len(NEW), 0))
    assert traffic.corrected == ["m"]
    assert traffic.scheduler.index.match(A, OLD) == 0
    assert traffic.pick(OLD) == B  # B holds half of OLD: A, which lost it, is no longer preferred
    # NEW was computed by that very answer: A holds it again.
    assert traffic.scheduler.index.match(A, NEW) == len(NEW)
    assert traffic.pick(NEW) == A


def test_the_blocks_the_engine_confirmed_are_kept() -> None:
    traffic = settled()
    traffic.send(A, NEW, usage(len(NEW), 3))  # 3 of the 8 predicted blocks found: clearly fewer
    assert traffic.corrected == ["m"]
    assert traffic.scheduler.index.match(A, NEW[:3]) == 3
    assert traffic.scheduler.index.match(A, OLD) == 0


@pytest.mark.parametrize(
    ("ended", "why"),
    [
        (usage(len(NEW), len(NEW) - 1), "the engine found the prompt but its last block (its own granularity)"),
        (usage(len(NEW), 7), "the engine confirms the prediction within a quarter"),
        (usage(len(NEW), None), "the engine does not report cached tokens"),
        (PromptUsage(None, 0), "the engine does not report prompt tokens"),
        (PromptUsage(80, 120), "the counts contradict each other"),
        (PromptUsage(80, -1), "a negative count"),
        (None, "the engine reported no usage (the attempt failed)"),
    ],
)
def test_no_correction_when_the_engine_confirms_the_prediction_or_does_not_say(
    ended: PromptUsage | None, why: str
) -> None:
    traffic = settled()
    traffic.send(A, NEW, ended)
    assert traffic.corrected == [], why
    assert traffic.scheduler.index.match(A, OLD) == len(OLD), why
    assert traffic.pick(OLD) == A, why


def test_a_prefix_recorded_by_an_attempt_still_in_flight_is_no_prediction() -> None:
    traffic = settled()
    first, second = traffic.request(NEW), traffic.request(NEW)
    traffic.scheduler.pre_request(first, A)  # a burst of one prompt: the first is still being prefilled
    traffic.scheduler.pre_request(second, A)
    traffic.scheduler.post_response(second, A, usage(len(NEW), 0))  # not computed yet: no eviction
    traffic.scheduler.post_response(first, A, usage(len(NEW), 0))  # A held NEW from before: evicted
    assert traffic.corrected == ["m"]


def test_a_prompt_the_key_may_not_cover_is_corrected_only_when_nothing_was_cached() -> None:
    long = tuple(range(1000, 1000 + MAX_BLOCKS))  # a key at its bound: the prompt may go on past it
    for cached, corrections in ((0, ["m"]), (10, [])):
        traffic = Traffic()
        traffic.send(A, long)
        traffic.send(A, long, PromptUsage(50_000, cached))
        assert traffic.corrected == corrections


# The index bounded by what the engine holds


def test_after_a_correction_an_endpoint_keeps_no_more_than_its_engine_showed_it_holds() -> None:
    index = PrefixIndex(blocks=1000)
    prompts = [tuple(range(n * 100, n * 100 + 50)) for n in range(6)]  # 6 prompts of 50 blocks
    for prompt in prompts[:4]:
        index.record(A, prompt)
    assert index.capacity(A) == 1000
    # The engine lost the first two: what is left (100 blocks) is about what it holds.
    assert index.forget_through(A, index.recorded_at(A, prompts[1][0]) or 0) == 100
    assert index.capacity(A) == 100
    for prompt in prompts[4:]:
        index.record(A, prompt)
    assert [index.match(A, prompt) for prompt in prompts] == [0, 0, 0, 0, 50, 50]  # the oldest go first now
    assert index.capacity(B) == 1000  # another endpoint keeps its own


def test_a_capacity_never_falls_below_one_prompts_worth_and_grows_back_as_answers_show_more_cached() -> None:
    index = PrefixIndex(blocks=1000)
    index.record(A, tuple(range(10)))
    index.record(A, tuple(range(100, 110)))
    index.forget_through(A, index.recorded_at(A, 0) or 0)
    assert index.capacity(A) == MIN_CAPACITY_BLOCKS
    index.grow(A, 100)
    assert index.capacity(A) == MIN_CAPACITY_BLOCKS + 100
    index.grow(A, 10_000)
    assert index.capacity(A) == 1000


def test_an_answer_with_more_cached_than_predicted_raises_the_endpoints_capacity() -> None:
    traffic = settled()
    index = traffic.scheduler.index
    traffic.send(A, NEW, usage(len(NEW), 0))  # a correction: A's capacity falls to what is left
    lowered = index.capacity(A)
    assert lowered < index.max_blocks
    other = tuple(range(201, 209))
    traffic.send(A, other, usage(len(other), len(other)))  # all of it cached, though none was predicted
    assert index.capacity(A) == lowered + len(other)


def test_a_correction_that_fails_does_not_fail_the_attempt() -> None:
    class Broken(PrefixIndex):
        def forget_through(self, endpoint: Endpoint, stamp: int) -> int:
            raise RuntimeError("broken")

    in_flight = InFlight()
    scheduler = PrefixAware(in_flight, index=Broken())
    request = Request("m", [A, B], RoutingKey(NEW, 7))
    for _ in range(2):
        scheduler.pre_request(request, A)
        scheduler.post_response(request, A, usage(len(NEW), 0))
    assert in_flight.busy() == {}


def test_attempts_that_never_end_are_followed_within_a_bound() -> None:
    traffic = Traffic()
    for i in range(TRACKED_ATTEMPTS + 10):
        traffic.scheduler.pick([A, B], key=RoutingKey((i,), i))  # recorded, never ended (a replay)
    assert traffic.scheduler.prefix_match.followed == TRACKED_ATTEMPTS
    traffic.send(A, NEW)  # followed in place of the oldest, then no more once it ended
    assert traffic.scheduler.prefix_match.followed == TRACKED_ATTEMPTS - 1


@pytest.mark.parametrize(
    ("ended", "blocks", "confirmed"),
    [
        (PromptUsage(400, 200), 100, 50),  # 4 tokens a block: the prompt's own rate, not an assumed one
        (PromptUsage(160, 150), 10, 9),  # whole blocks only
        (PromptUsage(160, 0), MAX_BLOCKS, 0),
        (PromptUsage(160, 1), MAX_BLOCKS, None),
        (PromptUsage(0, 0), 3, None),
        (PromptUsage(True, 1), 3, None),  # a bool is not a count
    ],
)
def test_cached_tokens_become_blocks_at_the_prompts_rate(
    ended: PromptUsage, blocks: int, confirmed: int | None
) -> None:
    assert confirmed_blocks(ended, blocks) == confirmed


# The index's invariant


_paths = st.lists(st.integers(0, 2), min_size=1, max_size=5)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.sampled_from([A, B]), _paths),
        st.tuples(st.just("forget"), st.sampled_from([A, B]), st.floats(0, 1)),
    ),
    max_size=40,
)


@given(steps=_steps, max_blocks=st.integers(1, 8))
@settings(deadline=None, max_examples=300)
def test_the_matched_length_stays_monotone_after_any_records_and_corrections(
    steps: list[tuple[str, Endpoint, object]], max_blocks: int
) -> None:
    index = PrefixIndex(blocks=max_blocks, endpoints=2)
    ids: dict[tuple[int, ...], int] = {}

    def chain(path: Sequence[int]) -> tuple[int, ...]:  # block i names the path's first i + 1 steps, as a chain does
        return tuple(ids.setdefault(tuple(path[: i + 1]), len(ids)) for i in range(len(path)))

    chains: list[tuple[int, ...]] = []
    for kind, endpoint, argument in steps:
        if kind == "record":
            assert isinstance(argument, list)
            chains.append(chain(argument))
            index.record(endpoint, chains[-1])
        else:
            assert isinstance(argument, float)
            index.forget_through(endpoint, round(argument * index.stamp))
        for each in chains:
            for at in (A, B):
                held = [index.recorded_at(at, block) is not None for block in each]
                leading = held.index(False) if False in held else len(held)
                assert held == [True] * leading + [False] * (len(held) - leading)  # a held block's chain is held
                assert index.match(at, each) == leading  # bisection finds it
                stamps = [index.recorded_at(at, block) or 0 for block in each[:leading]]
                assert stamps == sorted(stamps, reverse=True)  # a chain's first blocks are its most recent


# The metrics


def _answering(prompt: int, cached: int | None) -> web.Response:
    details = {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}
    return web.json_response({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 2, **details}})


async def test_the_prompt_and_cached_tokens_are_counted_once_per_answered_request_not_per_attempt() -> None:
    reports = [True]

    async def cached(request: web.Request) -> web.StreamResponse:
        return _answering(40, 32 if reports[0] else None)

    async with engines(1) as (engine,):
        engine.handler = cached
        with refused_endpoint() as refused:
            cluster = Cluster().synced()
            cluster.serve("m", refused, engine.endpoint)
            in_flight = InFlight()
            in_flight.acquire(engine.endpoint)  # the refusing endpoint is the least loaded: tried first
            async with running_gateway(cluster, in_flight=in_flight) as gw:
                for answered in (1, 2):
                    status, _ = await gw.post("/v1/chat/completions", {"model": "m"})
                    assert status == 200
                    assert gw.sample("llmaz_gateway_prompt_tokens_total", model="m") == 40 * answered
                    assert gw.sample("llmaz_gateway_prompt_cached_tokens_total", model="m") == 32 * answered
                assert len(engine.requests) == 2
                reports[0] = False  # an engine that does not report cached tokens adds to the prompt tokens only
                status, _ = await gw.post("/v1/chat/completions", {"model": "m"})
                assert status == 200
                assert gw.sample("llmaz_gateway_prompt_tokens_total", model="m") == 120
                assert gw.sample("llmaz_gateway_prompt_cached_tokens_total", model="m") == 64


async def test_each_correction_of_the_index_is_counted_by_model() -> None:
    async def evicted(request: web.Request) -> web.StreamResponse:
        return _answering(120, 0)  # the engine never keeps a prompt: nothing it is sent again is found cached

    async with engines(1) as (engine,):
        engine.handler = evicted
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        options = GatewayOptions(routing=RoutingOptions(strategy=PREFIX_AWARE))
        async with running_gateway(cluster, options) as gw:
            body = {"model": "m", "messages": [{"role": "user", "content": "a question long enough " * 20}]}
            for sent in (1, 2, 3):
                status, _ = await gw.post("/v1/chat/completions", body)
                assert status == 200
                # The first is no prediction (a prefix new here); each later one predicted the prompt held.
                assert gw.sample("llmaz_gateway_prefix_index_corrections_total", model="m") == sent - 1
