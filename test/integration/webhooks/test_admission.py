"""The webhooks on a real API server: bad objects are denied with llmaz's texts, good ones are stored with the
webhook defaults, warnings reach kubectl."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from llmaz.runtime.client import Client
from llmaz_dev.envtest._cluster import Cluster

from .conftest import OPENMODELS, PLAYGROUNDS, kubectl, openmodel

pytestmark = pytest.mark.usefixtures("admission")

RUNNER_TEMPLATE = {"workerTemplate": {"spec": {"containers": [{"name": "model-runner", "image": "vllm"}]}}}


def manifest(kind: str, name: str, spec: Mapping[str, object], namespace: str | None = None) -> str:
    group = "llmaz.io" if kind == "OpenModel" else "inference.llmaz.io"
    meta: dict[str, object] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return yaml.safe_dump({"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": meta, "spec": spec})


DENIALS = [
    (
        "OpenModel",
        "no-source",
        {"familyName": "f", "source": {}},
        'admission webhook "vopenmodel.kb.io" denied the request: spec.source: Forbidden: Source can\'t be all null',
    ),
    (
        "OpenModel",
        "qwen-2-0.5b",
        {"familyName": "f", "source": {"uri": "ftp://x"}},
        'admission webhook "vopenmodel.kb.io" denied the request: [spec.source.uri: Invalid value: "ftp://x": '
        'URI with unsupported protocol, metadata.name: Invalid value: "qwen-2-0.5b": a lowercase RFC 1123 label',
    ),
    (
        "OpenModel",
        "adapters",
        {
            "familyName": "f",
            "source": {"uri": "s3://models/qwen.gguf"},
            "adapters": [
                {"name": "sql", "source": {"uri": "s3://loras/sql.gguf"}},
                {"name": "sql", "source": {"uri": "ollama://qwen2:0.5b"}, "scale": 5},
            ],
        },
        'admission webhook "vopenmodel.kb.io" denied the request: [spec.adapters[1].name: Invalid value: "sql": '
        "adapter names must be unique within the model: another adapter has this name, "
        'spec.adapters[1].source.uri: Invalid value: "ollama://qwen2:0.5b": an adapter cannot come from ollama://: '
        "ollama pulls whole models by tag, not adapter weights; use a model hub, an object store (oss://, s3://, "
        "gcs://) or host://, spec.adapters[1].scale: Invalid value: 5.0: must be a number greater than 0 and at most "
        "4 (how strongly the adapter applies; 1 is as trained)]",
    ),
    (
        "OpenModel",
        "long-family",
        {"familyName": "f" * 64, "source": {"uri": "s3://models/qwen.gguf"}},
        'admission webhook "vopenmodel.kb.io" denied the request: spec.familyName: Invalid value: '
        f'"{"f" * 64}": must be no more than 63 characters',
    ),
    (
        "BackendRuntime",
        "dup",
        {"image": "i", "version": "v", "recommendedConfigs": [{"name": "default"}, {"name": "default"}]},
        'admission webhook "vbackendruntime.kb.io" denied the request: '
        "spec.args.name: Forbidden: duplicated name default",
    ),
    (
        "Playground",
        "nothing",
        {},
        'admission webhook "vplayground.kb.io" denied the request: '
        "spec: Forbidden: modelClaim and modelClaims couldn't be both nil",
    ),
    (
        "Playground",
        "limits",
        {
            "modelClaim": {"modelName": "qwen2-0-5b"},
            "backendRuntimeConfig": {"resources": {"limits": {"cpu": 5}, "requests": {"cpu": 10}}},
        },
        'admission webhook "vplayground.kb.io" denied the request: spec.backendRuntimeConfig.resources: Forbidden: '
        "limit (5) for cpu must be greater than or equal to request (10)",
    ),
    (
        "Playground",
        "two-scalers",
        {
            "modelClaim": {"modelName": "qwen2-0-5b"},
            "elasticConfig": {
                "maxReplicas": 3,
                "scaleTrigger": {"hpa": {}, "requests": {"targetPerReplica": 4}},
            },
        },
        'admission webhook "vplayground.kb.io" denied the request: spec.elasticConfig.scaleTrigger: Forbidden: '
        "hpa and requests cannot be set together: an HPA and the autoscaler on the same Playground would both set "
        "its replicas, each undoing the other; keep one",
    ),
    (
        "Playground",
        "autoscaler-windows",
        {
            "modelClaim": {"modelName": "qwen2-0-5b"},
            "elasticConfig": {
                "maxReplicas": 3,
                "scaleTrigger": {"requests": {"targetPerReplica": 0, "stableWindow": "30s", "panicWindow": "1m"}},
            },
        },
        'admission webhook "vplayground.kb.io" denied the request: '
        "[spec.elasticConfig.scaleTrigger.requests.targetPerReplica: Invalid value: 0.0: must be a number greater "
        "than 0 (requests running plus waiting per replica), "
        'spec.elasticConfig.scaleTrigger.requests.panicWindow: Invalid value: "1m": must be shorter than stableWindow]',
    ),
    (
        "Playground",
        "p" * 61,
        {"modelClaim": {"modelName": "qwen2-0-5b"}},
        'admission webhook "vplayground.kb.io" denied the request: metadata.name: Invalid value: '
        f'"{"p" * 61}": must be no more than 52 characters, so that every name made from it fits in 63',
    ),
    (
        "Service",
        "no-runner",
        {
            "modelClaims": {"models": [{"name": "m"}]},
            "workloadTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "x", "image": "i"}]}}},
        },
        'admission webhook "vservice.kb.io" denied the request: spec.workloadTemplate.workerTemplate.spec.containers: '
        "Forbidden: model-runner container doesn't exist",
    ),
    (
        "Service",
        "no-models",
        {"workloadTemplate": RUNNER_TEMPLATE},
        'admission webhook "vservice.kb.io" denied the request: spec.modelClaims.models: Required value: '
        "at least one model is required",
    ),
]


@pytest.mark.parametrize(("kind", "name", "spec", "message"), DENIALS, ids=[f"{d[0]}-{d[1]}" for d in DENIALS])
async def test_a_bad_object_is_denied_by_the_named_webhook(
    control_plane: Cluster, namespace: str, kind: str, name: str, spec: dict[str, object], message: str
) -> None:
    ns = None if kind in ("OpenModel", "BackendRuntime") else namespace
    result = await kubectl(control_plane, "create", "-f", "-", input=manifest(kind, name, spec, ns))
    assert result.returncode != 0
    assert message in result.stderr


async def test_an_openmodel_with_adapters_is_stored_as_written(client: Client) -> None:
    adapters = [{"name": "sql", "source": {"uri": "s3://loras/sql.gguf"}, "scale": 0.5}]
    model = openmodel("qwen2-0-5b-adapters")
    model["spec"]["adapters"] = adapters

    created = await client.create(OPENMODELS, model)

    assert created["spec"]["adapters"] == adapters


async def test_an_openmodel_is_stored_with_the_family_label_and_created_at(client: Client) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    created = await client.create(OPENMODELS, openmodel("qwen2-0-5b-stored"))
    try:
        assert created["metadata"]["labels"]["llmaz.io/model-family-name"] == "qwen2"
        stamp = datetime.strptime(created["spec"]["createdAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert before - timedelta(seconds=1) <= stamp <= datetime.now(UTC)
        created["metadata"]["labels"]["llmaz.io/model-family-name"] = "changed"
        updated = await client.update(OPENMODELS, created)
        assert updated["metadata"]["labels"]["llmaz.io/model-family-name"] == "qwen2"  # overwritten on update
        assert updated["spec"]["createdAt"] == created["spec"]["createdAt"]  # kept
    finally:
        await client.delete(OPENMODELS, "qwen2-0-5b-stored")


async def test_a_playground_is_stored_with_the_model_name_label(client: Client, namespace: str) -> None:
    body = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "qwen", "namespace": namespace, "labels": {"llmaz.io/model-name": "wrong", "app": "a"}},
        "spec": {"modelClaim": {"modelName": "qwen2-0-5b"}},
    }
    created = await client.create(PLAYGROUNDS, body)
    assert created["metadata"]["labels"] == {"llmaz.io/model-name": "qwen2-0-5b", "app": "a"}


async def test_missing_references_are_admitted_with_warnings_kubectl_prints(
    control_plane: Cluster, namespace: str
) -> None:
    spec = {"modelClaim": {"modelName": "nope"}, "backendRuntimeConfig": {"backendName": "vllm", "configName": "fast"}}
    result = await kubectl(control_plane, "create", "-f", "-", input=manifest("Playground", "warned", spec, namespace))
    assert result.returncode == 0, result.stderr
    assert re.search(r"Warning: OpenModel 'nope' not found", result.stderr)
    assert "Warning: BackendRuntime 'vllm' has no recommended config 'fast'" in result.stderr


async def test_a_scale_to_zero_after_that_is_no_duration_is_denied_on_create_and_when_changed(
    control_plane: Cluster, client: Client, namespace: str
) -> None:
    bad = yaml.safe_load(manifest("Playground", "sleepy", {"modelClaim": {"modelName": "m"}}, namespace))
    bad["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "5 minutes"}
    denied = await kubectl(control_plane, "create", "-f", "-", input=yaml.safe_dump(bad))
    assert denied.returncode != 0
    assert (
        'admission webhook "vplayground.kb.io" denied the request: metadata.annotations[llmaz.io/scale-to-zero-after]: '
        'Invalid value: "5 minutes": must be a duration of at least 10s: seconds or h/m/s units, e.g. 300, 90s, 5m, '
        "1h30m"
    ) in denied.stderr

    bad["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "5m"}
    created = await client.create(PLAYGROUNDS, bad)
    assert created["metadata"]["annotations"]["llmaz.io/scale-to-zero-after"] == "5m"
    changed = await kubectl(
        control_plane, "annotate", "--overwrite", "-n", namespace, "playground", "sleepy",
        "llmaz.io/scale-to-zero-after=9s",
    )  # fmt: skip
    assert changed.returncode != 0
    assert 'Invalid value: "9s": must be a duration of at least 10s' in changed.stderr


async def test_a_bad_routing_strategy_or_weights_is_denied_on_create_and_when_changed(
    control_plane: Cluster, client: Client, namespace: str
) -> None:
    routed = yaml.safe_load(manifest("Playground", "routed", {"modelClaim": {"modelName": "m"}}, namespace))
    routed["metadata"]["annotations"] = {"llmaz.io/routing-strategy": "round-robin"}
    denied = await kubectl(control_plane, "create", "-f", "-", input=yaml.safe_dump(routed))
    assert denied.returncode != 0
    assert (
        'admission webhook "vplayground.kb.io" denied the request: metadata.annotations[llmaz.io/routing-strategy]: '
        'Invalid value: "round-robin": must be one of: least-outstanding, prefix-aware'
    ) in denied.stderr

    routed["metadata"]["annotations"] = {
        "llmaz.io/routing-strategy": "prefix-aware",
        "llmaz.io/routing-weights": "prefix=3,queue=2,utilisation=2",
    }
    created = await client.create(PLAYGROUNDS, routed)
    assert created["metadata"]["annotations"]["llmaz.io/routing-strategy"] == "prefix-aware"
    changed = await kubectl(
        control_plane, "annotate", "--overwrite", "-n", namespace, "playground", "routed",
        "llmaz.io/routing-weights=prefix=high",
    )  # fmt: skip
    assert changed.returncode != 0
    assert (
        'metadata.annotations[llmaz.io/routing-weights]: Invalid value: "prefix=high": must be NAME=WEIGHT pairs '
        "separated by commas, NAME one of prefix, queue, utilisation, WEIGHT a number from 0 to 100, "
        "e.g. prefix=3,queue=2,utilisation=2"
    ) in changed.stderr


async def test_a_playground_for_the_autoscaler_is_stored_with_the_trigger_defaults(
    client: Client, namespace: str
) -> None:
    body = yaml.safe_load(manifest("Playground", "autoscaled", {"modelClaim": {"modelName": "m"}}, namespace))
    body["spec"]["elasticConfig"] = {"maxReplicas": 4, "scaleTrigger": {"requests": {"targetPerReplica": 8}}}
    created = await client.create(PLAYGROUNDS, body)
    elastic = created["spec"]["elasticConfig"]
    assert elastic["minReplicas"] == 1
    assert elastic["scaleTrigger"]["requests"] == {
        "targetPerReplica": 8,
        "stableWindow": "60s",
        "panicWindow": "6s",
        "panicThreshold": 2.0,
        "scaleDownDelay": "5m",
    }
