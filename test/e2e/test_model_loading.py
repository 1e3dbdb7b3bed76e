"""How the model gets into the pods: model-loader init containers, or credentials for the engine itself."""

from __future__ import annotations

import json
from typing import Any

from .support import Environment, ModelNames, open_model, playground, wait_playground_ready


def test_a_speculative_decoding_playground_runs_pods_with_a_loader_per_model(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    main, draft = models.new("main"), models.new("draft")
    e2e.apply(
        [
            open_model(main, model_id="facebook/opt-6.7b"),
            open_model(draft, model_id="facebook/opt-125m"),
            playground("speculator", claims=[(main, "main"), (draft, "draft")], backend="vllm"),
        ],
        namespace,
    )

    wait_playground_ready(e2e, namespace, "speculator", replicas=1)
    [pod] = e2e.pods_of(namespace, "speculator")
    loaders = pod["spec"]["initContainers"]
    assert [c["name"] for c in loaders] == ["model-loader", "model-loader-1"]
    assert [_env(c)["MODEL_ID"] for c in loaders] == ["facebook/opt-6.7b", "facebook/opt-125m"]
    assert [s["state"]["terminated"]["reason"] for s in pod["status"]["initContainerStatuses"]] == ["Completed"] * 2
    args = pod["spec"]["containers"][0]["args"]
    speculative = json.loads(args[args.index("--speculative-config") + 1])
    assert speculative["model"] == "/workspace/models/models--facebook--opt-125m"


def test_skip_model_loader_runs_pods_without_init_containers_but_with_credentials(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("llama")
    skip = {"llmaz.io/skip-model-loader": "true"}
    e2e.apply(
        [
            open_model(model, family="llama3", model_id="meta-llama/Meta-Llama-3-8B"),
            playground("direct", model, annotations=skip),
        ],
        namespace,
    )

    wait_playground_ready(e2e, namespace, "direct", replicas=1)
    [pod] = e2e.pods_of(namespace, "direct")
    assert not pod["spec"].get("initContainers")
    runner = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in runner.get("env", [])}
    for name in ("HUGGING_FACE_HUB_TOKEN", "HF_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": "modelhub-secret",
            "key": "HF_TOKEN",
            "optional": True,
        }
    assert "meta-llama/Meta-Llama-3-8B" in runner["args"]
    assert all(v["name"] != "model-volume" for v in pod["spec"]["volumes"])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}
