"""The objects a controller run creates and changes, in both API flavours, and bounded-concurrency bulk calls.

Playground i claims OpenModel `bench-model-<i>` (one model per Playground, cluster-scoped) and the `vllm`
BackendRuntime, which the cluster setup installs. Each Playground carries the env var `BENCH_ROUND`; the
churn phase bumps it, and the LeaderWorkerSets converge once their templates carry the new value.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from suite.cluster import NAMESPACE

MARK_ENV = "BENCH_ROUND"
CONCURRENCY = 32
T = TypeVar("T")


def playground_name(i: int) -> str:
    return f"pg-{i:05d}"


def open_model(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": f"bench-model-{i:05d}"},
        "spec": {"familyName": "qwen2", "source": {"modelHub": {"modelID": f"Qwen/Qwen2-0.5B-Instruct-{i}"}}},
    }


def playground(i: int, round_: int = 1, legacy_api: bool = False) -> dict[str, Any]:
    # v0.1.0 names the backend `name`; later versions (and ours) `backendName`.
    backend_field = "name" if legacy_api else "backendName"
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": playground_name(i), "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "modelClaim": {"modelName": f"bench-model-{i:05d}"},
            "backendRuntimeConfig": {backend_field: "vllm", "envs": [{"name": MARK_ENV, "value": str(round_)}]},
        },
    }


def envs_patch(round_: int) -> dict[str, Any]:
    return {"spec": {"backendRuntimeConfig": {"envs": [{"name": MARK_ENV, "value": str(round_)}]}}}


def lws_available_patch(name: str) -> dict[str, Any]:
    """Play the LWS controller: one ready replica and `Available=True`, through the status subresource."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Available", "status": "True", "reason": "AllGroupsReady", "message": "bench",
                 "lastTransitionTime": now}  # fmt: skip
    selector = f"leaderworkerset.sigs.k8s.io/name={name},leaderworkerset.sigs.k8s.io/worker-index=0"
    return {"status": {"replicas": 1, "readyReplicas": 1, "conditions": [condition], "hpaPodSelector": selector}}


async def bounded(calls: Iterable[Callable[[], Awaitable[T]]], concurrency: int = CONCURRENCY) -> tuple[float, int]:
    """Run the calls with at most `concurrency` in flight; (seconds taken, failures)."""
    gate = asyncio.Semaphore(concurrency)
    failures = 0

    async def one(call: Callable[[], Awaitable[T]]) -> None:
        nonlocal failures
        async with gate:
            try:
                await call()
            except Exception:
                failures += 1

    started = time.monotonic()
    await asyncio.gather(*(one(c) for c in calls))
    return time.monotonic() - started, failures


async def create_playgrounds(client: Client, count: int, legacy_api: bool = False) -> tuple[float, int]:
    """Each Playground's OpenModel right before it, all at once."""

    def pair(i: int) -> Callable[[], Awaitable[None]]:
        async def create() -> None:
            await client.create(r.OPEN_MODELS, open_model(i))
            await client.create(r.PLAYGROUNDS, playground(i, legacy_api=legacy_api))

        return create

    return await bounded(pair(i) for i in range(count))


async def mark_lws_available(client: Client, names: Iterable[str]) -> tuple[float, int]:
    patches = (partial(client.patch, r.LEADER_WORKER_SETS, n, lws_available_patch(n), NAMESPACE, subresource="status")
               for n in names)  # fmt: skip
    return await bounded(patches)


async def bump_envs(client: Client, count: int, round_: int) -> tuple[float, int]:
    return await bounded(partial(client.patch, r.PLAYGROUNDS, playground_name(i), envs_patch(round_), NAMESPACE)
                         for i in range(count))  # fmt: skip
