"""Resources and minimal manifests for tests against a real API server.

Limits: the manifests are the smallest the API server accepts; nothing schedules or runs their pods (no
kubelet, no controller-manager in envtest), so status only changes when a test writes it.
"""

from __future__ import annotations

from typing import Any

from llmaz.runtime.resource import Resource

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", namespaced=True)


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def deployment(name: str, namespace: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]},
            },
        },
    }


def leaderworkerset(name: str, namespace: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "w", "image": "registry.k8s.io/pause:3.9"}]}},
            },
        },
    }
