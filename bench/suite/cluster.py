"""A fresh local control plane per run, set up for one subject's API flavour, and its request counters.

Flavours: "python" (our CRDs, the default BackendRuntimes and the global ConfigMap, as `make dev-up`),
"go" (the Go llmaz module's own CRDs, `bench/manifests/llmaz-go/common.yaml` and the vllm BackendRuntime in
that version's API shape, read from its CRDs' schema: `args` or `recommendedConfigs`, `commands` or `command`),
and "plain" (only the built-in kinds and the LWS CRD). Every flavour gets the namespace `bench` for the workload.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import yaml

from llmaz_dev.envtest import ControlPlane
from suite import procstat
from suite.settings import BENCH_DIR, REPO

NAMESPACE = "bench"
_REQUEST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# Written by the API server itself, not by any client: ClusterIP allocations, and its identity Lease (renewed
# every 10 s; neither manager runs leader election here).
SERVER_OWN_RESOURCES = frozenset({"ipaddresses", "leases"})


def legacy_backend_api(crd_dir: Path) -> bool:
    """Whether these llmaz CRDs have the v0.1.0 API: BackendRuntime `args`/`resources` instead of
    `recommendedConfigs`, and the Playground's backend named by `backendRuntimeConfig.name`, not `backendName`."""
    return "recommendedConfigs:" not in (crd_dir / "inference.llmaz.io_backendruntimes.yaml").read_text()


def backend_command_field(crd_dir: Path) -> str:
    """The BackendRuntime field for the engine's command in these CRDs' schema: `commands` up to v0.1.3,
    `command` from v0.1.4 on."""
    crd = yaml.safe_load((crd_dir / "inference.llmaz.io_backendruntimes.yaml").read_text())
    fields = {
        name
        for version in crd["spec"]["versions"]
        for name in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    }
    if "command" in fields and "commands" not in fields:
        return "command"
    if "commands" in fields:
        return "commands"
    raise ValueError(f"{crd_dir}: the BackendRuntime schema has neither `command` nor `commands`")


def backend_manifest(template: Mapping[str, object], command_field: str) -> dict[str, object]:
    """The bench's vllm BackendRuntime (written with `commands`) with its command under `command_field`."""
    spec = dict(template["spec"])  # type: ignore[call-overload]
    spec[command_field] = spec.pop("commands")
    return {**template, "spec": spec}


class BenchCluster:
    def __init__(self, flavour: str, go_crds: Path | None = None) -> None:
        crds = {"python": [REPO / "config" / "crd" / "bases"], "go": [go_crds] if go_crds else [], "plain": []}
        self.flavour = flavour
        self.go_crds = go_crds
        self.legacy_api = flavour == "go" and go_crds is not None and legacy_backend_api(go_crds)
        self.plane = ControlPlane(crd_paths=[p for p in crds[flavour] if p is not None], start_timeout=120)

    def __enter__(self) -> BenchCluster:
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
            manifests = BENCH_DIR / "manifests" / "llmaz-go"
            backend = manifests / ("backend-args.yaml" if self.legacy_api else "backend-recommended-configs.yaml")
            assert self.go_crds is not None
            document = backend_manifest(yaml.safe_load(backend.read_text()), backend_command_field(self.go_crds))
            self.plane.kubectl("apply", "--server-side", "-f", str(manifests / "common.yaml"))
            self.plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(document))
        self.plane.kubectl("create", "namespace", NAMESPACE)
