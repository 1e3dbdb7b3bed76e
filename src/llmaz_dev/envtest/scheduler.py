"""A second kube-scheduler, with one profile that calls a scheduler extender (llmaz's, `llmaz.schedext`).

It is the kube-scheduler of the simulated cluster's binaries (`make e2e-bins`), started as a local process against
any test cluster with its admin kubeconfig, without leader election, serving its health port on loopback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml

from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.envtest.simulated._assets import find_simulated_assets


@contextlib.contextmanager
def kube_scheduler_with_extender(
    cluster: Cluster, scheduler_name: str, extender_url: str, work_dir: Path, weight: int = 5
) -> Iterator[ManagedProcess]:
    """kube-scheduler serving pods that name `scheduler_name`, asking the extender at `extender_url` to filter
    and prioritize (`nodeCacheCapable: true`, not ignorable: a pod it cannot ask is not scheduled), until the
    block ends. Its log is `work_dir/kube-scheduler.log`."""
    work_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(cluster.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": weight,
                "nodeCacheCapable": True,
                "ignorable": False,
                "enableHTTPS": False,
            }
        ],
    }
    config_path = work_dir / "kube-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(config))
    (port,) = free_loopback_ports(1)
    argv = [
        str(find_simulated_assets().kube_scheduler),
        f"--config={config_path}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={work_dir / 'certs'}",
    ]
    process = ManagedProcess(f"kube-scheduler-{scheduler_name}", argv, work_dir / "kube-scheduler.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()
