"""Scenario 7, memory in a large cluster: our manager's RSS with K unrelated core Services, HPAs and
LeaderWorkerSets in the cluster, against its RSS with none. Python only: the question is whether our manager's
memory depends on objects it did not make (goal: within 10 %).

The manager's informers for core Services, HPAs and LeaderWorkerSets select `app.kubernetes.io/managed-by=llmaz`
(`llmaz.controllers.caches`); the objects here carry no llmaz label, so they should never reach it.

Phases of one run, on one fresh control plane ("python" flavour: our CRDs, config/dev, the LWS CRD; no node,
no LWS controller):
A. start the manager on the empty cluster; once its four controllers have logged "Starting workers" (caches
   synced) and a settle of SETTLE_SECONDS, its RSS and peak RSS are the "none" readings; stop it.
B. create K headless Services (`clusterIP: None`, so the service range is not used up), K HPAs and K
   LeaderWorkerSets in namespace `unrelated`, without llmaz labels (32 requests in flight).
C. start a fresh manager; the same readings with the 3K objects present. The ratio is C / A.
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
from suite.cluster import BenchCluster
from suite.subjects import Subject, manager, start_manager

UNRELATED = "unrelated"
SETTLE_SECONDS = 5.0
MB = 1024 * 1024
_LABELS = {"app.kubernetes.io/name": "someone-else", "app.kubernetes.io/managed-by": "helm"}


def headless_service(i: int) -> dict[str, Any]:
    spec = {"clusterIP": "None", "selector": {"app": f"a-{i}"}, "ports": [{"name": "http", "port": 80}]}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i:05d}", "namespace": UNRELATED, "labels": _LABELS}, "spec": spec}  # fmt: skip


def hpa(i: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"hpa-{i:05d}", "namespace": UNRELATED, "labels": _LABELS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"d-{i}"},
                     "minReplicas": 1, "maxReplicas": 3,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 80}}}]}}  # fmt: skip


def leader_worker_set(i: int) -> dict[str, Any]:
    container = {"name": "worker", "image": "registry.example/worker:v1", "ports": [{"containerPort": 8080}]}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": f"lws-{i:05d}", "namespace": UNRELATED, "labels": _LABELS},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "metadata": {"labels": {"app": f"a-{i}"}}, "spec": {"containers": [container]}}}}}  # fmt: skip


async def create_unrelated(kubeconfig: Path, k: int) -> dict[str, Any]:
    client = await Client.from_kubeconfig(kubeconfig, qps=0)
    try:
        calls = [partial(client.create, resource, build(i))
                 for resource, build in ((r.SERVICES, headless_service), (r.HORIZONTAL_POD_AUTOSCALERS, hpa),
                                         (r.LEADER_WORKER_SETS, leader_worker_set))
                 for i in range(k)]  # fmt: skip
        seconds, failures = await workload.bounded(calls)
    finally:
        await client.close()
    if failures:
        raise RuntimeError(f"{failures} of {3 * k} unrelated objects could not be created")
    return {"create_seconds": seconds, "objects": 3 * k}


def readings(subject: Subject, cluster: BenchCluster) -> dict[str, float]:
    """Start the manager, let it settle once its caches synced, read its memory, stop it."""
    started = time.monotonic()
    start_manager(subject, cluster)
    synced = time.monotonic() - started
    time.sleep(SETTLE_SECONDS)
    usage = subject.usage()
    subject.stop()
    return {"rss_mb": usage.rss_bytes / MB, "peak_rss_mb": usage.peak_rss_bytes / MB, "synced_seconds": synced,
            "cpu_seconds": usage.cpu_seconds}  # fmt: skip


def run_once(k: int, log_dir: Path, mcr: int) -> dict[str, Any]:
    with BenchCluster("python") as cluster:
        subject = manager("python", cluster, log_dir, None, mcr)
        try:
            none = readings(subject, cluster)
            cluster.plane.kubectl("create", "namespace", UNRELATED)
            created = asyncio.run(create_unrelated(cluster.kubeconfig, k))
            unrelated = readings(subject, cluster)
        finally:
            subject.stop()
    return {"k": k, "none": none, "unrelated": unrelated, **created,
            "rss_ratio": unrelated["rss_mb"] / none["rss_mb"],
            "peak_rss_ratio": unrelated["peak_rss_mb"] / none["peak_rss_mb"]}  # fmt: skip
