"""What our manager writes for one Playground, captured from a converged run, to replay in the limit scenario.

Captured from `pg-00000` after a Python run: the inference Service, the LeaderWorkerSet and the `-lb` Service
(spec and metadata without server-set fields), and the statuses of the Playground and the Service.
`materialize` renames a template for Playground i by replacing the names everywhere (labels, selectors, args).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from suite.cluster import NAMESPACE
from suite.workload import playground_name

SERVER_SET = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
SAMPLE = 0


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_SET}
    # A core Service's allocated ClusterIP would collide on every replay.
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k not in ("clusterIP", "clusterIPs")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta, "spec": spec}


async def capture_templates(client: Client, path: Path) -> None:
    name = playground_name(SAMPLE)
    service = await client.get(r.INFERENCE_SERVICES, name, NAMESPACE)
    templates = {
        "service": _clean(service),
        "service_status": service.get("status") or {},
        "lws": _clean(await client.get(r.LEADER_WORKER_SETS, name, NAMESPACE)),
        "lb_service": _clean(await client.get(r.SERVICES, f"{name}-lb", NAMESPACE)),
        "playground_status": (await client.get(r.PLAYGROUNDS, name, NAMESPACE)).get("status") or {},
    }
    await asyncio.to_thread(_write, path, templates)


def _write(path: Path, templates: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(templates, indent=1))


def load_templates(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def materialize(template: Any, i: int) -> Any:
    text = orjson.dumps(template).decode()
    text = text.replace(playground_name(SAMPLE), playground_name(i)).replace(f"bench-model-{SAMPLE:05d}",
                                                                           f"bench-model-{i:05d}")  # fmt: skip
    return orjson.loads(text)
