"""The autoscaler's leader is killed mid-staircase: the other gateway replica takes the Lease, starts from the
Playground's current count and resumes, with no replica change of its own at the same load.

Two gateway processes with the autoscaler on, one fake llama.cpp engine whose metrics page reports the load the test
sets (running requests, none waiting), behind the Playground's `-lb` EndpointSlice. The staircase: load 2 (1
replica at a target of 2 per replica), then 6 (the panic window raises the count to 3), then the leader is killed
with SIGKILL (no Lease release: the follower waits for it to expire), then, once the new leader has decided at load 6
for a whole stable window, load 0 (the count falls one step at a time to minReplicas after the scale-down delay).
The Playground's count is sampled throughout; the replica changes are counted and printed as a timeline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from aiohttp import web

from llmaz.gateway.scaling.autoscaler import LEASE_NAME
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .conftest import ENGINE_ADDRESS, GatewayProcess, loopback_server, running_gateway

WAIT = 60.0
INTERVAL = "0.5"
TARGET = 2
STABLE_WINDOW = 8.0
POLICY = {
    "minReplicas": 1,
    "maxReplicas": 4,
    "scaleTrigger": {
        "requests": {
            "targetPerReplica": TARGET,
            "stableWindow": f"{STABLE_WINDOW:g}s",
            "panicWindow": "2s",
            "scaleDownDelay": "6s",
        }
    },
}


@dataclass
class LoadedEngine:
    """A llama.cpp engine as the autoscaler sees it: a metrics page with `running` requests and none waiting."""

    running: int = 0
    port: int = 0

    async def metrics(self, _: web.Request) -> web.Response:
        page = f"llamacpp:requests_processing {self.running}\nllamacpp:requests_deferred 0\n"
        return web.Response(text=page, content_type="text/plain")


@pytest_asyncio.fixture
async def loaded_engine() -> AsyncIterator[LoadedEngine]:
    engine = LoadedEngine()
    app = web.Application()
    app.router.add_get("/metrics", engine.metrics)
    async with loopback_server(app) as engine.port:
        yield engine


@dataclass
class Timeline:
    """The Playground's replica count, sampled, with the test's own marks."""

    start: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, int]] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.start

    def mark(self, what: str) -> float:
        at = self.now()
        self.marks.append((at, what))
        return at

    def changes(self) -> list[tuple[float, int]]:
        """The first sample of each run of equal counts: when the count became what it was."""
        return [next(run) for _, run in groupby(self.samples, key=lambda sample: sample[1])]

    def render(self) -> str:
        rows = [(at, f"replicas {count}") for at, count in self.changes()] + self.marks
        return "\n".join(f"{at:7.1f} s  {what}" for at, what in sorted(rows))


def _objects(namespace: str, engine_port: int) -> tuple[tuple[str, dict[str, Any]], ...]:
    model = f"gw-failover-{namespace}"
    open_model = {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": model},
        "spec": {"familyName": "tiny", "source": {"modelHub": {"modelID": "x/tiny"}}},
    }
    playground = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "pg", "namespace": namespace},
        "spec": {"replicas": 1, "modelClaim": {"modelName": model}, "elasticConfig": POLICY},
    }
    labels = {"kubernetes.io/service-name": "pg-lb", "app.kubernetes.io/managed-by": "llmaz"}
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "pg-lb-abcde", "namespace": namespace, "labels": labels},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": engine_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ENGINE_ADDRESS], "conditions": {"ready": True, "serving": True}}],
    }
    return (
        ("/apis/llmaz.io/v1alpha1/openmodels", open_model),
        (f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds", playground),
        (f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", endpoint_slice),
    )


async def _gauge(
    gateway: GatewayProcess, session: aiohttp.ClientSession, playground: str, name: str = "desired_replicas"
) -> float | None:
    """This gateway's autoscaler gauge `llmaz_gateway_autoscaler_<name>` for `playground` (by default the replicas
    it last decided); None unless it is deciding (leading)."""
    if gateway.process.exit_code() is not None:
        return None
    async with session.get(gateway.metrics + "/metrics") as resp:
        page = await resp.text()
    prefix = f'llmaz_gateway_autoscaler_{name}{{playground="{playground}"}} '
    return next((float(line[len(prefix) :]) for line in page.splitlines() if line.startswith(prefix)), None)


async def test_a_new_leader_resumes_from_the_current_count_without_flapping(
    control_plane: Cluster,
    namespace: str,
    gateway_kubeconfig: Path,
    loaded_engine: LoadedEngine,
    tmp_path: Path,
) -> None:
    admin = control_plane.admin_client()
    objects = _objects(namespace, loaded_engine.port)
    for collection, obj in objects:
        admin.request("POST", collection, obj)
    playground_path = f"{objects[1][0]}/pg"
    key = f"{namespace}/pg"
    timeline = Timeline()

    def replicas() -> int:
        return int(admin.request("GET", playground_path)["spec"]["replicas"])

    async def sample(stop: asyncio.Event) -> None:
        while not stop.is_set():
            timeline.samples.append((timeline.now(), await asyncio.to_thread(replicas)))
            await asyncio.wait([asyncio.ensure_future(stop.wait())], timeout=0.2)

    args = (f"--autoscaler-interval={INTERVAL}",)
    stop_sampling = asyncio.Event()
    try:
        async with (
            running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway-a.log", args) as first,
            running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway-b.log", args) as second,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        ):
            sampler = asyncio.ensure_future(sample(stop_sampling))
            loaded_engine.running = 2
            timeline.mark("load 2")

            async def deciding(want: float, load: float) -> GatewayProcess | None:
                for gateway in (first, second):
                    decided = await _gauge(gateway, session, key)
                    if decided == want and await _gauge(gateway, session, key, "load") == load:
                        return gateway
                return None

            leader = await eventually(lambda: deciding(1, 2), within=WAIT, what="one replica deciding 1 at load 2")
            follower = second if leader is first else first
            assert await _gauge(follower, session, key) is None, "both replicas decide"
            assert replicas() == 1

            loaded_engine.running = 6
            timeline.mark("load 6")
            await eventually(lambda: replicas() == 3, within=WAIT, what="3 replicas at load 6")
            os.killpg(leader.process.pid, signal.SIGKILL)
            killed_at = timeline.mark("leader killed (SIGKILL)")

            def lease_holder() -> str | None:
                lease = admin.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE_NAME}")
                holder = lease["spec"].get("holderIdentity")
                return holder if isinstance(holder, str) else None

            held_before = lease_holder()
            await eventually(lambda: lease_holder() != held_before, within=WAIT, what="the Lease taken over")
            timeline.mark("Lease taken by the other replica")
            await eventually(lambda: deciding(3, 6), within=WAIT, what="the new leader deciding 3 at load 6")
            resumed_at = timeline.mark("new leader decides 3")

            # The new leader keeps deciding at load 6 for a whole stable window: its decisions are sampled, and
            # every one must keep the count.
            decisions: list[float | None] = []
            while timeline.now() - resumed_at < STABLE_WINDOW:
                decisions.append(await _gauge(follower, session, key))
                await asyncio.wait([asyncio.ensure_future(stop_sampling.wait())], timeout=0.5)
            assert set(decisions) == {3.0}, f"the new leader changed its decision at a steady load: {decisions}"

            loaded_engine.running = 0
            load_stopped_at = timeline.mark("load 0")
            await eventually(lambda: replicas() == 1, within=WAIT, what="back to minReplicas 1 at load 0")
            timeline.mark("back to 1")
            stop_sampling.set()
            await sampler
            timeline.samples.append((timeline.now(), replicas()))
    finally:
        stop_sampling.set()
        print(f"\nautoscaler failover timeline:\n{timeline.render()}")

    counts = [count for _, count in timeline.changes()]
    peak = counts.index(3)
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), f"not a rise to the peak: {counts}"
    assert counts[peak:] == [3, 2, 1], f"not one step at a time down from the peak: {counts}"
    between = [count for at, count in timeline.samples if killed_at <= at < load_stopped_at]
    assert set(between) == {3}, f"the count changed between the kill and the load stopping: {between}"
    events = admin.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    down = [e for e in events if e.get("reason") == "ScaledDown" and e["regarding"]["name"] == "pg"]
    assert len(down) == 2, [e["note"] for e in down]
