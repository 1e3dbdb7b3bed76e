"""LoRA adapters really served on the real node: the tiny model with its tiny random adapter, on llama.cpp.

The adapter comes from the node's object store like the model (`s3://BUCKET/ADAPTER_KEY`), loaded by its own
model-loader init container; llama.cpp loads it with scale 0, and the gateway applies it to requests that name it.
At temperature 0 with a fixed seed the answers are deterministic, so "differs" and "unchanged" are exact.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import (
    ADAPTER_KEY,
    BUCKET,
    KEY,
    OTHER_MODELS_ADAPTER_KEY,
    credentials,
    gateway_completion,
    gateway_url,
    paced,
    routable,
    served,
    tiny_llama,
)
from .support import Environment, ModelNames, eventually, http_request, pod_ready, wait_playground_ready

pytestmark = pytest.mark.tier("node")
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
PROMPT = "Say hello."


def with_adapter(model: str, adapter: str, key: str = ADAPTER_KEY) -> dict[str, Any]:
    document = tiny_llama(model, f"s3://{BUCKET}/{KEY}")
    document["spec"]["adapters"] = [{"name": adapter, "source": {"uri": f"s3://{BUCKET}/{key}"}}]
    return document


def greedy(e2e: Environment, model: str) -> dict[str, Any]:
    """One chat completion for `model` through the gateway at temperature 0 and a fixed seed."""
    request = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
               "temperature": 0, "seed": 7}  # fmt: skip
    return gateway_completion(e2e, request)


def test_an_adapter_is_listed_under_its_model_and_changes_the_answers_only_for_requests_that_name_it(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model, adapter = models.new("base"), models.new("lora")
    e2e.apply([credentials()], namespace)
    e2e.apply([with_adapter(model, adapter), served("lora", model, object_store)], namespace)
    wait_playground_ready(e2e, namespace, "lora", replicas=1)
    (pod,) = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=lora")
    loaders = [c["name"] for c in pod["spec"]["initContainers"]]
    assert loaders == ["model-loader", "model-loader-adapter-0"], loaders
    (engine,) = pod["spec"]["containers"]
    args = engine["args"]
    assert args[args.index("--lora-scaled") + 1] == "/workspace/models/adapters--" + adapter + "/tiny-lora.gguf:0"
    assert "--lora-init-without-apply" in args

    routable(e2e, model)

    def listed() -> dict[str, Any]:
        status, body = http_request(f"{gateway_url(e2e)}/models")
        assert status == 200, body[:300]
        entries = {entry["id"]: entry for entry in json.loads(body)["data"]}
        assert adapter in entries, sorted(entries)
        return entries

    entries = eventually(listed, what=f"the gateway listing adapter {adapter}")
    assert entries[adapter]["parent"] == model, entries[adapter]
    assert model in entries

    base = greedy(e2e, model)["choices"][0]["message"]["content"]
    adapted = greedy(e2e, adapter)
    assert adapted["choices"][0]["message"]["content"] != base, (base, adapted)
    assert greedy(e2e, adapter)["choices"][0]["message"]["content"] == adapted["choices"][0]["message"]["content"]
    # The base model's answers are what they were, before and after the adapter's requests.
    assert greedy(e2e, model)["choices"][0]["message"]["content"] == base
    print(f"base {model}: {base!r}; adapter {adapter}: {adapted['choices'][0]['message']['content']!r}")


def test_adapters_that_fail_for_good_are_left_out_and_the_model_serves_without_them(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # Three adapters: one whose object does not exist (its loader exits 3), one made for another model (llama.cpp
    # exits at start), one that works. Each failure is recorded and left out in turn; then the pod starts with the
    # good one and serves.
    model = models.new("base")
    gone, other, good = models.new("gone"), models.new("other"), models.new("good")
    missing = f"missing/{namespace}/lora.gguf"
    document = tiny_llama(model, f"s3://{BUCKET}/{KEY}")
    document["spec"]["adapters"] = [
        {"name": gone, "source": {"uri": f"s3://{BUCKET}/{missing}"}},
        {"name": other, "source": {"uri": f"s3://{BUCKET}/{OTHER_MODELS_ADAPTER_KEY}"}},
        {"name": good, "source": {"uri": f"s3://{BUCKET}/{ADAPTER_KEY}"}},
    ]
    e2e.apply([credentials()], namespace)
    started = time.monotonic()
    e2e.apply([document, served("lora-left-out", model, object_store)], namespace)

    def left_out() -> dict[str, Any]:
        playground = e2e.must_get("playgrounds", "lora-left-out", namespace)
        conditions = (playground.get("status") or {}).get("conditions") or []
        adapters: dict[str, Any] | None = next((c for c in conditions if c["type"] == "AdaptersReady"), None)
        assert adapters is not None, conditions
        assert adapters["status"] == "False", adapters
        assert f"adapter {gone} " in adapters["message"], adapters
        assert f"adapter {other} " in adapters["message"], adapters
        return adapters

    condition = eventually(left_out, what="both failing adapters left out in the Playground's AdaptersReady")
    recorded = time.monotonic() - started
    message = condition["message"]
    print(f"AdaptersReady: {condition['reason']}: {message}")
    assert condition["reason"] == "AdapterUnavailable"
    assert f"adapter {gone} (spec.adapters[0] of OpenModel {model}) is left out" in message, message
    assert "init container model-loader-adapter-0" in message, message
    assert "exited with code 3: NotFound" in message, message
    assert f"adapter {other} (spec.adapters[1] of OpenModel {model}) is left out" in message, message
    assert "container model-runner" in message, message
    assert "failed to apply lora adapter" in message, message

    wait_playground_ready(e2e, namespace, "lora-left-out", replicas=1)
    ready = time.monotonic() - started
    (pod,) = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=lora-left-out")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["model-loader", "model-loader-adapter-2"]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--lora-scaled") + 1] == f"/workspace/models/adapters--{good}/tiny-lora.gguf:0", args
    service = e2e.must_get("services.inference", "lora-left-out", namespace)
    assert [entry["name"] for entry in service["status"]["unavailableAdapters"]] == [gone, other]

    routable(e2e, model)
    base = greedy(e2e, model)["choices"][0]["message"]["content"]
    adapted = greedy(e2e, good)["choices"][0]["message"]["content"]
    assert adapted != base, (base, adapted)
    status, body = http_request(
        f"{gateway_url(e2e)}/chat/completions",
        method="POST",
        body=json.dumps({"model": gone, "messages": [{"role": "user", "content": PROMPT}]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    error = json.loads(body)["error"]
    assert (status, error["code"]) == (503, "model_not_ready"), body
    # Why is in the Service's status (above) and the gateway's log; the client is told the reason class only.
    expected = f"The model `{gone}` has no ready endpoint, and none is coming (adapter unavailable)."
    assert error["message"] == expected, error
    print(
        f"both adapters left out {recorded:.1f} s after the apply, Playground ready at {ready:.1f} s; "
        f"base {base!r}, adapter {good} {adapted!r}; {gone}: {status} {error['message']}"
    )


def test_adding_an_adapter_to_a_serving_model_rolls_its_replicas_one_at_a_time_with_no_failed_request(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # Adapters load at start: a new one changes the pod template, and LeaderWorkerSet replaces the groups one at a
    # time while the others serve.
    model, adapter = models.new("base"), models.new("added")
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), served("grow", model, object_store, replicas=2)], namespace)
    wait_playground_ready(e2e, namespace, "grow", replicas=2)
    routable(e2e, model)
    old = {p["metadata"]["uid"] for p in e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=grow")}
    marks: list[str] = []

    def rolled() -> bool:
        pods = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=grow")
        new = [p for p in pods if p["metadata"]["uid"] not in old]
        return len(pods) == len(new) == 2 and all(pod_ready(p) for p in new)

    with paced(gateway_url(e2e), model, period=0.5) as client:
        eventually(lambda: len(client.answers) >= 4, what="the base model answering before the adapter is added")
        marks.append(f"adapter added at t={time.monotonic() - client.started:.2f}s")
        e2e.apply([with_adapter(model, adapter)])
        eventually(rolled, within=300, what="both replicas replaced by ones loading the adapter, Ready")
        marks.append(f"both new pods Ready at t={time.monotonic() - client.started:.2f}s")
        seen = len(client.answers)
        eventually(lambda: len(client.answers) >= seen + 4, what="4 more answers from the new pods")
    print(f"\n{'; '.join(marks)}:\n{client.timeline()}")
    failed = [a for a in client.answers if a.status != 200]
    assert failed == [], f"{len(failed)} failed: {[a.body[:200] for a in failed]}\n{client.timeline()}"
    slowest = max(a.seconds for a in client.answers)
    print(f"{len(client.answers)} requests to the base model, none failed, slowest {slowest * 1000:.0f} ms")
    assert (
        greedy(e2e, adapter)["choices"][0]["message"]["content"]
        != greedy(e2e, model)["choices"][0]["message"]["content"]
    )
