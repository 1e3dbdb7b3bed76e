"""Scenario 4, the runtime alone: our runtime with a no-op reconciler (`noop_manager.py`) versus a minimal
controller-runtime no-op controller (`bench/go-noop`), over K ConfigMaps in one namespace.

Phases of one run, on a fresh control plane:
A. start the subject on an empty namespace; the seconds until it serves /count are its start-up time, and
   its RSS then is the baseline.
B. create K ConfigMaps (gen=1) as fast as the driver can: time until all K are reconciled, and the lag
   after the last create was acknowledged.
C. patch all K (gen=2): the same for updates.
D. a fresh subject process with the K objects already there: seconds from process start until all K are
   reconciled (list, cache fill, K reconciles), and the same minus A's start-up time; its RSS then, minus
   A's baseline, over K is the memory per cached object.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path
from typing import Any

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from suite import workload
from suite.cluster import NAMESPACE, BenchCluster
from suite.subjects import Subject, noop, read_count, wait_serving

MB = 1024 * 1024
PAYLOAD = "x" * 256
POLL = 0.05


def config_map(i: int, gen: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:05d}", "namespace": NAMESPACE},
            "data": {"gen": str(gen), "payload": PAYLOAD}}  # fmt: skip


async def wait_count(subject: Subject, url: str, target: int, within: float) -> float:
    """Monotonic time at which the subject's count first reached `target`."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        count = await asyncio.to_thread(read_count, url)
        if count is not None and count >= target:
            return time.monotonic()
        subject.check_running()
        await asyncio.sleep(POLL)
    raise TimeoutError(f"{subject.name}: count did not reach {target} in {within}s")


async def burst(client: Client, subject: Subject, url: str, k: int, gen: int, within: float) -> dict[str, Any]:
    cpu = subject.usage().cpu_seconds
    started = time.monotonic()
    if gen == 1:
        issue, failures = await workload.bounded(partial(client.create, r.CONFIG_MAPS, config_map(i, 1))
                                                 for i in range(k))  # fmt: skip
    else:
        patch = {"data": {"gen": str(gen)}}
        issue, failures = await workload.bounded(
            partial(client.patch, r.CONFIG_MAPS, f"cm-{i:05d}", patch, NAMESPACE) for i in range(k)
        )
    done = await wait_count(subject, url, k * gen, within)
    usage = subject.usage()
    return {"seconds": done - started, "issue_seconds": issue, "lag_seconds": done - started - issue,
            "events_per_second": k / (done - started), "failures": failures,
            "cpu_seconds": usage.cpu_seconds - cpu, "rss_mb": usage.rss_bytes / MB}  # fmt: skip


async def warm_phases(cluster: BenchCluster, subject: Subject, url: str, k: int, within: float) -> dict[str, Any]:
    started = time.monotonic()
    subject.start()
    wait_serving(subject, url)
    startup = time.monotonic() - started
    await asyncio.sleep(1)
    baseline = subject.usage().rss_bytes
    client = await Client.from_kubeconfig(cluster.kubeconfig, qps=0)
    try:
        creates = await burst(client, subject, url, k, 1, within)
        updates = await burst(client, subject, url, k, 2, within)
    finally:
        await client.close()
    return {"startup_seconds": startup, "baseline_rss_mb": baseline / MB, "create": creates, "update": updates}


async def cold_start(subject: Subject, url: str, k: int, within: float) -> dict[str, Any]:
    started = time.monotonic()
    subject.start()
    done = await wait_count(subject, url, k, within)
    usage = subject.usage()
    return {"seconds": done - started, "objects_per_second": k / (done - started),
            "cpu_seconds": usage.cpu_seconds, "rss_mb": usage.rss_bytes / MB,
            "peak_rss_mb": usage.peak_rss_bytes / MB}  # fmt: skip


def run_once(name: str, k: int, go_binary: Path | None, log_dir: Path, timeout: float) -> dict[str, Any]:
    with BenchCluster("plain") as cluster:
        subject, url = noop(name, cluster, log_dir, go_binary)
        try:
            result = asyncio.run(warm_phases(cluster, subject, url, k, timeout))
        finally:
            subject.stop()
        subject, url = noop(name, cluster, log_dir, go_binary)
        try:
            result["cold"] = asyncio.run(cold_start(subject, url, k, timeout))
        finally:
            subject.stop()
        # Start-up with an empty namespace (phase A) is the same work minus the K objects.
        result["cold"]["reconcile_seconds"] = result["cold"]["seconds"] - result["startup_seconds"]
        growth = result["cold"]["rss_mb"] - result["baseline_rss_mb"]
        result["bytes_per_object"] = growth * MB / k
        return result
