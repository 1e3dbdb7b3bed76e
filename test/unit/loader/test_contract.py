"""The controller and the loader agree on where every kind of loaded model lives.

For each source kind with a loader, the desired LeaderWorkerSet is built with the controller's builders; the path
rendered into the runner's arguments (`{{ .ModelPath }}`) must be exactly the loader's target, computed from the
environment the builders gave the loader's init container, and both containers must mount the model volume there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import llmaz.apis.constants as c
from llmaz.apis import BackendRuntime, OpenModel, Playground, Service
from llmaz.controllers.builders import build_leader_worker_set, build_service
from llmaz.loader.config import read_config

VLLM = Path(__file__).resolve().parents[3] / "config" / "backends" / "vllm.yaml"

SOURCES: dict[str, tuple[dict[str, Any], str, bool]] = {
    # kind: (OpenModel source, expected path, single file)
    "huggingface-repo": (
        {"modelHub": {"name": "Huggingface", "modelID": "Qwen/Qwen2-0.5B-Instruct", "revision": "main"}},
        "/workspace/models/models--Qwen--Qwen2-0.5B-Instruct",
        False,
    ),
    "huggingface-file": (
        {
            "modelHub": {
                "name": "Huggingface",
                "modelID": "Qwen/Qwen2-0.5B-Instruct-GGUF",
                "revision": "main",
                "filename": "qwen2-0_5b-instruct-q5_k_m.gguf",
            }
        },
        "/workspace/models/qwen2-0_5b-instruct-q5_k_m.gguf",
        True,
    ),
    "huggingface-patterns": (
        {
            "modelHub": {
                "name": "Huggingface",
                "modelID": "facebook/opt-125m",
                "allowPatterns": ["*.json"],
                "ignorePatterns": ["*.md"],
            }
        },
        "/workspace/models/models--facebook--opt-125m",
        False,
    ),
    "modelscope-repo": (
        {"modelHub": {"name": "ModelScope", "modelID": "AI-ModelScope/opt-125", "revision": "master"}},
        "/workspace/models/models--AI-ModelScope--opt-125",
        False,
    ),
    "oss-directory": (
        {"uri": "oss://llmaz.oss-ap-southeast-1-internal.aliyuncs.com/models/Qwen2.5-7B"},
        "/workspace/models/models--Qwen2.5-7B",
        False,
    ),
    "oss-file": (
        {"uri": "oss://llmaz.oss-ap-southeast-1.aliyuncs.com/gguf/weight.gguf"},
        "/workspace/models/weight.gguf",
        True,
    ),
    "s3-directory": (
        {"uri": "s3://bucket/models/DeepSeek-R1-Distill-Qwen-1.5B"},
        "/workspace/models/models--DeepSeek-R1-Distill-Qwen-1.5B",
        False,
    ),
    "s3-file": ({"uri": "s3://bucket/gguf/qwen2-0_5b.gguf"}, "/workspace/models/qwen2-0_5b.gguf", True),
    "gcs-directory": ({"uri": "gcs://bucket/models/Llama-3.2-1B/"}, "/workspace/models/models--Llama-3.2-1B", False),
    "gcs-file": ({"uri": "gcs://bucket/Llama-3.2-1B.safetensors"}, "/workspace/models/Llama-3.2-1B.safetensors", True),
}


def model(name: str, source: dict[str, Any]) -> OpenModel:
    return OpenModel.from_dict({"metadata": {"name": name}, "spec": {"familyName": "f", "source": source}})


def desired_lws(open_model: OpenModel, runner_env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Playground -> Service -> LeaderWorkerSet through the controller's builders, with the default vllm backend."""
    spec: dict[str, Any] = {"replicas": 1, "modelClaim": {"modelName": open_model.metadata.name}}
    if runner_env:
        spec["backendRuntimeConfig"] = {"envs": runner_env}
    playground = Playground.from_dict(
        {"metadata": {"name": "pg", "namespace": "ns", "uid": "pg-uid", "generation": 1}, "spec": spec}
    )
    backend = BackendRuntime.from_dict(yaml.safe_load(VLLM.read_text()))
    service_dict = build_service(playground, [open_model], backend)
    service_dict["metadata"].update(uid="svc-uid", generation=1)
    return build_leader_worker_set(Service.from_dict(service_dict), [open_model], c.DEFAULT_INIT_CONTAINER_IMAGE)


def worker_pod(lws: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    return pod


def rendered_model_path(pod: dict[str, Any]) -> str:
    (runner,) = [x for x in pod["containers"] if x["name"] == c.MODEL_RUNNER_CONTAINER_NAME]
    args = [*runner.get("command", []), *runner.get("args", [])]
    return str(args[args.index("--model") + 1])


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def mount_path(container: dict[str, Any]) -> str:
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == c.MODEL_VOLUME_NAME]
    return str(mount["mountPath"])


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_the_runner_is_pointed_exactly_where_the_loader_writes(kind: str) -> None:
    source, expected, single_file = SOURCES[kind]
    pod = worker_pod(desired_lws(model("m", source)))
    (loader,) = [x for x in pod["initContainers"] if x["name"] == c.MODEL_LOADER_CONTAINER_NAME]

    target = read_config(plain_env(loader)).target

    assert rendered_model_path(pod) == expected
    assert str(target.model_path) == expected
    assert target.single_file is single_file
    (runner,) = [x for x in pod["containers"] if x["name"] == c.MODEL_RUNNER_CONTAINER_NAME]
    assert mount_path(loader) == mount_path(runner) == c.CONTAINER_MODEL_PATH
