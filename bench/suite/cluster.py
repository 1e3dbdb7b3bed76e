"""A fresh local control plane per run, set up for one subject's API flavour, and its request counters.

Flavours: "python" (our CRDs, the default BackendRuntimes and the global ConfigMap, as `make dev-up`),
"go" (the Go llmaz module's own CRDs and `bench/manifests/llmaz-go/setup.yaml`), and "plain" (only the
built-in kinds and the LWS CRD). Every flavour gets the namespace `bench` for the workload.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from types import TracebackType

from llmaz.envtest import ControlPlane, control_plane
from suite import procstat
from suite.settings import BENCH_DIR, REPO

NAMESPACE = "bench"
_REQUEST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# Written by the API server itself, not by any client: ClusterIP allocations, and its identity Lease (renewed
# every 10 s; neither manager runs leader election here).
SERVER_OWN_RESOURCES = frozenset({"ipaddresses", "leases"})
# Each Playground's `-lb` Service takes a ClusterIP; envtest's default /24 holds only 254 of them.
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"


class BenchCluster:
    def __init__(self, flavour: str, go_crds: Path | None = None) -> None:
        crds = {"python": [REPO / "config" / "crd" / "bases"], "go": [go_crds] if go_crds else [], "plain": []}
        self.flavour = flavour
        self.plane = ControlPlane(crd_paths=[p for p in crds[flavour] if p is not None], start_timeout=120)

    def __enter__(self) -> BenchCluster:
        control_plane._SERVICE_CLUSTER_IP_RANGE = SERVICE_CLUSTER_IP_RANGE
        self.plane.start()
        try:
            self._setup()
        except BaseException:
            self.plane.stop()
            raise
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.plane.stop()

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def pids(self) -> list[int]:
        """kube-apiserver and etcd."""
        return [p["pid"] for p in self.plane.state()["processes"]]

    def control_plane_cpu(self) -> float:
        return procstat.cpu_of(self.pids)

    def request_counts(self) -> Counter[tuple[str, str]]:
        """apiserver_request_total for resource requests (not /metrics, /readyz ...), summed by verb and
        resource ("services", "playgrounds.inference.llmaz.io/status", ...), without SERVER_OWN_RESOURCES."""
        counts: Counter[tuple[str, str]] = Counter()
        for match in _REQUEST_LINE.finditer(self.plane.admin_client().get_text("/metrics", timeout=30)):
            labels = dict(_LABEL.findall(match["labels"]))
            if labels.get("resource") and labels["resource"] not in SERVER_OWN_RESOURCES:
                resource = labels["resource"] + (f".{labels['group']}" if labels.get("group") else "")
                resource += f"/{labels['subresource']}" if labels.get("subresource") else ""
                counts[labels.get("verb", "?"), resource] += int(float(match["value"]))
        return counts

    def _setup(self) -> None:
        if self.flavour == "python":
            self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "config" / "dev"))
        elif self.flavour == "go":
            self.plane.kubectl("apply", "--server-side", "-f", str(BENCH_DIR / "manifests" / "llmaz-go"))
        self.plane.kubectl("create", "namespace", NAMESPACE)
