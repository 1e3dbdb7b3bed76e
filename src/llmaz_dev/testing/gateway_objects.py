"""The cluster objects llmaz-gateway reads, as the API server would hold them: for tests and the stand-in gateway."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
NAMESPACE = "ns"


def open_model(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": name, "creationTimestamp": "2024-05-01T00:00:00Z"},
        "spec": {"familyName": "llama3", "source": {"modelHub": {"modelID": "x/y"}}, **spec},
    }


def _metadata(name: str, namespace: str, created: str | None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = created
    return meta


def playground(name: str, model: str, namespace: str = NAMESPACE, created: str | None = None) -> Obj:
    """A Playground serving `model`; `created` is its creationTimestamp (none: tenancy counts it as the newest)."""
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": _metadata(name, namespace, created),
        "spec": {"modelClaim": {"modelName": model}},
    }


def inference_service(name: str, *models: str, namespace: str = NAMESPACE, created: str | None = None) -> Obj:
    """An inference Service claiming `models`: the first is the main one, any other a draft (as admission requires)."""
    claims = [{"name": m} if i == 0 else {"name": m, "role": "draft"} for i, m in enumerate(models)]
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, created),
        "spec": {"modelClaims": {"models": claims}, "workloadTemplate": {}},
    }


def endpoint_slice(
    name: str,
    service: str,
    port: int,
    *endpoints: tuple[str, bool | None, bool | None],
    namespace: str = NAMESPACE,
    port_name: str = "http",
) -> Obj:
    """A slice of `service`: each endpoint is (address, ready, terminating); None leaves a condition unset.

    The slice of a `-lb` Service carries `app.kubernetes.io/managed-by: llmaz`, as the EndpointSlice controller copies
    it from the Service the manager made."""

    def conditions(ready: bool | None, terminating: bool | None) -> Obj:
        found: Obj = {}
        if ready is not None:
            found["ready"] = ready
        if terminating is not None:
            found["terminating"] = terminating
        return found

    labels = {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "x"}
    if service.endswith("-lb"):
        labels["app.kubernetes.io/managed-by"] = "llmaz"
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [address], "conditions": conditions(ready, terminating), "nodeName": "n"}
            for address, ready, terminating in endpoints
        ],
    }


def lb_service(
    playground_name: str,
    *ports: tuple[str, int],
    namespace: str = NAMESPACE,
    ip_families: tuple[str, ...] = ("IPv4",),
) -> Obj:
    """The core Service `<playground>-lb` the manager makes: by default one TCP port `http` 8080."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{playground_name}-lb",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "llmaz"},
        },
        "spec": {
            "ports": [
                {"name": name, "port": port, "protocol": "TCP", "targetPort": port}
                for name, port in (ports or (("http", 8080),))
            ],
            "selector": {"leaderworkerset.sigs.k8s.io/name": playground_name},
            "ipFamilies": list(ip_families),
        },
    }
