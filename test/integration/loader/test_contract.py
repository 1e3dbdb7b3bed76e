"""End to end contract: the loader, run with exactly the env the controller gives its init container, writes the
model where the controller points the runner.

Each case builds the desired LeaderWorkerSet with the controller's builders (Playground -> Service -> LWS), resolves
the init container's secret references with test credentials, runs `llmaz-loader` against a local server for the
source, and checks that the path rendered into the runner's `--model` argument (moved from `/workspace/models/` to
a temporary root) holds the model: a file for single-file sources, a directory otherwise. ModelScope has no local
server here; its path agreement is covered by the unit contract test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import llmaz.apis.constants as c
from llmaz.apis import BackendRuntime, OpenModel, Playground, Service
from llmaz.controllers.builders import build_leader_worker_set, build_service
from llmaz_dev.testing.storage import HubServer, OssServer

from .conftest import loader_env, run_loader, sample_repo

VLLM = Path(__file__).resolve().parents[3] / "config" / "backends" / "vllm.yaml"
SECRETS = {
    (c.MODELHUB_SECRET_NAME, c.HF_TOKEN_KEY): "hf_token",
    (c.OSS_SECRET_NAME, c.OSS_ACCESS_KEY_ID): "oss-key",
    (c.OSS_SECRET_NAME, c.OSS_ACCESS_KEY_SECRET): "oss-secret",
    (c.AWS_SECRET_NAME, c.AWS_ACCESS_KEY_ID): "testing",
    (c.AWS_SECRET_NAME, c.AWS_SECRET_ACCESS_KEY): "testing",
}
WEIGHTS = b"GGUF" + b"\x09" * 30_000
SHARDS = {"config.json": b"{}", "model.safetensors": b"\x03" * 40_000, "tokenizer/vocab.txt": b"a\n"}


def desired_pod(source: dict[str, Any], runner_env: list[dict[str, str]]) -> dict[str, Any]:
    model = OpenModel.from_dict({"metadata": {"name": "m"}, "spec": {"familyName": "f", "source": source}})
    playground = Playground.from_dict(
        {
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg-uid", "generation": 1},
            "spec": {"replicas": 1, "modelClaim": {"modelName": "m"}, "backendRuntimeConfig": {"envs": runner_env}},
        }
    )
    service = build_service(playground, [model], BackendRuntime.from_dict(yaml.safe_load(VLLM.read_text())))
    service["metadata"].update(uid="svc-uid", generation=1)
    lws = build_leader_worker_set(Service.from_dict(service), [model], c.DEFAULT_INIT_CONTAINER_IMAGE)
    pod: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    return pod


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The env as the kubelet would resolve it: literal values, and optional secret keys from `SECRETS`."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = SECRETS[(ref["name"], ref["key"])]
    return env


def runner_model_path(pod: dict[str, Any], root: Path) -> Path:
    (runner,) = [x for x in pod["containers"] if x["name"] == c.MODEL_RUNNER_CONTAINER_NAME]
    args = [*runner.get("command", []), *runner.get("args", [])]
    path = str(args[args.index("--model") + 1])
    assert path.startswith(c.CONTAINER_MODEL_PATH)
    return root / path[len(c.CONTAINER_MODEL_PATH) :]


def load_as_the_pod_would(pod: dict[str, Any], model_dir: Path) -> None:
    (loader,) = [x for x in pod["initContainers"] if x["name"] == c.MODEL_LOADER_CONTAINER_NAME]
    run = run_loader(loader_env(model_dir, **container_env(loader)))
    assert run.code == 0, run.stderr


def hub_repo(hub: HubServer, oss: OssServer, s3: Any, moto_url: str) -> Any:
    hub.repos["org/model"] = repo = sample_repo()
    return (
        {"modelHub": {"name": "Huggingface", "modelID": "org/model", "revision": "main"}},
        [{"name": "HF_ENDPOINT", "value": hub.url}],
        repo.revisions["main"],
    )


def hub_file(hub: HubServer, oss: OssServer, s3: Any, moto_url: str) -> Any:
    hub.repos["org/model"] = repo = sample_repo()
    return (
        {"modelHub": {"name": "Huggingface", "modelID": "org/model", "filename": "q4.gguf"}},
        [{"name": "HF_ENDPOINT", "value": hub.url}],
        repo.revisions["main"]["q4.gguf"],
    )


def _oss(path: str) -> Callable[..., Any]:
    def case(hub: HubServer, oss: OssServer, s3: Any, moto_url: str) -> Any:
        oss.buckets["models"] = {**{f"dir/Qwen2.5-7B/{k}": v for k, v in SHARDS.items()}, "gguf/w.gguf": WEIGHTS}
        expected = WEIGHTS if path.endswith(".gguf") else SHARDS
        return (
            {"uri": f"oss://models.127.0.0.1:{oss.port}/{path}"},
            [{"name": "OBJSTORE_ENDPOINT_SCHEME", "value": "http"}],
            expected,
        )

    return case


def _bucket(scheme: str, path: str) -> Callable[..., Any]:
    def case(hub: HubServer, oss: OssServer, s3: Any, moto_url: str) -> Any:
        s3.create_bucket(Bucket=f"contract-{scheme}")
        for key, data in {**{f"dir/Qwen2.5-7B/{k}": v for k, v in SHARDS.items()}, "gguf/w.gguf": WEIGHTS}.items():
            s3.put_object(Bucket=f"contract-{scheme}", Key=key, Body=data)
        expected = WEIGHTS if path.endswith(".gguf") else SHARDS
        return (
            {"uri": f"{scheme}://contract-{scheme}/{path}"},
            [{"name": "AWS_ENDPOINT_URL", "value": moto_url}],
            expected,
        )

    return case


CASES: dict[str, Callable[..., Any]] = {
    "huggingface-repo": hub_repo,
    "huggingface-file": hub_file,
    "oss-directory": _oss("dir/Qwen2.5-7B"),
    "oss-file": _oss("gguf/w.gguf"),
    "s3-directory": _bucket("s3", "dir/Qwen2.5-7B"),
    "s3-file": _bucket("s3", "gguf/w.gguf"),
    "gcs-directory": _bucket("gcs", "dir/Qwen2.5-7B"),
    "gcs-file": _bucket("gcs", "gguf/w.gguf"),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_loader_writes_where_the_controller_points_the_runner(
    kind: str, hub: HubServer, oss: OssServer, s3: Any, moto_url: str, model_dir: Path
) -> None:
    source, runner_env, expected = CASES[kind](hub, oss, s3, moto_url)
    pod = desired_pod(source, runner_env)

    load_as_the_pod_would(pod, model_dir)

    path = runner_model_path(pod, model_dir)
    if isinstance(expected, bytes):
        assert path.is_file()
        assert path.read_bytes() == expected
    else:
        found = {
            p.relative_to(path).as_posix(): p.read_bytes()
            for p in path.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        }
        assert path.is_dir()
        assert found == expected
