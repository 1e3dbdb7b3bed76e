"""What the manager caches of children, pods and nodes: selected by label or field, stripped without changing any
reader's answer."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.controllers.builders import build_hpa, build_lb_service, build_leader_worker_set, diagnose_pod
from llmaz.controllers.builders.diagnosis import unusable_adapters
from llmaz.controllers.caches import (
    CHILD_SELECTOR,
    LLMAZ_KINDS,
    LWS_FIX,
    RBAC_FIX,
    configure_caches,
    configure_fit_caches,
    strip_bound_pod,
    strip_child,
    strip_child_and_status,
    strip_node,
    strip_pod,
)
from llmaz.controllers.flavors.capacity import BOUND_POD_SELECTOR, pod_node
from llmaz.controllers.flavors.decision import longest_waiting
from llmaz.controllers.flavors.fit import free_on, pod_requests, schedulable
from llmaz.controllers.indexes import pod_service, service_of_pod
from llmaz.runtime.cache import NOT_SERVED, SharedInformerFactory
from llmaz.runtime.cache.transform import LAST_APPLIED_ANNOTATION, keep_paths, strip_metadata
from llmaz.runtime.client import Client, Forbidden, NotFound, RestConfig
from llmaz.runtime.client.applycheck import apply_is_noop
from llmaz.runtime.resource import Resource
from llmaz_dev.envtest._assets import module_version

from ..builders.factories import LOADER_IMAGE, llama3_8b, playground
from ..builders.test_diagnosis import CASES
from ..builders.test_playground import BEHAVIOR, CPU_50, elastic, scaled_backend
from ..builders.test_playground import worked_example as worked_playground
from ..builders.test_service import worked_example as worked_service

REPO = Path(__file__).resolve().parents[3]
OTHER_MANAGERS = [
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "subresource": "status",
        "fieldsV1": {"f:status": {}},
    },
    {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:metadata": {"f:annotations": {}}}},
]


def _fields(obj: dict[str, Any]) -> dict[str, Any]:
    """llmaz's managedFields for an applied object: every label and annotation, each top-level spec field."""
    meta = obj["metadata"]
    fields: dict[str, Any] = {"f:metadata": {}, "f:spec": {f"f:{key}": {} for key in obj.get("spec") or {}}}
    for group in ("labels", "annotations"):
        if meta.get(group):
            fields["f:metadata"][f"f:{group}"] = {f"f:{key}": {} for key in meta[group]}
    return fields


def served(desired: dict[str, Any], **extra_spec: Any) -> dict[str, Any]:
    """`desired` as the API server returns it after llmaz applied it and others touched it."""
    live = copy.deepcopy(desired)
    meta = live["metadata"]
    meta.update(uid="u-1", resourceVersion="42", generation=3, creationTimestamp="2025-01-01T00:00:00Z")
    meta.setdefault("annotations", {})[LAST_APPLIED_ANNOTATION] = '{"a": "huge"}'
    meta["managedFields"] = [
        {"manager": c.FIELD_MANAGER, "operation": "Apply", "fieldsV1": _fields(desired)},
        *copy.deepcopy(OTHER_MANAGERS),
    ]
    live["spec"].update(extra_spec)
    live["status"] = {"conditions": [{"type": "Available", "status": "True"}], "replicas": 1}
    return live


def children() -> list[tuple[str, dict[str, Any]]]:
    service = worked_service()
    hpa = build_hpa(
        playground(elastic(scaleTrigger={"hpa": {"metrics": CPU_50, "behavior": BEHAVIOR}})), scaled_backend()
    )
    assert hpa is not None
    return [
        ("lws", build_leader_worker_set(service, [llama3_8b()], LOADER_IMAGE)),
        ("lb", build_lb_service(service, [llama3_8b()])),
        ("hpa", hpa),
        ("inference service", worked_playground()),
    ]


@pytest.mark.parametrize("strip", [strip_child, strip_child_and_status], ids=["child", "child-and-status"])
@pytest.mark.parametrize(("kind", "desired"), children(), ids=[kind for kind, _ in children()])
def test_stripping_a_child_never_changes_the_apply_noop_decision(
    kind: str, desired: dict[str, Any], strip: Any
) -> None:
    unchanged = served(desired)
    drifted = copy.deepcopy(unchanged)
    drifted["metadata"]["labels"] = {}
    orphaned = served(desired, extra={"x": 1})  # a field llmaz applied earlier and no longer wants
    orphaned["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:extra"] = {}
    for live, noop in ((unchanged, True), (drifted, False), (orphaned, False)):
        assert apply_is_noop(desired, live, c.FIELD_MANAGER) is noop
        assert apply_is_noop(desired, strip(live), c.FIELD_MANAGER) is noop


def test_a_stripped_child_keeps_llmaz_s_apply_entry_and_drops_the_rest() -> None:
    _, lws = children()[0]
    live = served(lws)
    original = copy.deepcopy(live)
    stripped = strip_child(live)
    assert live == original  # the informer's object is not changed in place
    assert [entry["manager"] for entry in stripped["metadata"]["managedFields"]] == [c.FIELD_MANAGER]
    kept = stripped["metadata"]["managedFields"][0]
    assert isinstance(kept["fieldsV1"], str)  # as text: a fraction of the memory of the decoded tree
    assert orjson.loads(kept["fieldsV1"]) == live["metadata"]["managedFields"][0]["fieldsV1"]
    assert strip_child(stripped) == stripped  # the text form passes through again unchanged
    assert LAST_APPLIED_ANNOTATION not in stripped["metadata"].get("annotations", {})
    assert stripped["status"] == live["status"]  # the LWS status is read by the Service's status
    assert stripped["spec"] == live["spec"]
    assert "status" not in strip_child_and_status(live)
    assert stripped["metadata"]["labels"] == {c.MANAGED_BY_LABEL: c.MANAGED_BY}


def test_every_child_carries_the_label_the_child_informers_select() -> None:
    key, value = CHILD_SELECTOR.split("=")
    for _, child in children():
        assert child["metadata"]["labels"][key] == value


def _noisy(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod with what kubelet and the API server add and nothing in llmaz reads."""
    noisy = copy.deepcopy(pod)
    noisy["metadata"].update(managedFields=OTHER_MANAGERS, annotations={"big": "x" * 1000}, generateName="pg-")
    noisy["spec"].update(volumes=[{"name": "v", "emptyDir": {}}], nodeName="node-1", tolerations=[{"key": "k"}])
    for container in noisy["spec"]["containers"] + noisy["spec"].get("initContainers", []):
        container.update(env=[{"name": "A", "value": "b"}], args=["--x"], resources={"limits": {"cpu": "1"}})
    noisy["status"].update(podIP="10.0.0.9", qosClass="Burstable", hostIP="10.0.0.1")
    return noisy


@pytest.mark.parametrize(("case", "pod", "expected"), CASES, ids=[case[0] for case in CASES])
def test_stripping_a_pod_keeps_what_diagnosis_and_the_pod_indexes_read(case: str, pod: Any, expected: Any) -> None:
    stripped = strip_pod(_noisy(pod))
    assert diagnose_pod(stripped) == expected
    waiting = longest_waiting([stripped], None)
    assert waiting == longest_waiting([pod], None)
    assert (waiting is not None) == (case == "an unschedulable pod says what blocks it")
    assert pod_service(stripped) == pod_service(pod) == ["ns/pg"]
    assert service_of_pod(stripped) == service_of_pod(pod)
    assert "managedFields" not in stripped["metadata"]
    assert "annotations" not in stripped["metadata"]
    assert "volumes" not in stripped["spec"]
    assert "podIP" not in stripped["status"]


def test_keep_paths_projects_mappings_and_each_mapping_of_a_list() -> None:
    keep = keep_paths({"a": True, "b": {"c": True}, "l": {"n": True}})
    obj = {"a": {"x": 1}, "b": {"c": 2, "d": 3}, "l": [{"n": 1, "m": 2}, {"m": 3}], "z": 0}
    assert keep(obj) == {"a": {"x": 1}, "b": {"c": 2}, "l": [{"n": 1}, {}]}


def test_strip_metadata_removes_empty_groups_and_keeps_objects_without_metadata() -> None:
    strip = strip_metadata()
    assert strip({"metadata": {"name": "a", "annotations": {LAST_APPLIED_ANNOTATION: "{}"}, "managedFields": []}}) == {
        "metadata": {"name": "a"}
    }
    assert strip({"kind": "X"}) == {"kind": "X"}


def test_the_manager_caches_only_labelled_children_and_knows_how_to_install_a_missing_lws() -> None:
    factory = SharedInformerFactory(Client(RestConfig(host="http://127.0.0.1:1")))
    configure_caches(factory)
    for resource in (r.LEADER_WORKER_SETS, r.SERVICES, r.HORIZONTAL_POD_AUTOSCALERS):
        assert factory.informer_for(resource).name.endswith(f"/{CHILD_SELECTOR}")
    assert factory.informer_for(r.INFERENCE_SERVICES).name == str(r.INFERENCE_SERVICES)
    lws = factory.informer_for(r.LEADER_WORKER_SETS)
    lws._report_problem(NotFound(404, "NotFound", "the server could not find the requested resource"))
    assert lws.problem is not None
    assert lws.problem.reason == NOT_SERVED
    assert lws.problem.fix == LWS_FIX
    assert str(lws.problem) == (
        "resource leaderworkerset.x-k8s.io/v1/leaderworkersets is not served by the API server; fix: the "
        "LeaderWorkerSet CRD leaderworkersets.leaderworkerset.x-k8s.io is not installed: install LeaderWorkerSet "
        "v0.6.2 with `kubectl apply --server-side -f "
        "https://github.com/kubernetes-sigs/lws/releases/download/v0.6.2/manifests.yaml`"
    )


def test_the_lws_release_named_in_the_fix_is_the_one_the_tests_run() -> None:
    assert module_version(REPO / "hack" / "cluster" / "lws" / "go.mod", "sigs.k8s.io/lws") == c.LWS_VERSION


@pytest.mark.parametrize("resource", LLMAZ_KINDS, ids=[str(resource) for resource in LLMAZ_KINDS])
def test_llmaz_kinds_are_cached_without_others_managed_fields_or_the_last_applied_annotation(
    resource: Resource,
) -> None:
    factory = SharedInformerFactory(Client(RestConfig(host="http://127.0.0.1:1")))
    configure_caches(factory)
    informer = factory.informer_for(resource)
    live = served(worked_playground())  # any object llmaz applied and others touched
    live["metadata"]["annotations"]["team"] = "a"
    informer.add(copy.deepcopy(live))  # as a watch delivers it
    (cached,) = informer.store.list()
    assert [entry["manager"] for entry in cached["metadata"]["managedFields"]] == [c.FIELD_MANAGER]
    assert cached["metadata"]["annotations"] == {"team": "a"}
    assert cached["spec"] == live["spec"]
    assert cached["status"] == live["status"]


def test_a_cached_node_keeps_only_what_the_scheduler_extender_reads() -> None:
    factory = SharedInformerFactory(Client(RestConfig(host="http://127.0.0.1:1")))
    configure_caches(factory)
    informer = factory.informer_for(r.NODES)
    labels = {"nvidia.com/gpu.product": "A100", "kubernetes.io/hostname": "gpu-1"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "uid": "u", "resourceVersion": "7", "labels": labels,
                     "annotations": {"big": "x" * 1000}, "managedFields": OTHER_MANAGERS},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"images": [{"names": ["registry.example/engine:v1"], "sizeBytes": 1}] * 50, "capacity": {}},
    }  # fmt: skip
    informer.add(copy.deepcopy(node))
    assert informer.store.get("gpu-1") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "uid": "u", "resourceVersion": "7", "labels": labels},
    }


NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-1",
        "uid": "n-1",
        "resourceVersion": "7",
        "labels": {"gpu": "a100", "kubernetes.io/hostname": "node-1"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "big": "x" * 1000},
        "managedFields": OTHER_MANAGERS,
    },
    "spec": {
        "podCIDR": "10.0.1.0/24",
        "providerID": "kind://node-1",
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    },
    "status": {
        "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"},
        "allocatable": {"cpu": "15", "memory": "62Gi", "nvidia.com/gpu": "8", "pods": "110"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "ok"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "images": [{"names": [f"registry/image-{i}:v1"], "sizeBytes": 10**9} for i in range(50)],
        "nodeInfo": {"kubeletVersion": "v1.35.4", "machineID": "m" * 32},
    },
}
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def bound_pod() -> dict[str, Any]:
    """A running pod on node-1 with a sidecar, an init container, pod-level requests and overhead, and the rest of
    what a pod carries."""
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    main = {"name": "main", "image": "main:v1", "env": [{"name": "A", "value": "b"}], "resources": resources}
    proxy = {"name": "proxy", "image": "proxy:v1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    setup = {"name": "setup", "image": "setup:v1", "resources": {"requests": {"cpu": "4"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "w-0",
            "namespace": "team",
            "uid": "p-1",
            "resourceVersion": "9",
            "labels": {"app": "w"},
            "annotations": {"big": "x" * 1000},
            "managedFields": OTHER_MANAGERS,
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [main],
            "initContainers": [proxy, setup],
            "resources": {"requests": {"memory": "8Gi"}},
            "overhead": {"cpu": "250m"},
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": GPU_TOLERATION,
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.1.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "main", "ready": True, "image": "main:v1"}],
        },
    }


def test_a_bound_pod_keeps_only_what_the_fit_reads() -> None:
    pod = bound_pod()
    stripped = strip_bound_pod(copy.deepcopy(pod))
    assert stripped == {
        "metadata": {"name": "w-0", "namespace": "team", "resourceVersion": "9"},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"resources": pod["spec"]["containers"][0]["resources"]}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "4"}}},
            ],
            "resources": {"requests": {"memory": "8Gi"}},
            "overhead": {"cpu": "250m"},
        },
        "status": {"phase": "Running"},
    }
    assert (
        pod_requests(stripped)
        == pod_requests(pod)
        == {
            "cpu": Decimal("5.25"),
            "memory": Decimal(8 * 2**30),
            "nvidia.com/gpu": Decimal(2),
        }
    )
    assert pod_node(stripped) == pod_node(pod) == ["node-1"]
    assert free_on(strip_node(NODE), [stripped]) == free_on(NODE, [pod])
    ended = {**pod, "status": {**pod["status"], "phase": "Failed"}}
    assert free_on(NODE, [strip_bound_pod(ended)]) == free_on(NODE, [])


def test_a_node_keeps_only_what_the_fit_reads() -> None:
    stripped = strip_node(copy.deepcopy(NODE))
    assert stripped == {
        "metadata": {"name": "node-1", "resourceVersion": "7", "labels": NODE["metadata"]["labels"]},
        "spec": {"taints": NODE["spec"]["taints"]},
        "status": {
            "allocatable": NODE["status"]["allocatable"],
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
        },
    }
    for tolerations in ([], GPU_TOLERATION):
        assert schedulable(stripped, tolerations) is schedulable(NODE, tolerations) is bool(tolerations)
    cordoned = copy.deepcopy(NODE)
    cordoned["spec"]["unschedulable"] = True
    assert schedulable(strip_node(cordoned), GPU_TOLERATION) is False


def test_the_fit_s_own_factory_caches_stripped_nodes_and_bound_pods() -> None:
    factory = SharedInformerFactory(Client(RestConfig(host="http://127.0.0.1:1")))
    configure_fit_caches(factory)
    nodes = factory.informer_for(r.NODES)
    bound = factory.informer_for(r.PODS, field_selector=BOUND_POD_SELECTOR)
    assert bound.name == f"{r.PODS}/{BOUND_POD_SELECTOR}"
    nodes.add(copy.deepcopy(NODE))
    bound.add(bound_pod())
    assert nodes.store.list() == [strip_node(NODE)]
    assert bound.store.list() == [strip_bound_pod(bound_pod())]
    nodes._report_problem(Forbidden(403, "Forbidden", 'nodes is forbidden: cannot list resource "nodes"'))
    assert nodes.problem is not None
    assert nodes.problem.fix == RBAC_FIX


def test_stripping_a_pod_keeps_what_names_a_failing_adapter_and_its_source() -> None:
    env = [{"name": "BUCKET", "value": "loras"}, {"name": "ADAPTER_NAME", "value": "sql"}]
    failed = {"exitCode": 3, "reason": "Error", "message": "adapter sql: NotFound: s3://loras/sql.gguf"}
    pod = {
        "metadata": {"name": "pg-0", "namespace": "ns", "labels": {"leaderworkerset.sigs.k8s.io/name": "pg"}},
        "spec": {
            "initContainers": [{"name": "model-loader-adapter-0", "image": "loader:v1", "env": env, "args": ["-v"]}],
            "containers": [{"name": "model-runner", "image": "engine:v1", "env": env}],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "initContainerStatuses": [{"name": "model-loader-adapter-0", "state": {"terminated": failed}}],
        },
    }
    stripped = strip_pod(pod)

    finding = diagnose_pod(stripped)
    assert finding is not None
    assert finding.adapter == "sql"
    paths = {"sql": "/workspace/models/adapters--sql/sql.gguf"}
    assert list(unusable_adapters([stripped], paths, {"sql": env})) == ["sql"]
    assert "env" not in stripped["spec"]["containers"][0]
    assert "args" not in stripped["spec"]["initContainers"][0]
