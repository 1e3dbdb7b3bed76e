"""The samples of llmaz-gateway's features (scale to zero, the request autoscaler, routing strategies, API keys,
serving across namespaces) say what the code reads: every annotation and label key a sample sets is one llmaz or
the gateway reads, on the kind it is read from, with a value the reader accepts; every sample passes admission; each
feature's sample configures what its header says; and the Kubernetes objects no builder makes (Secrets, Namespaces)
are checked here, an API key Secret by the gateway's own parser."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import yaml

from llmaz.apis import OpenModel, Playground, Service
from llmaz.apis import constants as c
from llmaz.apis.routing import LEAST_OUTSTANDING, PREFIX_AWARE, STRATEGIES, routing_override
from llmaz.apis.scaletozero import idle_after
from llmaz.apis.serving import model_name_taken, routed_namespaces, serves_across_namespaces
from llmaz.apis.validation.autoscale import autoscale_policy
from llmaz.apis.validation.openmodel import validate_openmodel
from llmaz.apis.validation.playground import validate_playground
from llmaz.apis.validation.service import validate_service
from llmaz.controllers.builders import build_hpa, skip_model_loader
from llmaz.gateway.proxy import keys
from llmaz.webhooks.openmodel import validate_openmodel_annotations
from llmaz.webhooks.playground import validate_playground_annotations

from .factories import REPO, backend, documents
from .test_samples import CHECKED_KINDS, SAMPLES, build_all

Doc = dict[str, Any]

SCALE_TO_ZERO = "scale-to-zero-llamacpp.yaml"
AUTOSCALER = "request-autoscaler-llamacpp.yaml"
ROUTING = "routing-strategies-llamacpp.yaml"
API_KEYS = "gateway-api-keys.yaml"
ACROSS_NAMESPACES = "serve-across-namespaces-llamacpp.yaml"
ADAPTERS = "lora-adapters-llamacpp.yaml"
# Where config/default installs the gateway, whose Secrets it reads (`--gateway-service`'s namespace).
GATEWAY_NAMESPACE = yaml.safe_load((REPO / "config" / "default" / "kustomization.yaml").read_text())["namespace"]


def all_documents() -> list[tuple[str, Doc]]:
    return [(sample, doc) for sample in SAMPLES for doc in documents(f"config/samples/{sample}")]


def of_kind(sample: str, kind: str) -> list[Doc]:
    return [doc for doc in documents(f"config/samples/{sample}") if doc["kind"] == kind]


def annotations_of(doc: Mapping[str, Any]) -> dict[str, str]:
    return dict(doc["metadata"].get("annotations") or {})


def labels_of(doc: Mapping[str, Any]) -> dict[str, str]:
    return dict(doc["metadata"].get("labels") or {})


def _selects(selector: str, doc: Doc) -> bool:
    key, _, value = selector.partition("=")
    return labels_of(doc).get(key) == value


# Each annotation or label key a sample may set, the kinds it is read from, and the reader llmaz or the gateway
# reads it with: true when the reader takes the document's value as set (a typo in a key or a refused value is not).
ANNOTATION_READERS: dict[str, tuple[frozenset[str], Callable[[Doc], bool]]] = {
    c.SKIP_MODEL_LOADER_ANNOTATION: (
        frozenset({"Playground", "Service"}),
        lambda doc: skip_model_loader(annotations_of(doc)),
    ),
    c.SCALE_TO_ZERO_AFTER_ANNOTATION: (frozenset({"Playground"}), lambda doc: idle_after(doc) is not None),
    c.ROUTING_STRATEGY_ANNOTATION: (
        frozenset({"Playground"}),
        lambda doc: (override := routing_override(doc)) is not None and override.strategy is not None,
    ),
    c.ROUTING_WEIGHTS_ANNOTATION: (
        frozenset({"Playground"}),
        lambda doc: (override := routing_override(doc)) is not None and bool(override.weights),
    ),
    c.SERVE_ACROSS_NAMESPACES_ANNOTATION: (frozenset({"OpenModel"}), serves_across_namespaces),
}
LABEL_READERS: dict[str, tuple[frozenset[str], Callable[[Doc], bool]]] = {
    keys.API_KEY_LABEL: (frozenset({"Secret"}), lambda doc: _selects(keys.API_KEY_SELECTOR, doc)),
}
KEYED_DOCUMENTS = [
    (sample, doc, where, key)
    for sample, doc in all_documents()
    for where, keyed in (("annotation", annotations_of(doc)), ("label", labels_of(doc)))
    for key in keyed
]


@pytest.mark.parametrize(
    ("sample", "doc", "where", "key"),
    KEYED_DOCUMENTS,
    ids=[f"{sample}:{doc['kind']}/{doc['metadata']['name']}:{key}" for sample, doc, _, key in KEYED_DOCUMENTS],
)
def test_every_annotation_and_label_a_sample_sets_is_read_from_its_kind_and_its_value_accepted(
    sample: str, doc: Doc, where: str, key: str
) -> None:
    readers = ANNOTATION_READERS if where == "annotation" else LABEL_READERS
    assert key in readers, f"{sample}: {where} {key!r} is read by nothing in llmaz (a typo?)"
    kinds, reads = readers[key]
    assert doc["kind"] in kinds, f"{sample}: {where} {key!r} is read from {sorted(kinds)}, not a {doc['kind']}"
    assert reads(doc), f"{sample}: {doc['kind']} {doc['metadata']['name']}: {where} {key!r} is not taken as set"


def test_the_key_check_covers_the_features_samples() -> None:
    # A sample whose annotations were dropped would pass the test above by having nothing to check.
    used = {key for _, _, _, key in KEYED_DOCUMENTS}
    assert used == set(ANNOTATION_READERS) | set(LABEL_READERS)


ADMITTED = [(sample, doc) for sample, doc in all_documents() if doc["kind"] in ("OpenModel", "Playground", "Service")]


@pytest.mark.parametrize(
    ("sample", "doc"), ADMITTED, ids=[f"{s}:{d['kind']}/{d['metadata']['name']}" for s, d in ADMITTED]
)
def test_every_llmaz_object_of_a_sample_passes_admission(sample: str, doc: Doc) -> None:
    if doc["kind"] == "OpenModel":
        errors = validate_openmodel(OpenModel.from_dict(doc), True) + validate_openmodel_annotations(doc, None)
    elif doc["kind"] == "Playground":
        errors = validate_playground(Playground.from_dict(doc), True) + validate_playground_annotations(doc, None)
    else:
        errors = validate_service(Service.from_dict(doc), True)
    assert errors == [], f"{sample}: {[str(e) for e in errors]}"


# Scale to zero.


def test_the_scale_to_zero_sample_starts_asleep_and_sleeps_after_two_idle_minutes() -> None:
    (playground,) = of_kind(SCALE_TO_ZERO, "Playground")
    assert idle_after(playground) == 120.0
    assert playground["spec"]["replicas"] == 0
    service = next(o for o in build_all(SCALE_TO_ZERO) if o["kind"] == "Service" and "workloadTemplate" in o["spec"])
    assert service["spec"]["replicas"] == 0
    assert build_hpa(Playground.from_dict(playground), backend("llamacpp")) is None


# The request autoscaler.


def test_the_autoscaler_sample_is_a_policy_the_gateway_acts_on_and_creates_no_hpa() -> None:
    (playground,) = of_kind(AUTOSCALER, "Playground")
    policy = autoscale_policy(playground)
    assert policy is not None
    assert (policy.min_replicas, policy.max_replicas, policy.target_per_replica) == (1, 3, 2.0)
    assert (policy.stable_window, policy.panic_window, policy.scale_down_delay) == (30.0, 6.0, 60.0)
    assert [o for o in build_all(AUTOSCALER) if o["kind"] == "HorizontalPodAutoscaler"] == []


# Routing strategies.


def test_the_routing_sample_names_every_strategy_the_gateway_offers() -> None:
    overrides = {pg["metadata"]["name"]: routing_override(pg) for pg in of_kind(ROUTING, "Playground")}
    assert {o.strategy for o in overrides.values() if o is not None} == set(STRATEGIES)
    prefix_aware = overrides["tiny-llama-prefix-aware"]
    assert prefix_aware is not None
    assert prefix_aware.strategy == PREFIX_AWARE
    assert dict(prefix_aware.weights) == {"prefix": 4.0, "queue": 2.0, "utilisation": 1.0}
    least = overrides["tiny-llama-least-outstanding"]
    assert least is not None
    assert (least.strategy, least.weights) == (LEAST_OUTSTANDING, ())


def test_the_routing_sample_has_replicas_to_choose_between() -> None:
    assert all(pg["spec"]["replicas"] >= 2 for pg in of_kind(ROUTING, "Playground"))


# API keys.


def stored(secret: Doc) -> Doc:
    """The Secret as the API server stores it: `stringData` merged into `data`, base64-encoded."""
    data = dict(secret.get("data") or {})
    data.update({k: base64.b64encode(v.encode()).decode() for k, v in (secret.get("stringData") or {}).items()})
    return {**{k: v for k, v in secret.items() if k != "stringData"}, "data": data}


def check_api_key_secret(sample: str, secret: Doc) -> None:
    assert secret["metadata"].get("namespace") == GATEWAY_NAMESPACE, f"{sample}: not where the gateway reads keys"
    assert _selects(keys.API_KEY_SELECTOR, secret), f"{sample}: the gateway's informer selects {keys.API_KEY_SELECTOR}"
    given = secret.get("stringData") or {}
    unread = sorted(set(given) - set(keys.FIELDS))
    assert not unread, f"{sample}: the gateway reads no field {unread} (a typo?)"
    entry = keys.parse_secret(keys.compact_secret(stored(secret)))
    assert entry.refused is None, f"{sample}: the gateway refuses {secret['metadata']['name']}: {entry.refused}"
    assert entry.policy is not None
    assert entry.digest == keys.digest(given[keys.KEY])
    assert entry.policy.tenant == given[keys.TENANT]
    for field, value in (
        (keys.REQUESTS_PER_MINUTE, entry.policy.requests_per_minute),
        (keys.TOKENS_PER_MINUTE, entry.policy.tokens_per_minute),
        (keys.MAX_STREAMS, entry.policy.max_streams),
        (keys.PRIORITY, entry.policy.priority),
    ):
        assert value == (int(given[field]) if field in given else None), field
    assert entry.policy.may_wake == (given.get(keys.MAY_WAKE, "true") == "true")


def check_namespace(sample: str, namespace: Doc) -> None:
    name = namespace["metadata"]["name"]
    users = [d for d in documents(f"config/samples/{sample}") if d["metadata"].get("namespace") == name]
    assert users, f"{sample}: creates Namespace {name} and puts nothing in it"


CHECKS: dict[str, Callable[[str, Doc], None]] = {"Secret": check_api_key_secret, "Namespace": check_namespace}
CHECKED = [(sample, doc) for sample, doc in all_documents() if doc["kind"] in CHECKED_KINDS]


def test_every_kind_no_builder_makes_has_its_check() -> None:
    assert set(CHECKS) == CHECKED_KINDS
    assert {doc["kind"] for _, doc in CHECKED} == CHECKED_KINDS


@pytest.mark.parametrize(
    ("sample", "doc"), CHECKED, ids=[f"{s}:{d['kind']}/{d['metadata']['name']}" for s, d in CHECKED]
)
def test_every_secret_and_namespace_of_a_sample_is_what_its_reader_accepts(sample: str, doc: Doc) -> None:
    CHECKS[doc["kind"]](sample, doc)


def test_the_api_keys_sample_shows_every_field_the_gateway_reads_and_a_key_that_may_not_wake() -> None:
    secrets = of_kind(API_KEYS, "Secret")
    assert set().union(*(s["stringData"] for s in secrets)) == set(keys.FIELDS)
    policies = [keys.parse_secret(keys.compact_secret(stored(s))).policy for s in secrets]
    assert sorted(p.may_wake for p in policies if p is not None) == [False, True]


def test_a_typo_in_an_api_key_secret_is_refused_by_the_parser_the_check_calls() -> None:
    # The check above would pass a Secret the gateway reads as something else only if the parser did; it does not.
    secret = of_kind(API_KEYS, "Secret")[0]
    secret["stringData"][keys.TOKENS_PER_MINUTE] = "20k"
    with pytest.raises(AssertionError, match=r"data\.tokens-per-minute must be a positive integer"):
        check_api_key_secret(API_KEYS, secret)


def test_namespaced_objects_of_a_sample_go_to_its_own_namespaces_or_the_gateways() -> None:
    for sample in SAMPLES:
        docs = documents(f"config/samples/{sample}")
        created = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
        used = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
        assert used <= created | {GATEWAY_NAMESPACE}, f"{sample}: {sorted(used - created - {GATEWAY_NAMESPACE})}"


# Serving a model across namespaces.


def test_the_across_namespaces_sample_pools_both_namespaces_and_without_its_opt_in_the_first_owns_the_name() -> None:
    (model,) = of_kind(ACROSS_NAMESPACES, "OpenModel")
    playgrounds = of_kind(ACROSS_NAMESPACES, "Playground")
    for playground in playgrounds:  # applied together: created in the same second
        playground["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert {pg["spec"]["modelClaim"]["modelName"] for pg in playgrounds} == {model["metadata"]["name"]}
    assert routed_namespaces(playgrounds, model) == {"team-a", "team-b"}
    assert not model_name_taken("team-b", playgrounds, model)

    del model["metadata"]["annotations"][c.SERVE_ACROSS_NAMESPACES_ANNOTATION]
    assert routed_namespaces(playgrounds, model) == {"team-a"}
    assert model_name_taken("team-b", playgrounds, model)


# Adapters (the sample predates the others; docs/adapters.md describes it).


def test_the_adapters_sample_shows_every_adapter_field_docs_adapters_md_describes() -> None:
    (model,) = of_kind(ADAPTERS, "OpenModel")
    (adapter,) = OpenModel.from_dict(model).spec.adapters or []
    assert (adapter.name, adapter.scale) == ("tiny-lora", 1)
    assert set(model["spec"]["adapters"][0]) == {"name", "source", "scale"}


# The headers.

DOC_PAGES = {
    SCALE_TO_ZERO: "docs/gateway.md",
    AUTOSCALER: "docs/autoscaling.md",
    ROUTING: "docs/gateway.md",
    API_KEYS: "docs/tenancy.md",
    ACROSS_NAMESPACES: "docs/tenancy.md",
    ADAPTERS: "docs/adapters.md",
}


@pytest.mark.parametrize("sample", sorted(DOC_PAGES))
def test_each_feature_sample_header_names_its_doc_page_the_gateway_and_a_request_through_it(sample: str) -> None:
    header = (REPO / "config" / "samples" / sample).read_text().split("\napiVersion:")[0]
    assert (REPO / DOC_PAGES[sample]).is_file()
    assert DOC_PAGES[sample] in header or DOC_PAGES[sample].removeprefix("docs/") in header
    assert "components: [../gateway]" in header
    assert "gateway.enabled=true" in header
    assert f"kubectl apply -f config/samples/{sample}" in header
    assert "curl http" in header or "curl -s" in header
