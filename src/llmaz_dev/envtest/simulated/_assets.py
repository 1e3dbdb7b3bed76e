"""Where the simulated cluster's extra binaries live (built by `make e2e-bins`, i.e. `hack/cluster/build.sh --e2e`).

Invariants:
- kube-controller-manager and kube-scheduler come from `KUBEBUILDER_ASSETS` when that directory holds them,
  otherwise from `$LLMAZ_CACHE/bin/k8s-<version>/`, next to the kube-apiserver of the same release.
- kwok and its stages come from `$LLMAZ_CACHE/bin/kwok-<version>/`, the LeaderWorkerSet controller from
  `$LLMAZ_CACHE/bin/lws-<version>/`; the versions are the requirements in `hack/cluster/{kwok,lws}/go.mod`.
- Nothing here builds anything; a missing binary is reported with the command that provides it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from llmaz_dev.envtest._assets import all_files, cache_root, checkout_root, kubernetes_version, module_version

_BUILD_HINT = "run `make e2e-bins` (hack/cluster/build.sh --e2e)"


@dataclass(frozen=True)
class SimulatedAssets:
    """The binaries the simulated cluster runs besides etcd and kube-apiserver."""

    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    lws_controller: Path


def find_simulated_assets() -> SimulatedAssets:
    """Resolve the paths as the module docstring says; raise AssetsMissingError naming what is missing."""
    root = checkout_root(_BUILD_HINT)
    k8s_dir = _kubernetes_dir()
    kwok_dir = cache_root() / "bin" / f"kwok-{module_version(root / 'hack/cluster/kwok/go.mod', 'sigs.k8s.io/kwok')}"
    lws_dir = cache_root() / "bin" / f"lws-{module_version(root / 'hack/cluster/lws/go.mod', 'sigs.k8s.io/lws')}"
    assets = SimulatedAssets(
        kube_controller_manager=k8s_dir / "kube-controller-manager",
        kube_scheduler=k8s_dir / "kube-scheduler",
        kwok=kwok_dir / "kwok",
        kwok_stages=kwok_dir / "stages.yaml",
        lws_controller=lws_dir / "lws-controller",
    )
    return all_files(assets, _BUILD_HINT)


def _kubernetes_dir() -> Path:
    explicit = os.environ.get("KUBEBUILDER_ASSETS")
    if explicit and all(os.access(Path(explicit) / n, os.X_OK) for n in ("kube-controller-manager", "kube-scheduler")):
        return Path(explicit)
    return cache_root() / "bin" / f"k8s-{kubernetes_version()}"
