"""Where the control-plane binaries and the LeaderWorkerSet CRD live.

Invariants:
- `KUBEBUILDER_ASSETS`, when it names a directory holding `kube-apiserver` and `etcd`, wins: those binaries
  are used (and its `kubectl`, if present) and nothing is looked up in the build cache.
- Otherwise the binaries come from `$LLMAZ_CACHE/bin/k8s-<version>/` (default cache `~/.cache/llmaz`), where
  `<version>` is the `k8s.io/kubernetes` requirement in `hack/cluster/go.mod`, the single statement of the
  Kubernetes release. `hack/cluster/build.sh` (`make cluster-bins`) fills that directory.
- The LWS CRD comes from `$LLMAZ_LWS_CRD` or from `$LLMAZ_CACHE/crd/lws-<version>/`, the version being the
  `sigs.k8s.io/lws` requirement in `hack/cluster/lws/go.mod`.
- Tools the Makefile builds into the cache (`$(KUSTOMIZE)`, `$(HELM)`) come from the environment variable of that
  name when set, else from `$LLMAZ_CACHE/bin/tools/<tool>-<version>`, `<version>` being the Makefile's
  `<TOOL>_VERSION`, the single statement of that tool's release (`makefile_version` reads any such pin).
- Nothing here builds or downloads; a missing asset is reported with the command that provides it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

LWS_CRD_FILE = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
_BUILD_HINT = "run `make cluster-bins` (hack/cluster/build.sh) or set KUBEBUILDER_ASSETS"


class AssetsMissingError(RuntimeError):
    """A binary or manifest the control plane needs is not where it should be."""


@dataclass(frozen=True)
class ClusterAssets:
    """Paths of the binaries and manifests a control plane is started from.

    `kubectl` is None only when KUBEBUILDER_ASSETS holds no kubectl and none was built; `lws_crd` is None when
    neither the cache nor LLMAZ_LWS_CRD provides it.
    """

    kube_apiserver: Path
    etcd: Path
    kubectl: Path | None
    lws_crd: Path | None


def source_root() -> Path | None:
    """The source checkout this package runs from, if it is one (editable install or PYTHONPATH=src)."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "hack" / "cluster" / "go.mod").is_file() else None


def checkout_root(hint: str) -> Path:
    """`source_root()`, or AssetsMissingError saying that `hint` (the command that builds what is missing) needs one."""
    root = source_root()
    if root is None:
        raise AssetsMissingError(f"hack/cluster not found (not a source checkout): {hint}")
    return root


def repo_crd_paths() -> list[Path]:
    """The llmaz CRDs of the source checkout (config/crd/bases), or none outside one."""
    root = source_root()
    crds = root / "config" / "crd" / "bases" if root is not None else None
    return [crds] if crds is not None and crds.is_dir() else []


AssetsT = TypeVar("AssetsT")


def all_files(assets: AssetsT, hint: str) -> AssetsT:
    """`assets` (a dataclass of paths) when every path is a file; else AssetsMissingError naming the missing ones and
    `hint`, the command that builds them."""
    missing = [str(path) for path in vars(assets).values() if not path.is_file()]
    if missing:
        raise AssetsMissingError(f"not found: {', '.join(missing)}: {hint}")
    return assets


def cache_root() -> Path:
    return Path(os.environ.get("LLMAZ_CACHE") or Path.home() / ".cache" / "llmaz")


def module_version(go_mod: Path, module: str) -> str:
    """The version `go_mod` requires of `module` (single-line or block `require`)."""
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", re.MULTILINE)
    match = pattern.search(go_mod.read_text())
    if match is None:
        raise AssetsMissingError(f"{go_mod} does not require {module}")
    return match.group(1)


def kubernetes_version() -> str:
    """The pinned Kubernetes release, e.g. "v1.35.4"."""
    return module_version(_cluster_dir() / "go.mod", "k8s.io/kubernetes")


def makefile_version(variable: str) -> str:
    """The release the source checkout's Makefile pins as `<variable>_VERSION`, e.g. "v3.22.0" for "HELM"."""
    root = source_root()
    if root is None:
        raise AssetsMissingError(f"no source checkout to read {variable}_VERSION from")
    match = re.search(rf"^{variable}_VERSION\s*:?=\s*(\S+)", (root / "Makefile").read_text(), re.MULTILINE)
    if match is None:
        raise AssetsMissingError(f"the Makefile sets no {variable}_VERSION")
    return match.group(1)


def tool_path(name: str) -> Path:
    """The pinned `kustomize` or `helm` the Makefile builds (see the module docstring)."""
    variable = name.upper()
    explicit = os.environ.get(variable)
    if explicit:
        path = Path(explicit)
    else:
        if source_root() is None:
            raise AssetsMissingError(f"no source checkout to read the {name} version from: set {variable}")
        path = cache_root() / "bin" / "tools" / f"{name}-{makefile_version(variable)}"
    found = _executable(path)
    if found is None:
        raise AssetsMissingError(f"{name} not found at {path}: run `make {name}` or set {variable}")
    return found


def find_assets() -> ClusterAssets:
    """Resolve the assets as the module docstring describes; raise AssetsMissingError if unusable."""
    from_env = _assets_from_kubebuilder_env()
    built = _built_bin_dir()
    if from_env is not None:
        kube_apiserver, etcd, kubectl = from_env
        kubectl = kubectl or _executable(built / "kubectl" if built else None)
    else:
        if built is None:
            raise AssetsMissingError(f"no source checkout to read versions from: {_BUILD_HINT}")
        missing = [name for name in ("kube-apiserver", "etcd") if _executable(built / name) is None]
        if missing:
            raise AssetsMissingError(f"{', '.join(missing)} not found in {built}: {_BUILD_HINT}")
        kube_apiserver, etcd, kubectl = (
            built / "kube-apiserver",
            built / "etcd",
            _executable(built / "kubectl"),
        )
    return ClusterAssets(kube_apiserver, etcd, kubectl, _lws_crd())


def _cluster_dir() -> Path:
    root = source_root()
    if root is None:
        raise AssetsMissingError(f"hack/cluster not found (not a source checkout): {_BUILD_HINT}")
    return root / "hack" / "cluster"


def _assets_from_kubebuilder_env() -> tuple[Path, Path, Path | None] | None:
    value = os.environ.get("KUBEBUILDER_ASSETS")
    if not value:
        return None
    directory = Path(value)
    kube_apiserver, etcd = _executable(directory / "kube-apiserver"), _executable(directory / "etcd")
    if kube_apiserver is None or etcd is None:
        return None
    return kube_apiserver, etcd, _executable(directory / "kubectl")


def _built_bin_dir() -> Path | None:
    if source_root() is None:
        return None
    return cache_root() / "bin" / f"k8s-{kubernetes_version()}"


def _lws_crd() -> Path | None:
    explicit = os.environ.get("LLMAZ_LWS_CRD")
    if explicit:
        return Path(explicit)
    if source_root() is None:
        return None
    version = module_version(_cluster_dir() / "lws" / "go.mod", "sigs.k8s.io/lws")
    path = cache_root() / "crd" / f"lws-{version}" / LWS_CRD_FILE
    return path if path.is_file() else None


def _executable(path: Path | None) -> Path | None:
    return path if path is not None and os.access(path, os.X_OK) and path.is_file() else None
