"""Policy rules: what they may say, how they merge, and what they grant."""

from __future__ import annotations

import pytest

from llmaz.runtime.rbac import READ, PolicyRule, allow, allow_urls, allows, merge, role_manifests
from llmaz.runtime.resource import Resource

PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)


def test_merge_unions_verbs_per_resource_and_groups_resources_with_equal_verbs() -> None:
    merged = merge(
        [
            allow(PODS, "get"),
            allow(PODS, "list", "watch"),
            allow(SECRETS, *READ),
            allow(DEPLOYMENTS, "update", subresource="status"),
        ]
    )
    assert [r.manifest() for r in merged] == [
        {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["update"]},
    ]


def test_merge_keeps_named_namespaced_and_cluster_wide_grants_apart() -> None:
    merged = merge(
        [
            allow(SECRETS, "get", names=("cert",), own_namespace=True),
            allow(SECRETS, "get", own_namespace=True),
            allow(SECRETS, "get"),
        ]
    )
    assert len(merged) == 3
    assert {(r.own_namespace, r.resource_names) for r in merged} == {(True, ("cert",)), (True, ()), (False, ())}


def test_merging_is_order_independent_and_idempotent() -> None:
    rules = [allow(PODS, "watch"), allow(DEPLOYMENTS, "get"), allow(PODS, "get"), allow_urls("/metrics")]
    assert merge(rules) == merge(reversed(rules)) == merge(merge(rules))


def test_a_named_rule_grants_only_that_name_and_a_namespaced_rule_only_in_the_own_namespace() -> None:
    rules = [allow(SECRETS, "get", "update", names=("cert",), own_namespace=True)]
    assert allows(rules, "", "secrets", "get", own_namespace=True, name="cert")
    assert not allows(rules, "", "secrets", "get", own_namespace=True, name="other")
    assert not allows(rules, "", "secrets", "get", own_namespace=True)
    assert not allows(rules, "", "secrets", "get", own_namespace=False, name="cert")
    assert not allows(rules, "", "secrets", "delete", own_namespace=True, name="cert")


def test_a_cluster_wide_rule_also_grants_in_the_own_namespace() -> None:
    assert allows([allow(PODS, *READ)], "", "pods", "watch", own_namespace=True)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PolicyRule("", ("pods",), ()), "needs verbs"),
        (lambda: PolicyRule("", (), ("get",)), "either resources or non-resource URLs"),
        (lambda: PolicyRule("", ("pods",), ("get",), non_resource_urls=("/metrics",)), "either resources"),
        (lambda: PolicyRule(non_resource_urls=("/metrics",), verbs=("get",), own_namespace=True), "cluster-wide"),
        (lambda: allow(SECRETS, "create", names=("cert",)), "cannot restrict"),
    ],
    ids=["no verbs", "no resources", "resources and urls", "namespaced url", "named create"],
)
def test_rules_the_api_server_would_not_honour_are_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_cluster_wide_rules_render_into_a_cluster_role_and_namespaced_ones_into_a_role() -> None:
    manifests = role_manifests("r", [allow(PODS, "get"), allow(SECRETS, "get", own_namespace=True)], "ns")
    assert [(m["kind"], m["metadata"]) for m in manifests] == [
        ("ClusterRole", {"name": "r"}),
        ("Role", {"name": "r", "namespace": "ns"}),
    ]
    assert manifests[1]["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    assert [m["kind"] for m in role_manifests("r", [allow_urls("/metrics")])] == ["ClusterRole"]
