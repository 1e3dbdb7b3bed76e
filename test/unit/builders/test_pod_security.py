"""Model pods are confined by the global config's `model-pod-security` (restricted by default): the pod's seccomp
profile and service-account token, the loaders' and runners' security contexts, filling only what the template
leaves unset; loader resources and the model volume's size limit are set when configured."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Service
from llmaz.apis.core_v1alpha1 import Adapter
from llmaz.controllers.builders import build_leader_worker_set
from llmaz.controllers.builders.security import PodOptions

from .factories import (
    LOADER_IMAGE,
    LOADER_SECURITY,
    hub_model,
    runner,
    single_host_service,
    uri_model,
    worker,
)

RUNNER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}
HUB = hub_model("m", "a/b")


def pod(svc: Service, options: PodOptions | None = None, model: Any = HUB) -> dict[str, Any]:
    spec: dict[str, Any] = worker(build_leader_worker_set(svc, [model], LOADER_IMAGE, None, options))["spec"]
    return spec


def containers(spec: dict[str, Any], key: str = "containers") -> dict[str, dict[str, Any]]:
    return {container["name"]: container for container in spec.get(key) or []}


def test_by_default_the_pod_gets_no_token_and_the_runtime_seccomp_profile() -> None:
    spec = pod(single_host_service())
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == SECCOMP


def test_by_default_the_runner_cannot_escalate_and_holds_no_capability() -> None:
    assert containers(pod(single_host_service()))["model-runner"]["securityContext"] == RUNNER_SECURITY


def test_by_default_the_loader_runs_as_non_root_without_escalation_or_capabilities() -> None:
    assert containers(pod(single_host_service()), "initContainers")["model-loader"]["securityContext"] == (
        LOADER_SECURITY
    )


def test_a_sidecar_of_the_users_keeps_its_container_as_written() -> None:
    sidecar = {"name": "proxy", "image": "envoy"}
    svc = single_host_service()
    svc.spec.workload_template["workerTemplate"]["spec"]["containers"].append(dict(sidecar))
    assert containers(pod(svc))["proxy"] == sidecar


def test_what_the_users_template_sets_is_kept_and_only_the_rest_is_filled() -> None:
    template = {
        "spec": {
            "automountServiceAccountToken": True,
            "securityContext": {"fsGroup": 2000},
            "containers": [runner(securityContext={"capabilities": {"add": ["IPC_LOCK"]}})],
        }
    }
    svc = single_host_service(workloadTemplate={"workerTemplate": template, "size": 1})
    spec = pod(svc)
    assert spec["automountServiceAccountToken"] is True
    assert spec["securityContext"] == {"fsGroup": 2000, **SECCOMP}
    assert containers(spec)["model-runner"]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_a_seccomp_profile_of_the_users_is_kept() -> None:
    unconfined = {"seccompProfile": {"type": "Unconfined"}}
    template = {"spec": {"securityContext": unconfined, "containers": [runner()]}}
    svc = single_host_service(workloadTemplate={"workerTemplate": template, "size": 1})
    assert pod(svc)["securityContext"] == unconfined


def test_both_templates_of_a_multi_host_group_are_confined() -> None:
    def template() -> dict[str, Any]:
        return {"spec": {"containers": [runner()]}}

    svc = single_host_service(workloadTemplate={"size": 2, "leaderTemplate": template(), "workerTemplate": template()})
    lws = build_leader_worker_set(svc, [HUB], LOADER_IMAGE)
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert (spec["automountServiceAccountToken"], spec["securityContext"]) == (False, SECCOMP)
        assert containers(spec)["model-runner"]["securityContext"] == RUNNER_SECURITY
        assert containers(spec, "initContainers")["model-loader"]["securityContext"] == LOADER_SECURITY


def test_none_renders_pods_as_llmaz_did() -> None:
    spec = pod(single_host_service(), PodOptions(security="none"))
    assert "automountServiceAccountToken" not in spec
    assert "securityContext" not in spec
    assert "securityContext" not in containers(spec)["model-runner"]
    assert set(containers(spec, "initContainers")["model-loader"]) == {"name", "image", "env", "volumeMounts"}


@pytest.mark.parametrize("security", ["restricted", "none"])
def test_configured_loader_resources_go_to_every_loader_in_either_mode(security: str) -> None:
    resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    model = hub_model("m", "a/b")
    model.spec.adapters = [Adapter.from_dict({"name": "sql", "source": {"uri": "s3://loras/sql"}})]
    spec = pod(single_host_service(), PodOptions(security=security, loader_resources=resources), model)
    loaders = containers(spec, "initContainers")
    assert set(loaders) == {"model-loader", "model-loader-adapter-0"}
    assert [loader["resources"] for loader in loaders.values()] == [resources, resources]


def test_loaders_have_no_resources_unless_configured() -> None:
    assert "resources" not in containers(pod(single_host_service()), "initContainers")["model-loader"]


def test_a_configured_size_limit_bounds_the_model_volume() -> None:
    volumes = pod(single_host_service(), PodOptions(model_volume_size_limit="100Gi"))["volumes"]
    assert volumes == [{"name": "model-volume", "emptyDir": {"sizeLimit": "100Gi"}}]


def test_a_host_model_has_no_model_volume_to_bound() -> None:
    model = uri_model("m", "host:///models/m.gguf")
    volumes = pod(single_host_service(), PodOptions(model_volume_size_limit="100Gi"), model)["volumes"]
    assert volumes == [{"name": "model-volume", "hostPath": {"path": "/models/m.gguf"}}]
