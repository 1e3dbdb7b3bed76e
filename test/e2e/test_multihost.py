"""A model served across two pods per replica (leader + worker): groups, and traffic to leaders only."""

from __future__ import annotations

from typing import Any

from .support import (
    GROUP_INDEX_LABEL,
    WORKER_INDEX_LABEL,
    Environment,
    ModelNames,
    conditions,
    eventually,
    open_model,
)


def _template(role: str) -> dict[str, Any]:
    container = {
        "name": "model-runner",
        "image": "lmsysorg/sglang:v0.5.19",
        "command": ["sh", "-c", f"python3 -m sglang.launch_server --role {role}"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
    }
    return {"spec": {"containers": [container]}}


def multi_host_service(name: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "modelClaims": {"models": [{"name": model}]},
            "replicas": 2,
            "workloadTemplate": {
                "size": 2,
                "leaderTemplate": _template("leader"),
                "workerTemplate": _template("worker"),
            },
        },
    }


def test_a_size_two_service_runs_two_pods_per_group_and_its_lb_service_reaches_only_leaders(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("llama")
    e2e.apply([open_model(model, family="llama3", model_id="meta-llama/Llama-3.1-405B")], namespace)

    e2e.apply([multi_host_service("big", model)], namespace)

    eventually(
        lambda: (
            conditions(e2e.get("services.inference", "big", namespace)).get("Available") == ("True", "ServiceReady")
        ),
        what="Service Available",
    )
    pods = eventually(lambda: len(e2e.ready_pods_of(namespace, "big")) == 4 and e2e.ready_pods_of(namespace, "big"))
    groups: dict[str, list[str]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        groups.setdefault(labels[GROUP_INDEX_LABEL], []).append(labels[WORKER_INDEX_LABEL])
    assert {group: sorted(workers) for group, workers in groups.items()} == {"0": ["0", "1"], "1": ["0", "1"]}

    leader_ips = {p["status"]["podIP"] for p in pods if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"}
    assert len(leader_ips) == 2

    def lb_endpoints() -> set[str]:
        slices = e2e.items("endpointslices", namespace, "kubernetes.io/service-name=big-lb")
        found = {address for s in slices for e in s.get("endpoints") or [] for address in e["addresses"]}
        assert found == leader_ips, (found, leader_ips)
        return found

    eventually(lb_endpoints, what="big-lb EndpointSlices listing exactly the leaders")
