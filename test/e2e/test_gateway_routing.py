"""llmaz-gateway's prefix-aware routing on the real node: what the engines themselves say they reused.

The engines are real llama.cpp servers; each answer carries `usage.prompt_tokens_details.cached_tokens`, the
prompt tokens that engine took from its own KV cache. A request sent where its prompt was prefilled before reuses
it; anywhere else it is prefilled again.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import (
    BUCKET,
    GATEWAY,
    GATEWAY_NAMESPACE,
    KEY,
    credentials,
    gateway_url,
    routable,
    served,
    tiny_llama,
)
from .support import Environment, ModelNames, eventually, http_request, pod_ready, wait_playground_ready

pytestmark = pytest.mark.tier("node")
ROUTING = {"llmaz.io/routing-strategy": "prefix-aware"}
# The tiny model's context is 512 tokens: 2 slots of 512 each, a system prompt of about 200 tokens.
ENGINE_ARGS = ["-c", "1024", "-np", "2"]
_WORDS = ("time", "people", "year", "way", "day", "thing", "man", "world", "life", "hand", "part", "child", "eye")


def system_prompt(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(200))


def chat_body(model: str, system: str, question: str) -> bytes:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return json.dumps({"model": model, "messages": messages, "max_tokens": 4, "temperature": 0}).encode()


def ask(url: str, model: str, system: str, question: str) -> dict[str, Any]:
    status, body = http_request(
        f"{url}/chat/completions",
        method="POST",
        body=chat_body(model, system, question),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert status == 200, body[:300]
    usage: dict[str, Any] = json.loads(body)["usage"]
    return usage


def gateway_pods(e2e: Environment) -> list[dict[str, Any]]:
    pods = e2e.items("pods", GATEWAY_NAMESPACE, "app.kubernetes.io/component=gateway")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and pod_ready(p)]


def scale_gateway(e2e: Environment, replicas: int) -> None:
    e2e.kubectl("scale", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE, f"--replicas={replicas}")
    e2e.kubectl("rollout", "status", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE, "--timeout=180s")
    eventually(lambda: len(gateway_pods(e2e)) == replicas, what=f"{replicas} gateway pods Ready")


@pytest.fixture
def two_gateways(e2e: Environment) -> Iterator[list[str]]:
    """The API URLs of two gateway replicas, by pod IP; one replica again afterwards."""
    scale_gateway(e2e, 2)
    try:
        yield [f"http://{p['status']['podIP']}:8000/v1" for p in gateway_pods(e2e)]
    finally:
        scale_gateway(e2e, 1)


def serve_routed(
    e2e: Environment, namespace: str, name: str, model: str, store: ObjectStore, backend: str = "llamacpp"
) -> None:
    e2e.apply([credentials()], namespace)
    playground = served(name, model, store, replicas=2)
    playground["metadata"]["annotations"] = dict(ROUTING)
    config = playground["spec"]["backendRuntimeConfig"]
    config["backendName"] = backend
    config["args"] += ENGINE_ARGS
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), playground], namespace)
    wait_playground_ready(e2e, namespace, name, replicas=2)


def test_two_gateway_replicas_send_each_shared_prefix_to_the_engine_that_prefilled_it(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore, two_gateways: list[str]
) -> None:
    model = models.new("affinity")
    serve_routed(e2e, namespace, "affinity", model, object_store)
    for url in two_gateways:

        def lists_the_model(url: str = url) -> bool:
            return model in http_request(f"{url}/models")[1].decode()

        eventually(lists_the_model, what=f"{url} listing {model}")
    groups = {g: system_prompt(g) for g in range(2)}
    seen: dict[int, int] = {}
    misses: list[str] = []
    for i in range(12):  # alternately through each replica, each group in turn
        group, url = i % 2, two_gateways[(i // 2) % 2]
        usage = ask(url, model, groups[group], f"question {i}?")
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        line = f"request {i} group {group} via {url}: {cached} of {usage['prompt_tokens']} prompt tokens cached"
        print(line)
        if group in seen and cached < 0.8 * usage["prompt_tokens"]:
            misses.append(line)
        seen.setdefault(group, cached)
    assert misses == [], "prefilled again:\n" + "\n".join(misses)


def test_with_every_engines_metrics_down_prefix_aware_routing_answers_every_request(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # llama.cpp without --metrics answers /metrics with 501: the gateway never knows these engines' load.
    backend = e2e.must_get("backendruntimes", "llamacpp")
    quiet = f"llamacpp-no-metrics-{namespace}"[:63]
    spec = backend["spec"]
    for config in spec["recommendedConfigs"]:
        config["args"] = [a for a in config["args"] if a != "--metrics"]
    e2e.apply([{"apiVersion": backend["apiVersion"], "kind": "BackendRuntime", "metadata": {"name": quiet},
                "spec": spec}])  # fmt: skip
    try:
        model = models.new("quiet")
        serve_routed(e2e, namespace, "quiet", model, object_store, backend=quiet)
        routable(e2e, model)
        url = gateway_url(e2e)
        prompts = [(system_prompt(i % 3), f"question {i}?") for i in range(24)]
        with ThreadPoolExecutor(4) as pool:
            usages = list(pool.map(lambda p: ask(url, model, *p), prompts))
        assert len(usages) == 24
        (gateway,) = gateway_pods(e2e)

        def stale_endpoints() -> float | None:
            # An endpoint turns stale after its third failed scrape: the second replica may get there after the chats.
            status, page = http_request(f"http://{gateway['status']['podIP']}:8080/metrics")
            assert status == 200
            lines = page.decode().splitlines()
            stale = [line for line in lines if line.startswith("llmaz_gateway_stale_endpoints ")]
            assert len(stale) == 1, stale
            count = float(stale[0].split()[1])
            return count if count >= 2 else None

        eventually(stale_endpoints, within=30, what="both replicas counted in llmaz_gateway_stale_endpoints")
    finally:
        e2e.kubectl("delete", "backendruntime", quiet, "--ignore-not-found")
