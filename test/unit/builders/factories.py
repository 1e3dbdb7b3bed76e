"""Inputs for the builder tests: the default backends and samples from `config/`, and small object factories."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from llmaz.apis import BackendRuntime, OpenModel, Playground, Service

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "X"
PLAYGROUND_UID = "11111111-2222-3333-4444-555555555555"
SERVICE_UID = "66666666-7777-8888-9999-000000000000"
LOADER_IMAGE = "inftyai/model-loader:v0.0.10"
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = datetime(2025, 1, 2, 4, 0, 0, tzinfo=UTC)


@functools.cache
def _documents(relative: str) -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.safe_load_all((REPO / relative).read_text()) if doc)


def documents(relative: str) -> list[dict[str, Any]]:
    """The YAML documents of a repository file (fresh copies)."""
    return [yaml.safe_load(yaml.safe_dump(doc)) for doc in _documents(relative)]


def backend(name: str) -> BackendRuntime:
    """A default BackendRuntime as shipped in config/backends."""
    return BackendRuntime.from_dict(documents(f"config/backends/{name}.yaml")[0])


def vllm_test_copy() -> BackendRuntime:
    """llmaz's test copy of vllm (its integration fixtures): version v0.6.0 and no lifecycle hook."""
    data = documents("config/backends/vllm.yaml")[0]
    data["spec"]["version"] = "v0.6.0"
    del data["spec"]["lifecycle"]
    return BackendRuntime.from_dict(data)


def model(name: str, source: dict[str, Any], family: str = "llama3", flavors: Any = None) -> OpenModel:
    spec: dict[str, Any] = {"familyName": family, "source": source}
    if flavors is not None:
        spec["inferenceConfig"] = {"flavors": flavors}
    return OpenModel.from_dict({"metadata": {"name": name}, "spec": spec})


def hub_model(name: str, model_id: str, flavors: Any = None, **hub: Any) -> OpenModel:
    source = {"modelHub": {"name": "Huggingface", "modelID": model_id, "revision": "main", **hub}}
    return model(name, source, flavors=flavors)


def uri_model(name: str, uri: str, flavors: Any = None) -> OpenModel:
    return model(name, {"uri": uri}, flavors=flavors)


A100_A10 = [{"name": "a100", "limits": {"nvidia.com/gpu": 1}}, {"name": "a10", "limits": {"nvidia.com/gpu": 2}}]


def llama3_8b() -> OpenModel:
    return hub_model("llama3-8b", "meta-llama/Meta-Llama-3-8B", flavors=A100_A10)


def llama3_2b() -> OpenModel:
    return hub_model("llama3-2b", "meta-llama/Meta-Llama-3-2B")


def playground(
    spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None, name: str = "playground-llama3-8b"
) -> Playground:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": PLAYGROUND_UID, "generation": 1}
    if annotations is not None:
        metadata["annotations"] = annotations
    return Playground.from_dict(
        {"metadata": metadata, "spec": spec or {"replicas": 1, "modelClaim": {"modelName": "llama3-8b"}}}
    )


def service(spec: dict[str, Any], annotations: dict[str, str] | None = None, name: str = "svc") -> Service:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": SERVICE_UID, "generation": 1}
    if annotations is not None:
        metadata["annotations"] = annotations
    return Service.from_dict({"metadata": metadata, "spec": spec})


def runner(**fields: Any) -> dict[str, Any]:
    return {"name": "model-runner", "image": "engine:v1", **fields}


def single_host_service(
    models: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    container: dict[str, Any] | None = None,
    **spec: Any,
) -> Service:
    template = {"spec": {"containers": [container or runner()]}}
    return service(
        {
            "modelClaims": {"models": models or [{"name": "m", "role": "main"}], **spec.pop("claims", {})},
            "replicas": 1,
            "workloadTemplate": {"workerTemplate": template, "size": 1},
            **spec,
        },
        annotations,
    )


HF_TOKENS = [
    {"name": n, "valueFrom": {"secretKeyRef": {"name": "modelhub-secret", "key": "HF_TOKEN", "optional": True}}}
    for n in ("HUGGING_FACE_HUB_TOKEN", "HF_TOKEN")
]
OSS_KEYS = [
    {"name": k, "valueFrom": {"secretKeyRef": {"name": "oss-access-secret", "key": k, "optional": True}}}
    for k in ("OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET")
]
AWS_KEYS = [
    {"name": k, "valueFrom": {"secretKeyRef": {"name": "aws-access-secret", "key": k, "optional": True}}}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
]
MODEL_VOLUME = {"name": "model-volume", "emptyDir": {}}
READ_ONLY_MODEL_MOUNT = {"name": "model-volume", "mountPath": "/workspace/models/", "readOnly": True}
LOADER_MOUNT = [{"name": "model-volume", "mountPath": "/workspace/models/"}]
# What a loader runs with under `model-pod-security: restricted`, the default.
LOADER_SECURITY = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def worker(lws: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    return template


def only_runner(template: dict[str, Any]) -> dict[str, Any]:
    runners = [c for c in template["spec"]["containers"] if c["name"] == "model-runner"]
    assert len(runners) == 1
    found: dict[str, Any] = runners[0]
    return found
