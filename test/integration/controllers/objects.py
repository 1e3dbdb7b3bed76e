"""Objects and reads shared by the controller integration tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmaz.apis import resources as r
from llmaz.runtime.client import Client, NotFound


def open_model(name: str, **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": name},
        "spec": {
            "familyName": "llama3",
            "source": source or {"modelHub": {"modelID": "meta-llama/Meta-Llama-3-8B"}},
            "inferenceConfig": {
                "flavors": [
                    {"name": "a100", "limits": {"nvidia.com/gpu": 1}},
                    {"name": "a10", "limits": {"nvidia.com/gpu": 2}},
                ]
            },
        },
    }


def playground(namespace: str, name: str, model: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"modelClaim": {"modelName": model}, **spec},
    }


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """type -> (status, reason)."""
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or []}


async def get_or_none(client: Client, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    try:
        return await client.get(resource, name, namespace)
    except NotFound:
        return None


async def set_lws_available(client: Client, namespace: str, name: str, available: bool, replicas: int = 1) -> None:
    """Play the LeaderWorkerSet controller: report the LWS (un)available through its status subresource."""
    lws = await client.get(r.LEADER_WORKER_SETS, name, namespace)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = "True" if available else "False"
    lws["status"] = {
        "replicas": replicas,
        "readyReplicas": replicas if available else 0,
        "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={name},leaderworkerset.sigs.k8s.io/worker-index=0",
        "conditions": [
            {
                "type": "Available",
                "status": state,
                "reason": "AllGroupsReady" if available else "GroupsNotReady",
                "message": "test",
                "lastTransitionTime": now,
            }
        ],
    }
    await client.update_status(r.LEADER_WORKER_SETS, lws)
