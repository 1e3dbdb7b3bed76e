"""Service -> LeaderWorkerSet and `<name>-lb`, starting from the worked example of llmaz's integration fixtures
(vllm, llama3-8b on the a100/a10 flavors)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmaz.apis import OpenModel, Service
from llmaz.controllers.builders import (
    InvalidModelSourceError,
    NoModelClaimedError,
    build_lb_service,
    build_leader_worker_set,
    build_service,
    with_scheduler_name,
)

from .factories import (
    HF_TOKENS,
    LOADER_IMAGE,
    LOADER_MOUNT,
    LOADER_SECURITY,
    MODEL_VOLUME,
    READ_ONLY_MODEL_MOUNT,
    SERVICE_UID,
    env,
    hub_model,
    llama3_2b,
    llama3_8b,
    only_runner,
    playground,
    runner,
    single_host_service,
    uri_model,
    vllm_test_copy,
    worker,
)


def as_stored(service_cr: dict[str, Any], scheduler_name: str = "inftyai-scheduler") -> Service:
    """The Service CR as the Service reconciler reads it: CRD defaults, a uid, and the scheduler name set."""
    stored = copy.deepcopy(service_cr)
    stored["metadata"]["uid"] = SERVICE_UID
    stored["spec"]["workloadTemplate"].update(size=1, restartPolicy="RecreateGroupOnPodRestart")
    stored["spec"]["workloadTemplate"] = with_scheduler_name(stored["spec"]["workloadTemplate"], scheduler_name)
    return Service.from_dict(stored)


def worked_example(claim: dict[str, Any] | None = None, models: list[OpenModel] | None = None) -> Service:
    pg = playground({"modelClaim": claim or {"modelName": "llama3-8b"}})
    return as_stored(build_service(pg, models or [llama3_8b()], vllm_test_copy()))


def test_worked_example_lws_identity_and_spec() -> None:
    lws = build_leader_worker_set(worked_example(), [llama3_8b()], LOADER_IMAGE)
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["kind"] == "LeaderWorkerSet"
    assert lws["metadata"] == {
        "name": "playground-llama3-8b",
        "namespace": "X",
        "labels": {"app.kubernetes.io/managed-by": "llmaz"},
        "ownerReferences": [
            {
                "apiVersion": "inference.llmaz.io/v1alpha1",
                "kind": "Service",
                "name": "playground-llama3-8b",
                "uid": SERVICE_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = lws["spec"]
    assert spec["replicas"] == 1
    assert spec["startupPolicy"] == "LeaderReady"
    assert spec["rolloutStrategy"] == {"type": "RollingUpdate"}
    assert spec["leaderWorkerTemplate"]["size"] == 1
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert "leaderTemplate" not in spec["leaderWorkerTemplate"]


def test_worked_example_worker_labels_without_flavor_annotation() -> None:
    metadata = worker(build_leader_worker_set(worked_example(), [llama3_8b()], LOADER_IMAGE))["metadata"]
    assert metadata == {"labels": {"llmaz.io/model-name": "llama3-8b", "llmaz.io/model-family-name": "llama3"}}


def test_worked_example_worker_pod_gets_loader_volume_and_flavor() -> None:
    pod = worker(build_leader_worker_set(worked_example(), [llama3_8b()], LOADER_IMAGE))["spec"]
    assert pod["schedulerName"] == "inftyai-scheduler"
    assert pod["terminationGracePeriodSeconds"] == 130
    assert pod["initContainers"] == [
        {
            "name": "model-loader",
            "image": "inftyai/model-loader:v0.0.10",
            "env": [
                env("MODEL_SOURCE_TYPE", "modelhub"),
                env("MODEL_ID", "meta-llama/Meta-Llama-3-8B"),
                env("MODEL_HUB_NAME", "Huggingface"),
                env("REVISION", "main"),
                *HF_TOKENS,
            ],
            "volumeMounts": LOADER_MOUNT,
            "securityContext": LOADER_SECURITY,
        }
    ]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
        MODEL_VOLUME,
    ]
    runner_container = only_runner({"spec": pod})
    assert runner_container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}, READ_ONLY_MODEL_MOUNT]
    assert runner_container["resources"] == {
        "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
    }
    assert runner_container["image"] == "vllm/vllm-openai:v0.6.0"
    assert runner_container["args"][1] == "/workspace/models/models--meta-llama--Meta-Llama-3-8B"


def test_worked_example_with_claimed_flavor_a10() -> None:
    service = worked_example({"modelName": "llama3-8b", "inferenceFlavors": ["a10"]})
    template = worker(build_leader_worker_set(service, [llama3_8b()], LOADER_IMAGE))
    assert template["metadata"]["annotations"] == {"llmaz.io/inference-service-flavors": "a10"}
    resources = only_runner(template)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "2"
    assert resources["limits"]["nvidia.com/gpu"] == "2"


def test_worked_example_speculative_decoding_loads_both_models_main_first() -> None:
    claims = {"models": [{"name": "llama3-8b", "role": "main"}, {"name": "llama3-2b", "role": "draft"}]}
    pg = playground({"modelClaims": claims})
    service = as_stored(build_service(pg, [llama3_8b(), llama3_2b()], vllm_test_copy()))
    template = worker(build_leader_worker_set(service, [llama3_8b(), llama3_2b()], LOADER_IMAGE))
    loaders = template["spec"]["initContainers"]
    assert [loader["name"] for loader in loaders] == ["model-loader", "model-loader-1"]
    assert loaders[1]["env"][1] == env("MODEL_ID", "meta-llama/Meta-Llama-3-2B")
    assert template["metadata"]["labels"]["llmaz.io/model-name"] == "llama3-8b"
    assert only_runner(template)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert template["spec"]["volumes"].count(MODEL_VOLUME) == 1


def test_worked_example_lb_service() -> None:
    lb = build_lb_service(worked_example(), [llama3_8b()])
    assert lb == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "playground-llama3-8b-lb",
            "namespace": "X",
            "labels": {"app.kubernetes.io/managed-by": "llmaz"},
            "annotations": {"activator.llmaz.io/model-name": "llama3-8b"},
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Service",
                    "name": "playground-llama3-8b",
                    "uid": SERVICE_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080, "targetPort": 8080}],
            "selector": {
                "leaderworkerset.sigs.k8s.io/name": "playground-llama3-8b",
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
        },
    }


def resources(requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    return {"requests": requests, "limits": limits}


FLAVORS = [
    {"name": "a100", "limits": {"nvidia.com/gpu": 8, "cpu": 16}},
    {"name": "a10", "limits": {"nvidia.com/gpu": 2}},
]


@pytest.mark.parametrize(
    ("flavors", "claimed", "expected"),
    [
        (
            FLAVORS,
            None,
            {"requests": {"cpu": "16", "nvidia.com/gpu": "8"}, "limits": {"cpu": "16", "nvidia.com/gpu": "8"}},
        ),
        (
            FLAVORS,
            ["a10", "a100"],
            {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}, "limits": {"cpu": "2", "nvidia.com/gpu": "2"}},
        ),
        (FLAVORS, ["h100"], {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "4"}}),
        (None, ["a10"], {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "4"}}),
    ],
    ids=["first model flavor", "first claimed flavor", "claimed flavor the model lacks", "model without flavors"],
)
def test_flavor_limits_overwrite_runner_requests_and_limits(
    flavors: Any, claimed: list[str] | None, expected: dict[str, Any]
) -> None:
    container = runner(resources={"requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "4"}})
    svc = single_host_service(container=container, claims={"inferenceFlavors": claimed} if claimed else {})
    model = hub_model("m", "a/b", flavors=flavors)
    template = worker(build_leader_worker_set(svc, [model], LOADER_IMAGE))
    assert only_runner(template)["resources"] == expected
    annotations = template["metadata"].get("annotations")
    assert annotations == ({"llmaz.io/inference-service-flavors": ",".join(claimed)} if claimed else None)


def test_flavor_creates_resources_on_a_runner_without_any() -> None:
    model = hub_model("m", "a/b", flavors=[{"name": "t4", "limits": {"nvidia.com/gpu": 1}}])
    template = worker(build_leader_worker_set(single_host_service(), [model], LOADER_IMAGE))
    assert only_runner(template)["resources"] == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }


def test_labels_overwrite_llmaz_keys_and_keep_the_users() -> None:
    svc = single_host_service()
    svc.spec.workload_template["workerTemplate"]["metadata"] = {
        "labels": {"app": "mine", "llmaz.io/model-name": "stale"},
        "annotations": {"note": "x"},
    }
    template = worker(build_leader_worker_set(svc, [hub_model("m", "a/b")], LOADER_IMAGE))
    assert template["metadata"] == {
        "labels": {"app": "mine", "llmaz.io/model-name": "m", "llmaz.io/model-family-name": "llama3"},
        "annotations": {"note": "x"},
    }


def multi_host_service() -> Service:
    def template(*extra: str) -> dict[str, Any]:
        return {
            "spec": {
                "containers": [runner(env=[env("ROLE", extra[0])])],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            }
        }

    return single_host_service(
        claims={"inferenceFlavors": ["a10"]},
        replicas=2,
        workloadTemplate={
            "size": 2,
            "restartPolicy": "None",
            "subGroupPolicy": {"subGroupPolicyType": "LeaderExcluded", "subGroupSize": 1},
            "leaderTemplate": template("leader"),
            "workerTemplate": template("worker"),
        },
        rolloutStrategy={"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 2, "maxSurge": 1}},
    )


def test_multi_host_injects_loaders_labels_and_flavor_into_both_templates() -> None:
    model = hub_model("llama3-405b", "meta-llama/Llama-3.1-405B", flavors=FLAVORS)
    lws = build_leader_worker_set(multi_host_service(), [model], LOADER_IMAGE)
    template_spec = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leader", "worker"):
        template = template_spec[f"{role}Template"]
        loader = template["spec"]["initContainers"][0]
        assert loader["env"][0] == env("ROLE", role)
        assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm", "model-volume"]
        assert template["metadata"]["labels"] == {
            "llmaz.io/model-name": "llama3-405b",
            "llmaz.io/model-family-name": "llama3",
        }
        assert template["metadata"]["annotations"] == {"llmaz.io/inference-service-flavors": "a10"}
        assert only_runner(template)["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_multi_host_carries_size_replicas_restart_and_subgroup_policies_and_rollout() -> None:
    lws = build_leader_worker_set(multi_host_service(), [hub_model("m", "a/b")], LOADER_IMAGE)
    spec = lws["spec"]
    # Workers start with the leader: a leader whose engine waits for its workers would never be Ready first.
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["replicas"] == 2
    assert spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "None"
    assert spec["leaderWorkerTemplate"]["subGroupPolicy"] == {"subGroupPolicyType": "LeaderExcluded", "subGroupSize": 1}
    assert spec["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 2},
    }


def test_missing_crd_defaults_are_filled_defensively() -> None:
    svc = Service.from_dict(
        {
            "metadata": {"name": "s", "namespace": "X", "uid": SERVICE_UID},
            "spec": {
                "modelClaims": {"models": [{"name": "m"}]},
                "workloadTemplate": {"workerTemplate": {"spec": {"containers": [runner()]}}},
                "rolloutStrategy": {"rollingUpdateConfiguration": {}},
            },
        }
    )
    spec = build_leader_worker_set(svc, [hub_model("m", "a/b")], LOADER_IMAGE)["spec"]
    assert spec["replicas"] == 1
    assert spec["leaderWorkerTemplate"]["size"] == 1
    assert "restartPolicy" not in spec["leaderWorkerTemplate"]
    assert spec["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_building_does_not_mutate_the_service() -> None:
    svc = multi_host_service()
    before = svc.to_dict()
    build_leader_worker_set(svc, [hub_model("m", "a/b", flavors=FLAVORS)], LOADER_IMAGE)
    assert svc.to_dict() == before


def test_no_models_is_a_typed_error() -> None:
    with pytest.raises(NoModelClaimedError):
        build_leader_worker_set(single_host_service(), [], LOADER_IMAGE)


def test_an_unsupported_protocol_is_a_typed_error_naming_the_model() -> None:
    with pytest.raises(InvalidModelSourceError, match="OpenModel bad has an invalid source: unsupported protocol FTP"):
        build_leader_worker_set(single_host_service(), [uri_model("bad", "ftp://x/y")], LOADER_IMAGE)


def test_lb_service_is_annotated_with_the_main_model_name_not_the_ollama_tag() -> None:
    lb = build_lb_service(
        single_host_service(name="q") if False else single_host_service(), [uri_model("q", "ollama://qwen2:0.5b")]
    )
    assert lb["metadata"]["name"] == "svc-lb"
    assert lb["metadata"]["annotations"] == {"activator.llmaz.io/model-name": "q"}


@pytest.mark.parametrize(
    ("workload", "scheduler", "expected_leader", "expected_worker"),
    [
        ({"workerTemplate": {"spec": {}}}, "inftyai-scheduler", None, "inftyai-scheduler"),
        ({"workerTemplate": {"spec": {"schedulerName": "mine"}}}, "inftyai-scheduler", None, "mine"),
        ({"leaderTemplate": {}, "workerTemplate": {"spec": {}}}, "s", "s", "s"),
        ({"workerTemplate": {"spec": {}}}, "", None, None),
    ],
    ids=["worker only", "user scheduler kept", "leader and worker", "no scheduler configured"],
)
def test_scheduler_name_fills_only_empty_templates(
    workload: dict[str, Any], scheduler: str, expected_leader: str | None, expected_worker: str | None
) -> None:
    original = copy.deepcopy(workload)
    result = with_scheduler_name(workload, scheduler)
    leader = result.get("leaderTemplate")
    assert (leader["spec"].get("schedulerName") if leader is not None else None) == expected_leader
    assert result["workerTemplate"]["spec"].get("schedulerName") == expected_worker
    assert workload == original
