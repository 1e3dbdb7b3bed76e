"""A Playground on each default backend goes all the way: Service, LeaderWorkerSet, scheduled pods, Ready."""

from __future__ import annotations

import pytest

from .support import Environment, ModelNames, conditions, open_model, playground, wait_playground_ready

BACKENDS = ["vllm", "sglang", "llamacpp", "ollama", "tgi", "tensorrt-llm"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_playground_becomes_ready_with_replicas_times_size_pods_running(
    e2e: Environment, namespace: str, models: ModelNames, backend: str
) -> None:
    model = models.new("model")
    uri = "ollama://qwen2:0.5b" if backend == "ollama" else None
    e2e.apply([open_model(model, family="qwen2", model_id="Qwen/Qwen2-0.5B-Instruct", uri=uri)])

    e2e.apply([playground("chat", model, replicas=2, backend=backend)], namespace)

    found = wait_playground_ready(e2e, namespace, "chat", replicas=2)
    assert conditions(found)["Progressing"][0] == "True"
    service = e2e.get("services.inference", "chat", namespace)
    assert conditions(service)["Available"] == ("True", "ServiceReady")
    lws = e2e.get("leaderworkersets", "chat", namespace)
    assert lws is not None
    assert lws["spec"]["replicas"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 1
    backend_image = e2e.get("backendruntimes", backend)
    assert backend_image is not None
    for pod in e2e.pods_of(namespace, "chat"):
        runner = next(c for c in pod["spec"]["containers"] if c["name"] == "model-runner")
        assert runner["image"].startswith(backend_image["spec"]["image"] + ":")
        assert pod["spec"]["nodeName"] in {n["metadata"]["name"] for n in e2e.items("nodes", selector="type=kwok")}
        assert pod["metadata"]["labels"]["llmaz.io/model-name"] == model
