"""Scenario 9, growth: what one Playground costs as N grows (100, 1,000, 10,000), and a cold start over N.

One run per size, on a fresh control plane:
1. start the manager on an empty cluster; its RSS once its workers run is the start-up baseline;
2. converge and available, exactly as scenario 1 (`controllers_bench.measure`);
3. cold start: stop the manager and start a new one over the N converged Playgrounds. Done when every
   Playground, inference Service and OpenModel has been reconciled once (`controller_runtime_reconcile_total`)
   and every work queue is empty; then, after a settle for Events the recorder may still send, the manager's
   writes since its start. Everything was converged, so the goal is zero.

Per object: wall, manager CPU, API requests and writes divided by N; memory is (peak RSS - start-up RSS) / N.
The Go manager runs phases 1-2 when BENCH_GROWTH_SUBJECTS names it; it serves no metrics here, so no cold start.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from suite.cluster import BenchCluster
from suite.controllers_bench import MB, SETTLE_SECONDS, measure
from suite.requests import Snapshot, total_writes
from suite.settings import Settings
from suite.subjects import Samples, Subject, manager, metric_samples, start_manager

# The controllers that own one reconcile per object of the workload (BackendRuntime has a single object).
PER_OBJECT_CONTROLLERS = ("playground", "service", "openmodel")
POLL = 0.2


def reconciled(samples: Samples) -> dict[str, float]:
    """Reconciles so far per controller, whatever their result."""
    totals: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == "controller_runtime_reconcile_total":
            controller = dict(labels)["controller"]
            totals[controller] = totals.get(controller, 0.0) + value
    return totals


def queued(samples: Samples) -> float:
    """Keys waiting in every work queue."""
    return sum(v for (name, _), v in samples.items() if name == "workqueue_depth")


async def cold_start(subject: Subject, cluster: BenchCluster, n: int, within: float) -> dict[str, Any]:
    before = Snapshot.take(cluster)
    started = time.monotonic()
    subject.start()
    deadline = started + within
    while True:
        subject.check_running()
        samples = await asyncio.to_thread(metric_samples, subject)
        if samples is not None:
            totals = reconciled(samples)
            if all(totals.get(c, 0) >= n for c in PER_OBJECT_CONTROLLERS) and queued(samples) == 0:
                break
        if time.monotonic() > deadline:
            raise TimeoutError(f"cold start over {n} Playgrounds not reconciled in {within:.0f}s")
        await asyncio.sleep(POLL)
    seconds = time.monotonic() - started
    usage = subject.usage()
    await asyncio.sleep(SETTLE_SECONDS)
    after = Snapshot.take(cluster)
    requests = after.subject_requests_since(before)
    return {
        "seconds": seconds,
        "cpu_seconds": usage.cpu_seconds,
        "rss_mb": usage.rss_bytes / MB,
        "peak_rss_mb": usage.peak_rss_bytes / MB,
        "reconciles": totals,
        "requests": requests,
        "writes": total_writes(requests),
        "writes_by_resource": after.writes_by_resource_since(before),
    }


def per_object(result: dict[str, Any], n: int) -> dict[str, float]:
    phases = (result["converge"], result["available"])
    return {
        "wall_ms": 1000 * sum(p["seconds"] for p in phases) / n,
        "cpu_ms": 1000 * sum(p["cpu_seconds"] for p in phases) / n,
        "requests": sum(sum(p["requests"].values()) for p in phases) / n,
        "writes": sum(p["writes"] for p in phases) / n,
        "rss_kb": 1024 * (result["available"]["peak_rss_mb"] - result["startup_rss_mb"]) / n,
    }


def run_once(settings: Settings, name: str, n: int, go_binary: Path | None, go_crds: Path | None,
             log_dir: Path) -> dict[str, Any]:  # fmt: skip
    # Phases grow with N; the per-phase timeout is for N = 1,000.
    within = settings.timeout * max(1.0, n / 1000)
    with BenchCluster(name, go_crds) as cluster:
        subject = manager(
            name, cluster, log_dir, go_binary, settings.max_concurrent_reconciles, extra_args=settings.manager_args
        )
        try:
            start_manager(subject, cluster)
            startup_rss = subject.usage().rss_bytes / MB
            result = asyncio.run(measure(settings, subject, cluster, n, full=False, within=within))
        finally:
            subject.stop()
        result.pop("timelines", None)
        result["startup_rss_mb"] = startup_rss
        result["per_object"] = per_object(result, n)
        if name == "python":
            restarted = manager(
                name, cluster, log_dir, go_binary, settings.max_concurrent_reconciles, extra_args=settings.manager_args
            )
            try:
                result["cold"] = asyncio.run(cold_start(restarted, cluster, n, within))
            finally:
                restarted.stop()
            result["cold"]["rss_kb_per_object"] = 1024 * (result["cold"]["rss_mb"] - startup_rss) / n
        return result
