"""Model injection per source kind: loaders, credentials, volumes and mounts, with llmaz's host-path volume clash,
missing S3/GCS loader env and duplicated loader env fixed."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import OpenModel, Service
from llmaz.controllers.builders import build_leader_worker_set

from .factories import (
    AWS_KEYS,
    HF_TOKENS,
    LOADER_IMAGE,
    LOADER_MOUNT,
    LOADER_SECURITY,
    MODEL_VOLUME,
    OSS_KEYS,
    READ_ONLY_MODEL_MOUNT,
    env,
    hub_model,
    only_runner,
    runner,
    single_host_service,
    uri_model,
    worker,
)

# Per source kind: model, loader env (None = no init container), volumes after the user's, runner mounts after
# the user's.
HOST_VOLUME = {"name": "model-volume", "hostPath": {"path": "/workspace/Qwen2-0.5B-Instruct"}}
HOST_MOUNT = {"name": "model-volume", "mountPath": "/workspace/Qwen2-0.5B-Instruct", "readOnly": True}
SOURCES: list[tuple[str, OpenModel, list[dict[str, Any]] | None, list[dict[str, Any]], list[dict[str, Any]]]] = [
    (
        "hugging face repository",
        hub_model("m", "facebook/opt-125m", allowPatterns=["*.json", "*.safetensors"], ignorePatterns=["*.bin"]),
        [
            env("MODEL_SOURCE_TYPE", "modelhub"),
            env("MODEL_ID", "facebook/opt-125m"),
            env("MODEL_HUB_NAME", "Huggingface"),
            env("REVISION", "main"),
            env("MODEL_ALLOW_PATTERNS", "*.json,*.safetensors"),
            env("MODEL_IGNORE_PATTERNS", "*.bin"),
            *HF_TOKENS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "hugging face file",
        hub_model("m", "Qwen/Qwen2-0.5B-Instruct-GGUF", filename="q.gguf", revision="v1"),
        [
            env("MODEL_SOURCE_TYPE", "modelhub"),
            env("MODEL_ID", "Qwen/Qwen2-0.5B-Instruct-GGUF"),
            env("MODEL_HUB_NAME", "Huggingface"),
            env("MODEL_FILENAME", "q.gguf"),
            env("REVISION", "v1"),
            *HF_TOKENS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "modelscope without CRD defaults",
        OpenModel.from_dict(
            {"metadata": {"name": "m"}, "spec": {"familyName": "f", "source": {"modelHub": {"modelID": "A/b"}}}}
        ),
        [
            env("MODEL_SOURCE_TYPE", "modelhub"),
            env("MODEL_ID", "A/b"),
            env("MODEL_HUB_NAME", "Huggingface"),
            env("REVISION", "main"),
            *HF_TOKENS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "modelscope",
        OpenModel.from_dict(
            {
                "metadata": {"name": "m"},
                "spec": {"familyName": "f", "source": {"modelHub": {"name": "ModelScope", "modelID": "A/b"}}},
            }
        ),
        [
            env("MODEL_SOURCE_TYPE", "modelhub"),
            env("MODEL_ID", "A/b"),
            env("MODEL_HUB_NAME", "ModelScope"),
            env("REVISION", "main"),
            *HF_TOKENS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "oss directory",
        uri_model("m", "oss://llmaz.oss-ap-southeast-1-internal.aliyuncs.com/models/Qwen2-7B"),
        [
            env("MODEL_SOURCE_TYPE", "objstore"),
            env("PROVIDER", "OSS"),
            env("ENDPOINT", "oss-ap-southeast-1-internal.aliyuncs.com"),
            env("BUCKET", "llmaz"),
            env("MODEL_PATH", "models/Qwen2-7B"),
            *OSS_KEYS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "oss file",
        uri_model("m", "oss://b.e/models/w.gguf"),
        [
            env("MODEL_SOURCE_TYPE", "objstore"),
            env("PROVIDER", "OSS"),
            env("ENDPOINT", "e"),
            env("BUCKET", "b"),
            env("MODEL_PATH", "models/w.gguf"),
            *OSS_KEYS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "s3",
        uri_model("m", "s3://my-models/DeepSeek-R1-Distill-Qwen-1.5B"),
        [
            env("MODEL_SOURCE_TYPE", "objstore"),
            env("PROVIDER", "S3"),
            env("BUCKET", "my-models"),
            env("MODEL_PATH", "DeepSeek-R1-Distill-Qwen-1.5B"),
            *AWS_KEYS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    (
        "gcs",
        uri_model("m", "gcs://bucket/dir/model.gguf"),
        [
            env("MODEL_SOURCE_TYPE", "objstore"),
            env("PROVIDER", "GCS"),
            env("BUCKET", "bucket"),
            env("MODEL_PATH", "dir/model.gguf"),
            *AWS_KEYS,
        ],
        [MODEL_VOLUME],
        [READ_ONLY_MODEL_MOUNT],
    ),
    ("ollama", uri_model("m", "ollama://qwen2:0.5b"), None, [MODEL_VOLUME], [READ_ONLY_MODEL_MOUNT]),
    ("host path", uri_model("m", "host:///workspace/Qwen2-0.5B-Instruct"), None, [HOST_VOLUME], [HOST_MOUNT]),
]
IDS = [case[0] for case in SOURCES]
USER_VOLUME = {"name": "cache", "emptyDir": {}}
USER_MOUNT = {"name": "cache", "mountPath": "/cache"}


def user_service(**kwargs: Any) -> Service:
    container = runner(volumeMounts=[USER_MOUNT])
    svc = single_host_service(container=container, **kwargs)
    svc.spec.workload_template["workerTemplate"]["spec"]["volumes"] = [USER_VOLUME]
    return svc


@pytest.mark.parametrize(("case", "model", "loader_env", "volumes", "mounts"), SOURCES, ids=IDS)
def test_each_source_gets_its_loader_env(
    case: str, model: OpenModel, loader_env: Any, volumes: Any, mounts: Any
) -> None:
    pod = worker(build_leader_worker_set(user_service(), [model], LOADER_IMAGE))["spec"]
    if loader_env is None:
        assert "initContainers" not in pod
    else:
        assert pod["initContainers"] == [
            {
                "name": "model-loader",
                "image": LOADER_IMAGE,
                "env": loader_env,
                "volumeMounts": LOADER_MOUNT,
                "securityContext": LOADER_SECURITY,
            }
        ]


@pytest.mark.parametrize(("case", "model", "loader_env", "volumes", "mounts"), SOURCES, ids=IDS)
def test_each_source_appends_its_volume_and_mount_after_the_users(
    case: str, model: OpenModel, loader_env: Any, volumes: Any, mounts: Any
) -> None:
    pod = worker(build_leader_worker_set(user_service(), [model], LOADER_IMAGE))["spec"]
    assert pod["volumes"] == [USER_VOLUME, *volumes]
    assert only_runner({"spec": pod})["volumeMounts"] == [USER_MOUNT, *mounts]


@pytest.mark.parametrize(
    ("model", "credentials"),
    [
        (hub_model("m", "a/b"), HF_TOKENS),
        (uri_model("m", "oss://b.e/p"), OSS_KEYS),
        (uri_model("m", "s3://b/p"), AWS_KEYS),
        (uri_model("m", "gcs://b/p"), AWS_KEYS),
        (uri_model("m", "ollama://qwen2:0.5b"), []),
    ],
    ids=["hub", "oss", "s3", "gcs", "ollama"],
)
def test_skipping_the_loader_adds_credentials_to_the_runner_and_no_model_volume(
    model: OpenModel, credentials: list[dict[str, Any]]
) -> None:
    svc = user_service(annotations={"llmaz.io/skip-model-loader": "true"})
    pod = worker(build_leader_worker_set(svc, [model], LOADER_IMAGE))["spec"]
    assert "initContainers" not in pod
    assert pod["volumes"] == [USER_VOLUME]
    runner_container = only_runner({"spec": pod})
    assert runner_container["volumeMounts"] == [USER_MOUNT]
    assert runner_container.get("env", []) == credentials


def test_skipping_the_loader_keeps_credentials_the_user_already_set() -> None:
    mine = env("HF_TOKEN", "mine")
    svc = single_host_service(annotations={"llmaz.io/skip-model-loader": "true"}, container=runner(env=[mine]))
    pod = worker(build_leader_worker_set(svc, [hub_model("m", "a/b")], LOADER_IMAGE))["spec"]
    assert only_runner({"spec": pod})["env"] == [mine, HF_TOKENS[0]]


def test_skipping_the_loader_still_mounts_host_paths() -> None:
    svc = single_host_service(annotations={"llmaz.io/skip-model-loader": "true"})
    pod = worker(build_leader_worker_set(svc, [uri_model("m", "host:///models/q")], LOADER_IMAGE))["spec"]
    assert pod["volumes"] == [{"name": "model-volume", "hostPath": {"path": "/models/q"}}]


def test_only_the_exact_value_true_skips_the_loader() -> None:
    svc = single_host_service(annotations={"llmaz.io/skip-model-loader": "True"})
    pod = worker(build_leader_worker_set(svc, [hub_model("m", "a/b")], LOADER_IMAGE))["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["model-loader"]


def test_loader_env_starts_from_the_model_runner_env_and_its_own_variables_win() -> None:
    sidecar = {"name": "sidecar", "image": "s", "env": [env("SIDE", "1")]}
    main = runner(env=[env("HF_ENDPOINT", "https://mirror"), env("HF_TOKEN", "mine"), env("MODEL_ID", "x")])
    svc = single_host_service()
    svc.spec.workload_template["workerTemplate"]["spec"]["containers"] = [sidecar, main]
    pod = worker(build_leader_worker_set(svc, [hub_model("m", "a/b")], LOADER_IMAGE))["spec"]
    loader_env = pod["initContainers"][0]["env"]
    names = [e["name"] for e in loader_env]
    assert len(names) == len(set(names))
    assert loader_env[:3] == [env("HF_ENDPOINT", "https://mirror"), HF_TOKENS[1], env("MODEL_ID", "a/b")]
    assert "SIDE" not in names


def test_user_init_containers_run_before_the_loaders() -> None:
    svc = single_host_service()
    svc.spec.workload_template["workerTemplate"]["spec"]["initContainers"] = [{"name": "setup", "image": "busybox"}]
    models = [hub_model("m", "a/b"), hub_model("d", "a/d")]
    pod = worker(build_leader_worker_set(svc, models, LOADER_IMAGE))["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["setup", "model-loader", "model-loader-1"]


def test_host_main_with_hub_draft_gets_distinct_volume_names() -> None:
    models = [uri_model("m", "host:///models/main"), hub_model("d", "a/d")]
    pod = worker(build_leader_worker_set(single_host_service(), models, LOADER_IMAGE))["spec"]
    assert pod["volumes"] == [{"name": "model-volume-0", "hostPath": {"path": "/models/main"}}, MODEL_VOLUME]
    assert [c["name"] for c in pod["initContainers"]] == ["model-loader-1"]


def test_two_host_models_get_one_volume_each() -> None:
    models = [uri_model("m", "host:///models/main"), uri_model("d", "host:///models/draft")]
    pod = worker(build_leader_worker_set(single_host_service(), models, LOADER_IMAGE))["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["model-volume", "model-volume-1"]
