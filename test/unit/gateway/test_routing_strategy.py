"""The routing strategy through a running gateway: the flag, a Playground's annotation over it, and a session
that keeps a conversation on one engine."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis.routing import LEAST_OUTSTANDING, PREFIX_AWARE
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.picker import RoutingOptions

from .support import LEAST_OUTSTANDING_GATEWAY, Cluster, FakeEngine, engines, refused_endpoint, running_gateway

CHAT = "/v1/chat/completions"
SYSTEM = "You are the support assistant of a bicycle shop. Answer briefly and politely. " * 8
PREFIX_AWARE_GATEWAY = GatewayOptions(routing=RoutingOptions(strategy=PREFIX_AWARE))


def chat(question: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return {"model": "m", "messages": messages, **extra}


def served_by(fleet: list[FakeEngine]) -> Counter[int]:
    return Counter({i: len(engine.requests) for i, engine in enumerate(fleet) if engine.requests})


def annotate(cluster: Cluster, **annotations: str) -> None:
    (stored,) = cluster.playgrounds.store.list()
    changed = copy.deepcopy(stored)
    changed["metadata"]["annotations"] = annotations
    cluster.playgrounds.update(changed)


async def send(cluster: Cluster, options: GatewayOptions | None, *bodies: dict[str, Any], **kwargs: Any) -> None:
    async with running_gateway(cluster, options) as gw:
        for body in bodies:
            status, _ = await gw.post(CHAT, body, **kwargs)
            assert status == 200


async def test_with_prefix_aware_a_shared_prompt_keeps_to_one_engine_and_least_outstanding_spreads_it() -> None:
    questions = [chat(f"Question {i}: do you sell {kind}?") for i, kind in enumerate(["tyres", "bells", "locks"] * 8)]
    async with engines(3) as fleet:
        cluster = Cluster().synced()
        cluster.serve("m", *(engine.endpoint for engine in fleet))
        await send(cluster, PREFIX_AWARE_GATEWAY, *questions)
        assert len(served_by(fleet)) == 1  # one system prompt: one home, never over its bound one at a time
        for engine in fleet:
            engine.requests.clear()
        await send(cluster, None, *questions)  # the default is prefix-aware too
        assert len(served_by(fleet)) == 1
        for engine in fleet:
            engine.requests.clear()
        await send(cluster, LEAST_OUTSTANDING_GATEWAY, *questions)  # idle ties at random
        assert len(served_by(fleet)) > 1


async def test_a_playgrounds_annotation_overrides_the_gateways_strategy() -> None:
    questions = [chat(f"Do you repair model {i}?") for i in range(24)]
    async with engines(3) as fleet:
        cluster = Cluster().synced()
        cluster.serve("m", *(engine.endpoint for engine in fleet))
        annotate(cluster, **{c.ROUTING_STRATEGY_ANNOTATION: PREFIX_AWARE})
        await send(cluster, LEAST_OUTSTANDING_GATEWAY, *questions)
        assert len(served_by(fleet)) == 1
        for engine in fleet:
            engine.requests.clear()
        annotate(cluster, **{c.ROUTING_STRATEGY_ANNOTATION: LEAST_OUTSTANDING})
        await send(cluster, PREFIX_AWARE_GATEWAY, *questions)
        assert len(served_by(fleet)) > 1


async def test_a_session_keeps_different_prompts_on_one_engine() -> None:
    async with engines(4) as fleet:
        cluster = Cluster().synced()
        cluster.serve("m", *(engine.endpoint for engine in fleet))
        prompts = [{"model": "m", "prompt": f"Unrelated prompt number {i} " * (i + 1)} for i in range(12)]
        await send(cluster, PREFIX_AWARE_GATEWAY, *prompts, headers={"x-session-id": "conversation-7"})
        assert len(served_by(fleet)) == 1
        body = fleet[next(iter(served_by(fleet)))].requests[0].body
        assert body.startswith(b'{"model":"m","prompt":"Unrelated prompt number 0')  # forwarded as sent


async def test_with_prefix_aware_a_refused_home_is_retried_on_another_endpoint_never_on_itself() -> None:
    async with engines(1) as (engine,):
        with refused_endpoint() as refused:
            cluster = Cluster().synced()
            cluster.serve("m", refused, engine.endpoint)
            # Prompts that share nothing: each starts at its session's home, and about half of 16 homes (all but
            # once in 65,536 runs at least one) are the refused endpoint.
            bodies = [
                {"model": "m", "prompt": f"Is the shop open on Sunday? I am customer {i}.", "user": f"customer-{i}"}
                for i in range(16)
            ]
            async with running_gateway(cluster, PREFIX_AWARE_GATEWAY) as gw:
                for body in bodies:
                    assert (await gw.post(CHAT, body))[0] == 200  # answered, whichever its home
                retried = gw.sample("llmaz_gateway_upstream_retries_total", model="m", reason="connect_error")
            assert len(engine.requests) == len(bodies)
            assert retried >= 1  # some sessions' home is the refused endpoint, and each went on to the other
