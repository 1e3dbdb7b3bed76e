"""The eight webhooks: names, paths and kinds are llmaz's; handlers patch, deny, warn and refuse as specified."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from llmaz.runtime.webhook import AdmissionRequest, GroupVersionKind, Webhook, WebhookType
from llmaz.runtime.webhook.jsonpatch import apply
from llmaz.webhooks import StaticLookup, webhooks

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
HOOKS = {w.name: w for w in webhooks(StaticLookup(backends={"vllm": ["default"]}, models={"m"}), now=lambda: NOW)}

EXPECTED = [
    (
        "mbackendruntime.kb.io",
        WebhookType.MUTATING,
        "/mutate-inference-llmaz-io-v1alpha1-backendruntime",
        "inference.llmaz.io",
        "backendruntimes",
    ),
    ("mopenmodel.kb.io", WebhookType.MUTATING, "/mutate-llmaz-io-v1alpha1-openmodel", "llmaz.io", "openmodels"),
    (
        "mplayground.kb.io",
        WebhookType.MUTATING,
        "/mutate-inference-llmaz-io-v1alpha1-playground",
        "inference.llmaz.io",
        "playgrounds",
    ),
    (
        "mservice.kb.io",
        WebhookType.MUTATING,
        "/mutate-inference-llmaz-io-v1alpha1-service",
        "inference.llmaz.io",
        "services",
    ),
    (
        "vbackendruntime.kb.io",
        WebhookType.VALIDATING,
        "/validate-inference-llmaz-io-v1alpha1-backendruntime",
        "inference.llmaz.io",
        "backendruntimes",
    ),
    ("vopenmodel.kb.io", WebhookType.VALIDATING, "/validate-llmaz-io-v1alpha1-openmodel", "llmaz.io", "openmodels"),
    (
        "vplayground.kb.io",
        WebhookType.VALIDATING,
        "/validate-inference-llmaz-io-v1alpha1-playground",
        "inference.llmaz.io",
        "playgrounds",
    ),
    (
        "vservice.kb.io",
        WebhookType.VALIDATING,
        "/validate-inference-llmaz-io-v1alpha1-service",
        "inference.llmaz.io",
        "services",
    ),
]


def test_the_eight_webhooks_have_llmaz_names_paths_and_rules() -> None:
    found = [(w.name, w.type, w.path, w.rules[0].api_groups[0], w.rules[0].resources[0]) for w in webhooks()]
    assert found == EXPECTED
    for hook in webhooks():
        assert [(r.api_versions, r.operations) for r in hook.rules] == [(("v1alpha1",), ("CREATE", "UPDATE"))]
        assert (hook.failure_policy, hook.side_effects) == ("Fail", "None")


def request(kind: str, obj: dict[str, Any] | None, operation: str = "CREATE", group: str = "") -> AdmissionRequest:
    group = group or ("llmaz.io" if kind == "OpenModel" else "inference.llmaz.io")
    name = (obj or {}).get("metadata", {}).get("name", "")
    return AdmissionRequest("uid", GroupVersionKind(group, "v1alpha1", kind), operation, name, object=obj)


async def call(hook: str, req: AdmissionRequest) -> Any:
    webhook: Webhook = HOOKS[hook]
    return await webhook.handler(req)


OPENMODEL = {"apiVersion": "llmaz.io/v1alpha1", "kind": "OpenModel", "metadata": {"name": "m"},
             "spec": {"familyName": "qwen2", "source": {"modelHub": {"modelID": "Qwen/Qwen2"}}}}  # fmt: skip
PLAYGROUND = {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground",
              "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
              "spec": {"modelClaim": {"modelName": "m"}}}  # fmt: skip


async def test_the_openmodel_patch_adds_the_label_and_created_at() -> None:
    response = await call("mopenmodel.kb.io", request("OpenModel", OPENMODEL))
    assert response.allowed
    out = apply(OPENMODEL, response.patch)
    assert out["metadata"]["labels"] == {"llmaz.io/model-family-name": "qwen2"}
    assert out["spec"]["createdAt"] == "2025-01-02T03:04:05Z"


async def test_the_playground_patch_adds_the_model_name_label_only() -> None:
    response = await call("mplayground.kb.io", request("Playground", PLAYGROUND))
    assert response.patch == [{"op": "add", "path": "/metadata/labels/llmaz.io~1model-name", "value": "m"}]


@pytest.mark.parametrize("hook", ["mbackendruntime.kb.io", "mservice.kb.io"])
async def test_kinds_without_defaults_are_allowed_unpatched(hook: str) -> None:
    kind = "BackendRuntime" if "backend" in hook else "Service"
    response = await call(hook, request(kind, {"metadata": {"name": "x"}, "spec": {}}))
    assert (response.allowed, response.patch) == (True, [])


async def test_a_valid_object_is_allowed_with_no_warnings() -> None:
    response = await call("vplayground.kb.io", request("Playground", PLAYGROUND))
    assert (response.allowed, response.warnings) == (True, ())


async def test_an_invalid_object_is_denied_with_the_aggregate_and_keeps_its_warnings() -> None:
    bad = {
        **PLAYGROUND,
        "metadata": {"name": "P"},
        "spec": {"modelClaim": {"modelName": "nope"}, "modelClaims": {"models": [{"name": "m"}]}},
    }
    response = await call("vplayground.kb.io", request("Playground", bad))
    assert (response.allowed, response.code, response.reason) == (False, 403, "Forbidden")
    assert response.message.startswith(
        "[spec: Forbidden: modelClaim and modelClaims couldn't be both not nil, metadata.name: "
    )
    assert response.warnings == ("OpenModel 'nope' not found; the workload waits until it exists",)


async def test_an_update_skips_create_only_rules() -> None:
    renamed = {**OPENMODEL, "metadata": {"name": "Bad.Name"}}
    assert not (await call("vopenmodel.kb.io", request("OpenModel", renamed))).allowed
    assert (await call("vopenmodel.kb.io", request("OpenModel", renamed, "UPDATE"))).allowed


async def test_a_request_for_another_kind_is_a_400_denial() -> None:
    response = await call("vopenmodel.kb.io", request("Playground", PLAYGROUND))
    assert (response.allowed, response.code) == (False, 400)
    assert "unexpected kind" in response.message


async def test_an_object_that_does_not_decode_is_a_400_denial() -> None:
    response = await call("vopenmodel.kb.io", request("OpenModel", {"metadata": {"name": "m"}, "spec": {"source": 3}}))
    assert (response.allowed, response.code) == (False, 400)
    assert response.message.startswith("couldn't decode OpenModel: spec.familyName: Field required")


async def test_a_missing_object_is_a_400_denial() -> None:
    response = await call("mopenmodel.kb.io", request("OpenModel", None))
    assert (response.allowed, response.code) == (False, 400)


async def test_delete_is_always_allowed() -> None:
    assert (await call("vservice.kb.io", request("Service", None, "DELETE"))).allowed


def stored(created_at: str | None) -> dict[str, Any]:
    spec = {**OPENMODEL["spec"], **({"createdAt": created_at} if created_at else {})}  # type: ignore[dict-item]
    return {**OPENMODEL, "spec": spec}


async def test_an_update_that_omits_created_at_keeps_the_stored_one() -> None:
    req = AdmissionRequest(
        "uid", GroupVersionKind("llmaz.io", "v1alpha1", "OpenModel"), "UPDATE", "m",
        object=OPENMODEL, old_object=stored("2024-06-01T00:00:00Z"),
    )  # fmt: skip
    response = await call("mopenmodel.kb.io", req)
    assert apply(OPENMODEL, response.patch)["spec"]["createdAt"] == "2024-06-01T00:00:00Z"


@pytest.mark.parametrize(("operation", "old"), [("CREATE", None), ("UPDATE", None), ("UPDATE", stored(None))])
async def test_created_at_is_now_when_nothing_was_stored(operation: str, old: dict[str, Any] | None) -> None:
    req = AdmissionRequest(
        "uid", GroupVersionKind("llmaz.io", "v1alpha1", "OpenModel"), operation, "m", object=OPENMODEL, old_object=old
    )
    response = await call("mopenmodel.kb.io", req)
    assert apply(OPENMODEL, response.patch)["spec"]["createdAt"] == "2025-01-02T03:04:05Z"


def annotated(after: str) -> dict[str, Any]:
    found: dict[str, Any] = copy.deepcopy(PLAYGROUND)
    found["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": after}
    return found


@pytest.mark.parametrize("after", ["5 minutes", "soon", "9s", "-5m", ""])
async def test_a_bad_scale_to_zero_after_is_denied_naming_the_annotation_and_the_accepted_forms(after: str) -> None:
    response = await call("vplayground.kb.io", request("Playground", annotated(after)))
    assert (response.allowed, response.code) == (False, 403)
    assert response.message == (
        f'metadata.annotations[llmaz.io/scale-to-zero-after]: Invalid value: "{after}": must be a duration of at '
        "least 10s: seconds or h/m/s units, e.g. 300, 90s, 5m, 1h30m"
    )


async def test_a_valid_scale_to_zero_after_is_allowed() -> None:
    for after in ("10m", "600", "1h30m", "90s"):
        response = await call("vplayground.kb.io", request("Playground", annotated(after)))
        assert response.allowed, (after, response.message)


async def test_an_update_keeping_a_bad_value_stored_before_the_check_is_allowed_and_changing_it_is_checked() -> None:
    stored = annotated("soon")

    def update(new: dict[str, Any]) -> AdmissionRequest:
        return AdmissionRequest(
            "uid", GroupVersionKind("inference.llmaz.io", "v1alpha1", "Playground"), "UPDATE", "p",
            object=new, old_object=stored,
        )  # fmt: skip

    kept = copy.deepcopy(stored)
    kept["metadata"]["labels"]["c"] = "d"
    assert (await call("vplayground.kb.io", update(kept))).allowed
    assert not (await call("vplayground.kb.io", update(annotated("later")))).allowed
    assert (await call("vplayground.kb.io", update(annotated("5m")))).allowed


def routed(**annotations: str) -> dict[str, Any]:
    found: dict[str, Any] = copy.deepcopy(PLAYGROUND)
    found["metadata"]["annotations"] = annotations
    return found


@pytest.mark.parametrize(
    ("annotation", "value", "rule"),
    [
        ("llmaz.io/routing-strategy", "round-robin", "must be one of: least-outstanding, prefix-aware"),
        (
            "llmaz.io/routing-weights",
            "prefix:3",
            "must be NAME=WEIGHT pairs separated by commas, NAME one of prefix, queue, utilisation, WEIGHT a number "
            "from 0 to 100, e.g. prefix=3,queue=2,utilisation=2",
        ),
        (
            "llmaz.io/routing-weights",
            "prefix=1000",
            "must be NAME=WEIGHT pairs separated by commas, NAME one of prefix, queue, utilisation, WEIGHT a number "
            "from 0 to 100, e.g. prefix=3,queue=2,utilisation=2",
        ),
    ],
)
async def test_a_bad_routing_annotation_is_denied_naming_it_and_the_accepted_forms(
    annotation: str, value: str, rule: str
) -> None:
    response = await call("vplayground.kb.io", request("Playground", routed(**{annotation: value})))
    assert (response.allowed, response.code) == (False, 403)
    assert response.message == f'metadata.annotations[{annotation}]: Invalid value: "{value}": {rule}'


async def test_valid_routing_annotations_are_allowed_and_every_bad_one_is_named() -> None:
    good = routed(**{"llmaz.io/routing-strategy": "prefix-aware", "llmaz.io/routing-weights": "prefix=5,queue=1"})
    assert (await call("vplayground.kb.io", request("Playground", good))).allowed
    bad = routed(**{"llmaz.io/routing-strategy": "random", "llmaz.io/routing-weights": "queue=-1"})
    response = await call("vplayground.kb.io", request("Playground", bad))
    assert not response.allowed
    assert "metadata.annotations[llmaz.io/routing-strategy]" in response.message
    assert "metadata.annotations[llmaz.io/routing-weights]" in response.message


def pooled(value: str) -> dict[str, Any]:
    found: dict[str, Any] = copy.deepcopy(OPENMODEL)
    found.setdefault("metadata", {})["annotations"] = {"llmaz.io/serve-across-namespaces": value}
    return found


@pytest.mark.parametrize("value", ["True", "yes", "1", ""])
async def test_a_serve_across_namespaces_other_than_true_or_false_is_denied_naming_the_annotation(value: str) -> None:
    response = await call("vopenmodel.kb.io", request("OpenModel", pooled(value)))
    assert (response.allowed, response.code) == (False, 403)
    assert response.message == (
        f'metadata.annotations[llmaz.io/serve-across-namespaces]: Invalid value: "{value}": must be "true" '
        '(llmaz-gateway pools every namespace serving the model) or "false" (the namespace that serves it first owns '
        "its name, the default)"
    )


@pytest.mark.parametrize("value", ["true", "false"])
async def test_serve_across_namespaces_true_or_false_is_allowed(value: str) -> None:
    assert (await call("vopenmodel.kb.io", request("OpenModel", pooled(value)))).allowed


@pytest.mark.parametrize(
    ("annotation", "value", "rule"),
    [
        (
            "llmaz.io/inference-pool",
            "yes",
            'must be "true" (llmaz creates an InferencePool named like the Playground, for a gateway of the Gateway '
            'API Inference Extension) or "false" (none, the default): set it to "true" or remove it',
        ),
        ("llmaz.io/inference-pool", "True", None),
        ("llmaz.io/inference-pool", "", None),
        (
            "llmaz.io/inference-pool-failure-mode",
            "failopen",
            "must be FailClose (a gateway fails requests while the endpoint picker does not answer, the default) or "
            "FailOpen (it picks an endpoint itself): set one of them or remove the annotation",
        ),
        ("llmaz.io/inference-pool-failure-mode", "FailSafe", None),
    ],
)
async def test_a_bad_inference_pool_annotation_is_denied_naming_it_and_the_fix(
    annotation: str, value: str, rule: str | None
) -> None:
    response = await call("vplayground.kb.io", request("Playground", routed(**{annotation: value})))
    assert (response.allowed, response.code) == (False, 403)
    assert response.message.startswith(f'metadata.annotations[{annotation}]: Invalid value: "{value}": must be ')
    if rule is not None:
        assert response.message == f'metadata.annotations[{annotation}]: Invalid value: "{value}": {rule}'


@pytest.mark.parametrize(
    "annotations",
    [
        {"llmaz.io/inference-pool": "true"},
        {"llmaz.io/inference-pool": "false"},
        {"llmaz.io/inference-pool": "true", "llmaz.io/inference-pool-failure-mode": "FailOpen"},
        {"llmaz.io/inference-pool": "true", "llmaz.io/inference-pool-failure-mode": "FailClose"},
    ],
)
async def test_valid_inference_pool_annotations_are_allowed(annotations: dict[str, str]) -> None:
    assert (await call("vplayground.kb.io", request("Playground", routed(**annotations)))).allowed


RUNNER = {"name": "model-runner", "image": "e:v1"}
SERVICE = {
    "apiVersion": "inference.llmaz.io/v1alpha1",
    "kind": "Service",
    "metadata": {"name": "s", "namespace": "ns"},
    "spec": {
        "modelClaims": {"models": [{"name": "m"}]},
        "workloadTemplate": {"workerTemplate": {"spec": {"containers": [RUNNER]}}},
    },
}
NETWORK_POLICY_RULE = (
    'must be "gateway-only" (a NetworkPolicy lets only llmaz-gateway and pods of this namespace reach the engines) '
    'or "none" (no policy, the default): set one of them or remove the annotation'
)


def network_policy(kind: str, value: str) -> dict[str, Any]:
    found: dict[str, Any] = copy.deepcopy(PLAYGROUND if kind == "Playground" else SERVICE)
    found["metadata"]["annotations"] = {"llmaz.io/network-policy": value}
    return found


@pytest.mark.parametrize("kind", ["Playground", "Service"])
@pytest.mark.parametrize("value", ["yes", "Gateway-Only", ""])
async def test_a_network_policy_other_than_gateway_only_or_none_is_denied_naming_it_and_the_fix(
    kind: str, value: str
) -> None:
    response = await call(f"v{kind.lower()}.kb.io", request(kind, network_policy(kind, value)))
    assert (response.allowed, response.code) == (False, 403)
    assert response.message == (
        f'metadata.annotations[llmaz.io/network-policy]: Invalid value: "{value}": {NETWORK_POLICY_RULE}'
    )


@pytest.mark.parametrize("kind", ["Playground", "Service"])
@pytest.mark.parametrize("value", ["gateway-only", "none"])
async def test_network_policy_gateway_only_or_none_is_allowed(kind: str, value: str) -> None:
    assert (await call(f"v{kind.lower()}.kb.io", request(kind, network_policy(kind, value)))).allowed
