"""apply_is_noop: skip a server-side apply only when it would change nothing."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from llmaz.runtime.client.applycheck import apply_is_noop

DESIRED: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "s-lb", "namespace": "ns", "annotations": {"a": "1"}},
    "spec": {
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080}],
        "selector": {"app": "x"},
    },
}
MANAGED: dict[str, Any] = {
    "manager": "llmaz",
    "operation": "Apply",
    "fieldsV1": {
        "f:metadata": {"f:annotations": {"f:a": {}}},
        "f:spec": {
            "f:ports": {'k:{"port":8080,"protocol":"TCP"}': {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}}},
            "f:selector": {"f:app": {}},
        },
    },
}


def _live(**changes: Any) -> dict[str, Any]:
    live = copy.deepcopy(DESIRED)
    live["metadata"].update(uid="u1", resourceVersion="7", managedFields=[copy.deepcopy(MANAGED)])
    live["spec"].update(clusterIP="10.0.0.1", type="ClusterIP", sessionAffinity="None")
    live["status"] = {"loadBalancer": {}}
    for path, value in changes.items():
        node = live
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return live


def test_identical_desired_state_plus_server_defaults_is_a_noop() -> None:
    assert apply_is_noop(DESIRED, _live(), "llmaz")


def test_missing_live_object_needs_an_apply() -> None:
    assert not apply_is_noop(DESIRED, None, "llmaz")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.selector", {"app": "y"}),
        ("metadata.annotations", {"a": "2"}),
        ("spec.ports", [{"name": "http", "port": 9090, "protocol": "TCP", "targetPort": 8080}]),
    ],
)
def test_a_changed_field_needs_an_apply(path: str, value: Any) -> None:
    assert not apply_is_noop(DESIRED, _live(**{path: value}), "llmaz")


def test_a_field_we_applied_before_but_dropped_now_needs_an_apply() -> None:
    live = _live()
    live["metadata"]["annotations"]["old"] = "x"
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:annotations"]["f:old"] = {}
    assert not apply_is_noop(DESIRED, live, "llmaz")


def test_a_field_set_kept_as_json_text_reads_as_the_decoded_one() -> None:
    live = _live()
    live["metadata"]["managedFields"][0]["fieldsV1"] = orjson.dumps(MANAGED["fieldsV1"]).decode()
    assert apply_is_noop(DESIRED, live, "llmaz")
    orphaned = copy.deepcopy(MANAGED["fieldsV1"])
    orphaned["f:metadata"]["f:annotations"]["f:old"] = {}
    live["metadata"]["annotations"]["old"] = "x"
    live["metadata"]["managedFields"][0]["fieldsV1"] = orjson.dumps(orphaned).decode()
    assert not apply_is_noop(DESIRED, live, "llmaz")


def test_fields_owned_by_other_managers_do_not_matter() -> None:
    live = _live()
    live["metadata"]["annotations"]["other"] = "x"
    live["metadata"]["managedFields"].append(
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {"f:annotations": {"f:other": {}}}}}
    )
    assert apply_is_noop(DESIRED, live, "llmaz")


def test_a_list_item_keyed_by_name_that_we_no_longer_want_needs_an_apply() -> None:
    live = _live()
    live["spec"]["ports"].append({"name": "metrics", "port": 9000, "protocol": "TCP", "targetPort": 9000})
    ports = live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"]
    ports['k:{"port":9000,"protocol":"TCP"}'] = {".": {}, "f:name": {}}
    assert not apply_is_noop(DESIRED, live, "llmaz")


def test_ints_and_strings_with_the_same_text_are_equal() -> None:
    desired = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"cpu": 4, "mem": "8Gi"}}
    live = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"cpu": "4", "mem": "8Gi"}}
    assert apply_is_noop(desired, live, "llmaz")


def test_booleans_are_not_confused_with_strings() -> None:
    desired = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"on": True}}
    live = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"on": "True"}}
    assert not apply_is_noop(desired, live, "llmaz")


def test_a_set_list_value_we_owned_but_dropped_needs_an_apply() -> None:
    desired: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "X",
        "metadata": {"name": "x"},
        "spec": {"finalizers": ["a"]},
    }
    live = copy.deepcopy(desired)
    live["spec"]["finalizers"] = ["a", "b"]
    live["metadata"]["managedFields"] = [
        {"manager": "llmaz", "operation": "Apply", "fieldsV1": {"f:spec": {"f:finalizers": {'v:"a"': {}, 'v:"b"': {}}}}}
    ]
    assert not apply_is_noop(desired, live, "llmaz")
