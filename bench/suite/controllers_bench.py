"""Scenarios 1-3 on one fresh control plane per run: convergence, then (at the largest size) steady state and
churn, for each manager subject, alternating subjects between repetitions.

Phases of one run (all times are the driver's wall clock, CPU and memory are the subject process's):
1. converge: create N OpenModels and Playgrounds at once; done when N inference Services and N LWS exist and
   N Playgrounds have a `Progressing` condition.
2. available: mark every LWS Available through its status subresource; done when N Playgrounds are
   `Available=True`.
3. steady (largest size only): nothing changes for BENCH_STEADY_SECONDS after a short settle; count the
   subject's API requests and CPU.
4. churn (largest size only): change one env var on every Playground at once; done when every LWS worker
   template carries the new value.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from llmaz.runtime.client import Client
from suite import flamegraph, workload
from suite.cluster import BenchCluster
from suite.requests import Snapshot, total_writes
from suite.settings import Settings
from suite.subjects import Subject, full_gc_pauses, manager, start_manager
from suite.templates import capture_templates
from suite.tracker import Tracker

SETTLE_SECONDS = 5.0
MB = 1024 * 1024


class Probe:
    """Before/after readings of one phase: subject CPU and memory, control-plane CPU, API requests."""

    def __init__(self, subject: Subject, cluster: BenchCluster) -> None:
        self.subject, self.cluster = subject, cluster
        self.cpu, self.plane_cpu = subject.usage().cpu_seconds, cluster.control_plane_cpu()
        self.requests, self.started = Snapshot.take(cluster), time.monotonic()

    def finish(self, **extra: Any) -> dict[str, Any]:
        usage = self.subject.usage()
        snapshot = Snapshot.take(self.cluster)
        requests = snapshot.subject_requests_since(self.requests)
        return {
            "seconds": time.monotonic() - self.started,
            "cpu_seconds": usage.cpu_seconds - self.cpu,
            "control_plane_cpu_seconds": self.cluster.control_plane_cpu() - self.plane_cpu,
            "peak_rss_mb": usage.peak_rss_bytes / MB,
            "rss_mb": usage.rss_bytes / MB,
            "requests": requests,
            "writes": total_writes(requests),
            "writes_by_resource": snapshot.writes_by_resource_since(self.requests),
            **extra,
        }


async def phase(
    subject: Subject, cluster: BenchCluster, act: Callable[[], Awaitable[tuple[float, int]]],
    tracker: Tracker, done: Callable[[Any], bool], within: float,
) -> dict[str, Any]:  # fmt: skip
    probe = Probe(subject, cluster)
    issue_seconds, failures = await act()
    await tracker.wait_until(done, within)
    return probe.finish(issue_seconds=issue_seconds, failures=failures)


async def measure(
    settings: Settings, subject: Subject, cluster: BenchCluster, n: int, full: bool, within: float | None = None
) -> dict[str, Any]:
    client = await Client.from_kubeconfig(cluster.kubeconfig, qps=0)
    tracker = Tracker(client)
    try:
        await tracker.start()
        tracker.mark()
        t = within or settings.timeout
        result: dict[str, Any] = {}
        with profiled(subject, settings.results_dir / f"profile-converge-{subject.name}-{n}.txt"):
            result["converge"] = await phase(
                subject, cluster, lambda: workload.create_playgrounds(client, n, cluster.legacy_api), tracker,
                lambda c: min(c["services"], c["lws"], c["playground_progressing"]) >= n, t)  # fmt: skip
            names = [workload.playground_name(i) for i in range(n)]
            result["available"] = await phase(
                subject, cluster, lambda: workload.mark_lws_available(client, names), tracker,
                lambda c: c["playground_available"] >= n, t)  # fmt: skip
        result["timelines"] = tracker.timelines
        if subject.name == "python":
            await capture_templates(client, settings.results_dir / "templates.json")
        if full:
            result.update(await steady_and_churn(settings, subject, cluster, client, tracker, n))
        return result
    finally:
        await tracker.stop()
        await client.close()


async def steady_and_churn(
    settings: Settings, subject: Subject, cluster: BenchCluster, client: Client, tracker: Tracker, n: int
) -> dict[str, Any]:
    await asyncio.sleep(SETTLE_SECONDS)
    probe = Probe(subject, cluster)
    await asyncio.sleep(settings.steady_seconds)
    steady = probe.finish()
    steady["cpu_percent_of_core"] = 100 * steady["cpu_seconds"] / steady["seconds"]
    with profiled(subject, settings.results_dir / f"profile-churn-{subject.name}-{n}.txt"):
        churn = await phase(
            subject, cluster, lambda: workload.bump_envs(client, n, 2), tracker,
            lambda c: c["lws_round:2"] >= n, settings.timeout)  # fmt: skip
    return {"steady": steady, "churn": churn}


@contextlib.contextmanager
def profiled(subject: Subject, out: Path) -> Iterator[None]:
    """With BENCH_PROFILE=1, py-spy samples our manager for the duration: raw collapsed stacks in `out`, and
    their flame graph beside it (`.png`)."""
    if os.environ.get("BENCH_PROFILE") != "1" or subject.name != "python":
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(subject.process.pid), "--format", "raw", "--rate", "100",
            "--nonblocking", "-o", str(out)]  # fmt: skip
    recorder = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)
        if out.exists():
            flamegraph.render(out, out.with_suffix(".png"), f"{subject.name} manager, {out.stem}")


def run_once(settings: Settings, name: str, n: int, full: bool, go_binary: Path | None, go_crds: Path | None,
             log_dir: Path) -> dict[str, Any]:  # fmt: skip
    with BenchCluster(name, go_crds) as cluster:
        subject = manager(
            name, cluster, log_dir, go_binary, settings.max_concurrent_reconciles, extra_args=settings.manager_args
        )
        try:
            start_manager(subject, cluster)
            result = asyncio.run(measure(settings, subject, cluster, n, full))
            result["final_peak_rss_mb"] = subject.usage().peak_rss_bytes / MB
            gc_pauses = full_gc_pauses(subject)
            if gc_pauses is not None:
                result["gc"] = gc_pauses
            return result
        finally:
            subject.stop()
