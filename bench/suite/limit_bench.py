"""Scenario 6, the physical ceiling: a raw client replays, as fast as the API server accepts them, the writes a
converging Playground costs, with no controller running.

Per Playground, in dependency order: create OpenModel, Playground, inference Service, LeaderWorkerSet and
`-lb` Service; then patch the statuses of the Playground, the Service and the LWS. That is 8 writes, the
minimum any controller (plus the LWS controller) needs. BENCH_LIMIT_CONCURRENCY chains run at once
(default 64). The objects are what our manager wrote in a Python run (`templates`); without a captured
template the scenario is skipped.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from suite import workload
from suite.cluster import NAMESPACE, BenchCluster
from suite.templates import materialize

WRITES_PER_PLAYGROUND = 8


def chain(client: Client, templates: dict[str, Any], i: int) -> Callable[[], Awaitable[None]]:
    name = workload.playground_name(i)

    async def run() -> None:
        await client.create(r.OPEN_MODELS, workload.open_model(i))
        await client.create(r.PLAYGROUNDS, workload.playground(i))
        await client.create(r.INFERENCE_SERVICES, materialize(templates["service"], i))
        await client.create(r.LEADER_WORKER_SETS, materialize(templates["lws"], i))
        await client.create(r.SERVICES, materialize(templates["lb_service"], i))
        for resource, status in (
            (r.PLAYGROUNDS, templates["playground_status"]),
            (r.INFERENCE_SERVICES, templates["service_status"]),
        ):
            await client.patch(resource, name, {"status": materialize(status, i)}, NAMESPACE, subresource="status")
        await client.patch(r.LEADER_WORKER_SETS, name, workload.lws_available_patch(name), NAMESPACE,
                           subresource="status")  # fmt: skip

    return run


async def blast(cluster: BenchCluster, templates: dict[str, Any], n: int, concurrency: int) -> dict[str, Any]:
    client = await Client.from_kubeconfig(cluster.kubeconfig, qps=0)
    try:
        plane_cpu, driver_cpu = cluster.control_plane_cpu(), time.process_time()
        seconds, failures = await workload.bounded((chain(client, templates, i) for i in range(n)), concurrency)
        return {
            "seconds": seconds,
            "failures": failures,
            "writes": n * WRITES_PER_PLAYGROUND,
            "writes_per_second": n * WRITES_PER_PLAYGROUND / seconds,
            "control_plane_cpu_seconds": cluster.control_plane_cpu() - plane_cpu,
            "driver_cpu_seconds": time.process_time() - driver_cpu,
            "concurrency": concurrency,
        }
    finally:
        await client.close()


def run_once(templates: dict[str, Any], n: int) -> dict[str, Any]:
    concurrency = int(os.environ.get("BENCH_LIMIT_CONCURRENCY", "64"))
    with BenchCluster("python") as cluster:
        return asyncio.run(blast(cluster, templates, n, concurrency))
