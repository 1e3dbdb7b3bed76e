"""Playground -> inference Service CR and HPA, starting from the worked example of llmaz's integration fixtures
(vllm, llama3-8b on the a100/a10 flavors)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmaz.apis import BackendRuntime, OpenModel, ScaleTrigger
from llmaz.controllers.builders import (
    ArgRenderError,
    NoModelClaimedError,
    RecommendedConfigNotFoundError,
    build_hpa,
    build_service,
)
from llmaz.controllers.builders.models import detect_config_name, effective_config_name

from .factories import PLAYGROUND_UID, backend, hub_model, llama3_2b, llama3_8b, playground, uri_model, vllm_test_copy

VLLM_PROBE_PATH = {"path": "/health", "port": 8080}
SPECULATIVE_CLAIMS = {"models": [{"name": "llama3-8b", "role": "main"}, {"name": "llama3-2b", "role": "draft"}]}


def worked_example() -> dict[str, Any]:
    return build_service(playground(), [llama3_8b()], vllm_test_copy())


def runner_of(service: dict[str, Any]) -> dict[str, Any]:
    containers = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["model-runner"]
    runner: dict[str, Any] = containers[0]
    return runner


def test_worked_example_service_identity_and_owner() -> None:
    service = worked_example()
    assert service["apiVersion"] == "inference.llmaz.io/v1alpha1"
    assert service["kind"] == "Service"
    assert service["metadata"] == {
        "name": "playground-llama3-8b",
        "namespace": "X",
        "labels": {"app.kubernetes.io/managed-by": "llmaz"},
        "ownerReferences": [
            {
                "apiVersion": "inference.llmaz.io/v1alpha1",
                "kind": "Playground",
                "name": "playground-llama3-8b",
                "uid": PLAYGROUND_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def test_worked_example_service_spec_outside_the_pod() -> None:
    spec = worked_example()["spec"]
    assert spec["modelClaims"] == {"models": [{"name": "llama3-8b", "role": "main"}]}
    assert spec["replicas"] == 1
    assert spec["rolloutStrategy"] == {"type": "RollingUpdate"}
    assert set(spec["workloadTemplate"]) == {"workerTemplate"}
    assert set(spec["workloadTemplate"]["workerTemplate"]) == {"spec"}


def test_worked_example_pod_has_grace_period_and_shared_memory_first() -> None:
    pod = worked_example()["spec"]["workloadTemplate"]["workerTemplate"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 130
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}]
    assert "schedulerName" not in pod


def test_worked_example_runner_container() -> None:
    runner = runner_of(worked_example())
    assert runner["image"] == "vllm/vllm-openai:v0.6.0"
    assert runner["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert runner["args"] == [
        "--model",
        "/workspace/models/models--meta-llama--Meta-Llama-3-8B",
        "--served-model-name",
        "llama3-8b",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
    ]
    assert "env" not in runner
    assert runner["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    assert runner["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert runner["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert runner["startupProbe"] == {"httpGet": VLLM_PROBE_PATH, "periodSeconds": 10, "failureThreshold": 30}
    assert runner["livenessProbe"] == {
        "httpGet": VLLM_PROBE_PATH,
        "initialDelaySeconds": 15,
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    assert runner["readinessProbe"] == {
        "httpGet": VLLM_PROBE_PATH,
        "initialDelaySeconds": 5,
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    assert "lifecycle" not in runner


def test_backend_lifecycle_is_copied_verbatim() -> None:
    vllm = backend("vllm")
    runner = runner_of(build_service(playground(), [llama3_8b()], vllm))
    assert runner["lifecycle"] == vllm.spec.lifecycle
    assert runner["image"] == "vllm/vllm-openai:v0.30.0"


def test_inference_flavors_of_the_claim_are_copied() -> None:
    pg = playground({"modelClaim": {"modelName": "llama3-8b", "inferenceFlavors": ["a10"]}})
    claims = build_service(pg, [llama3_8b()], vllm_test_copy())["spec"]["modelClaims"]
    assert claims == {"models": [{"name": "llama3-8b", "role": "main"}], "inferenceFlavors": ["a10"]}


def test_speculative_decoding_selects_its_config_and_renders_the_draft_path() -> None:
    pg = playground({"modelClaims": SPECULATIVE_CLAIMS})
    service = build_service(pg, [llama3_8b(), llama3_2b()], vllm_test_copy())
    assert service["spec"]["modelClaims"] == SPECULATIVE_CLAIMS
    runner = runner_of(service)
    assert runner["args"][:5] == [
        "--model",
        "/workspace/models/models--meta-llama--Meta-Llama-3-8B",
        "--served-model-name",
        "llama3-8b",
        "--speculative-config",
    ]
    assert json.loads(runner["args"][5])["model"] == "/workspace/models/models--meta-llama--Meta-Llama-3-2B"
    assert runner["resources"]["limits"] == {"cpu": "8", "memory": "16Gi"}


def test_model_claims_without_role_are_written_as_main() -> None:
    pg = playground({"modelClaims": {"models": [{"name": "llama3-8b"}], "inferenceFlavors": ["a100"]}})
    claims = build_service(pg, [llama3_8b()], vllm_test_copy())["spec"]["modelClaims"]
    assert claims == {"models": [{"name": "llama3-8b", "role": "main"}], "inferenceFlavors": ["a100"]}


@pytest.mark.parametrize(
    ("spec", "detected", "effective"),
    [
        ({"modelClaim": {"modelName": "m"}}, "default", "default"),
        ({"modelClaim": {"modelName": "m"}, "backendRuntimeConfig": {"configName": "fast"}}, "default", "fast"),
        ({"modelClaims": SPECULATIVE_CLAIMS}, "speculative-decoding", "speculative-decoding"),
        (
            {"modelClaims": SPECULATIVE_CLAIMS, "backendRuntimeConfig": {"configName": "default"}},
            "speculative-decoding",
            "default",
        ),
        ({"modelClaims": {"models": [{"name": "a"}, {"name": "b", "role": "main"}]}}, "default", "default"),
    ],
    ids=["single model", "explicit name", "draft model", "explicit wins over draft", "no draft"],
)
def test_config_name_is_explicit_else_detected_from_the_claims(
    spec: dict[str, Any], detected: str, effective: str
) -> None:
    pg = playground(spec)
    assert detect_config_name(pg) == detected
    assert effective_config_name(pg) == effective


def test_explicit_config_name_selects_that_config() -> None:
    pg = playground({"modelClaims": SPECULATIVE_CLAIMS, "backendRuntimeConfig": {"configName": "default"}})
    runner = runner_of(build_service(pg, [llama3_8b(), llama3_2b()], vllm_test_copy()))
    assert "--speculative-config" not in runner["args"]
    assert runner["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}


def test_unknown_config_name_is_a_typed_error_naming_config_and_backend() -> None:
    pg = playground({"modelClaim": {"modelName": "m"}, "backendRuntimeConfig": {"configName": "turbo"}})
    with pytest.raises(RecommendedConfigNotFoundError) as caught:
        build_service(pg, [llama3_8b()], vllm_test_copy())
    assert caught.value.message == "Recommended config turbo not found in BackendRuntime vllm"
    assert caught.value.reason == "AbortProcessing"


def test_backend_without_the_detected_config_is_a_typed_error() -> None:
    pg = playground({"modelClaims": SPECULATIVE_CLAIMS, "backendRuntimeConfig": {"backendName": "tgi"}})
    with pytest.raises(RecommendedConfigNotFoundError, match="speculative-decoding not found in BackendRuntime tgi"):
        build_service(pg, [llama3_8b(), llama3_2b()], backend("tgi"))


def test_draft_model_path_without_a_draft_model_is_a_render_error() -> None:
    pg = playground(
        {"modelClaim": {"modelName": "llama3-8b"}, "backendRuntimeConfig": {"configName": "speculative-decoding"}}
    )
    with pytest.raises(ArgRenderError) as caught:
        build_service(pg, [llama3_8b()], vllm_test_copy())
    assert caught.value.message == (
        "missing flag or the flag has format error: "
        '{"model": "{{ .DraftModelPath }}", "num_speculative_tokens": 5, "method": "draft_model"}'
    )


def test_no_models_is_a_typed_error() -> None:
    with pytest.raises(NoModelClaimedError):
        build_service(playground(), [], vllm_test_copy())


def test_backend_runtime_config_overrides_version_args_envs_resources_and_shared_memory() -> None:
    vllm = vllm_test_copy()
    vllm.spec.envs = [{"name": "A", "value": "backend"}, {"name": "B", "value": "backend"}]
    pg = playground(
        {
            "modelClaim": {"modelName": "llama3-8b"},
            "backendRuntimeConfig": {
                "version": "v0.8.5",
                "args": ["--load-format", "runai_streamer", "--port", "9000"],
                "envs": [{"name": "C", "value": "pg"}, {"name": "A", "value": "pg"}],
                "resources": {"requests": {"cpu": 10}, "limits": {"nvidia.com/gpu": 1}},
                "sharedMemorySize": "4Gi",
            },
        }
    )
    service = build_service(pg, [llama3_8b()], vllm)
    runner = runner_of(service)
    assert runner["image"] == "vllm/vllm-openai:v0.8.5"
    assert runner["args"][-4:] == ["--load-format", "runai_streamer", "--port", "9000"]
    assert len(runner["args"]) == 12
    assert runner["env"] == [
        {"name": "A", "value": "pg"},
        {"name": "B", "value": "backend"},
        {"name": "C", "value": "pg"},
    ]
    assert runner["resources"] == {
        "requests": {"cpu": "10", "memory": "8Gi"},
        "limits": {"nvidia.com/gpu": "1", "cpu": "10", "memory": "8Gi"},
    }
    pod = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]
    assert pod["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}}


def test_backend_without_shared_memory_or_resources_gives_a_bare_container() -> None:
    pg = playground({"modelClaim": {"modelName": "q"}, "backendRuntimeConfig": {"backendName": "ollama"}})
    service = build_service(pg, [uri_model("q", "ollama://qwen2:0.5b")], backend("ollama"))
    pod = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]
    assert "volumes" not in pod
    runner = runner_of(service)
    assert "volumeMounts" not in runner
    assert runner["env"] == [{"name": "OLLAMA_HOST", "value": "0.0.0.0:8080"}]
    assert "ollama run qwen2:0.5b" in runner["args"][0]


def test_skip_model_loader_annotation_is_copied_and_paths_point_at_the_source() -> None:
    pg = playground(annotations={"llmaz.io/skip-model-loader": "true", "other": "x"})
    service = build_service(pg, [llama3_8b()], vllm_test_copy())
    assert service["metadata"]["annotations"] == {"llmaz.io/skip-model-loader": "true"}
    assert runner_of(service)["args"][1] == "meta-llama/Meta-Llama-3-8B"


def test_skip_model_loader_annotation_is_copied_even_when_it_does_not_skip() -> None:
    pg = playground(annotations={"llmaz.io/skip-model-loader": "false"})
    service = build_service(pg, [llama3_8b()], vllm_test_copy())
    assert service["metadata"]["annotations"] == {"llmaz.io/skip-model-loader": "false"}
    assert runner_of(service)["args"][1] == "/workspace/models/models--meta-llama--Meta-Llama-3-8B"


def test_replicas_are_copied_and_default_to_one() -> None:
    assert (
        build_service(playground({"replicas": 3, "modelClaim": {"modelName": "m"}}), [llama3_8b()], vllm_test_copy())[
            "spec"
        ]["replicas"]
        == 3
    )
    assert (
        build_service(playground({"modelClaim": {"modelName": "m"}}), [llama3_8b()], vllm_test_copy())["spec"][
            "replicas"
        ]
        == 1
    )


def test_a_playground_without_uid_cannot_own_its_service() -> None:
    pg = playground()
    pg.metadata.uid = None
    with pytest.raises(ValueError, match="uid"):
        build_service(pg, [llama3_8b()], vllm_test_copy())


CPU_50 = [
    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}
]
MEMORY_80 = [
    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 80}}}
]
BEHAVIOR = {"scaleDown": {"stabilizationWindowSeconds": 30}}


def scaled_backend() -> BackendRuntime:
    vllm = vllm_test_copy()
    configs = vllm.spec.recommended_configs or []
    configs[0].scale_trigger = ScaleTrigger.from_dict({"hpa": {"metrics": MEMORY_80}})
    configs[1].scale_trigger = ScaleTrigger.from_dict({"hpa": {"metrics": CPU_50, "behavior": BEHAVIOR}})
    return vllm


def elastic(**fields: Any) -> dict[str, Any]:
    return {"modelClaim": {"modelName": "llama3-8b"}, "elasticConfig": {"minReplicas": 1, "maxReplicas": 3, **fields}}


def test_hpa_from_the_playground_scale_trigger_targets_the_playground() -> None:
    pg = playground(elastic(scaleTrigger={"hpa": {"metrics": CPU_50, "behavior": BEHAVIOR}}))
    hpa = build_hpa(pg, scaled_backend())
    assert hpa == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "playground-llama3-8b",
            "namespace": "X",
            "labels": {"app.kubernetes.io/managed-by": "llmaz"},
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Playground",
                    "name": "playground-llama3-8b",
                    "uid": PLAYGROUND_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "inference.llmaz.io/v1alpha1",
                "kind": "Playground",
                "name": "playground-llama3-8b",
            },
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": CPU_50,
            "behavior": BEHAVIOR,
        },
    }


def test_hpa_falls_back_to_the_recommended_scale_trigger_of_the_detected_config() -> None:
    hpa = build_hpa(playground(elastic()), scaled_backend())
    assert hpa is not None
    assert hpa["spec"]["metrics"] == MEMORY_80
    assert "behavior" not in hpa["spec"]


def test_hpa_uses_the_explicit_config_name_not_the_detected_one() -> None:
    spec = elastic()
    spec["backendRuntimeConfig"] = {"configName": "speculative-decoding"}
    hpa = build_hpa(playground(spec), scaled_backend())
    assert hpa is not None
    assert hpa["spec"]["metrics"] == CPU_50
    assert hpa["spec"]["behavior"] == BEHAVIOR


@pytest.mark.parametrize(
    ("spec", "vllm"),
    [
        ({"modelClaim": {"modelName": "llama3-8b"}}, "scaled"),
        (elastic(), "plain"),
        (elastic(), "trigger without hpa"),
    ],
    ids=["no elasticConfig", "no scale trigger anywhere", "recommended trigger without hpa"],
)
def test_no_hpa_is_wanted_without_a_trigger(spec: dict[str, Any], vllm: str) -> None:
    runtime = scaled_backend() if vllm == "scaled" else vllm_test_copy()
    if vllm == "trigger without hpa":
        configs = runtime.spec.recommended_configs or []
        configs[0].scale_trigger = ScaleTrigger.from_dict({})
    assert build_hpa(playground(spec), runtime) is None


def test_no_hpa_for_the_autoscalers_trigger_even_with_a_recommended_one() -> None:
    # The recommended config of the detected name has an HPA trigger (scaled_backend): a `requests` trigger wins,
    # and no HPA would fight llmaz-gateway's autoscaler.
    pg = playground(elastic(scaleTrigger={"requests": {"targetPerReplica": 8}}))
    assert build_hpa(pg, scaled_backend()) is None


def test_hpa_min_replicas_default_to_one() -> None:
    pg = playground({"modelClaim": {"modelName": "m"}, "elasticConfig": {"maxReplicas": 5}})
    hpa = build_hpa(pg, scaled_backend())
    assert hpa is not None
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 5)


def test_llamacpp_single_file_model_renders_its_file_path() -> None:
    model: OpenModel = hub_model(
        "qwen2-0--5b", "Qwen/Qwen2-0.5B-Instruct-GGUF", filename="qwen2-0_5b-instruct-q5_k_m.gguf"
    )
    pg = playground(
        {
            "modelClaim": {"modelName": "qwen2-0--5b"},
            "backendRuntimeConfig": {"backendName": "llamacpp", "args": ["-fa"]},
        }
    )
    runner = runner_of(build_service(pg, [model], backend("llamacpp")))
    assert runner["args"][:2] == ["-m", "/workspace/models/qwen2-0_5b-instruct-q5_k_m.gguf"]
    assert runner["args"][-1] == "-fa"
