"""A persistent local control plane in the background (`make dev-up` / `make dev-down`).

Invariants:
- All state lives in one directory (`.dev/` in the repo): `kubeconfig`, `control-plane/` (certificates, etcd
  data, logs) and `state.json` (pids and executables of what was started). A lock file serialises dev-up/down.
- `up` is idempotent: when the recorded processes still run and kube-apiserver is ready, it only re-applies
  the CRDs and manifests; otherwise it stops any recorded leftovers and starts a fresh control plane.
- `down` stops exactly the recorded processes (a pid is signalled only if it still runs the recorded
  executable), then removes the state; afterwards nothing recorded runs and no recorded port listens.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from llmaz_dev.envtest._assets import find_assets
from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.envtest._existing import ExistingCluster
from llmaz_dev.envtest._process import is_listening, is_running, stop_detached
from llmaz_dev.envtest._rest import ApiError
from llmaz_dev.envtest.control_plane import ControlPlane, ControlPlaneError

_FIELD_MANAGER = "llmaz-dev"


def dev_up(state_dir: Path, crd_paths: Sequence[Path], manifests: Path | None, kustomize: Path | None) -> Path:
    """Ensure a dev control plane runs with CRDs and manifests applied; return its kubeconfig path."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with _locked(state_dir):
        running = _running_cluster(state_dir)
        if running is None:
            _stop_recorded(state_dir)
            started = _start(state_dir, crd_paths)
            if manifests is not None:
                _apply_kustomization(started, manifests, kustomize)
            return started.kubeconfig
        try:
            lws_crd = find_assets().lws_crd
            running.install_crds([*crd_paths, *([lws_crd] if lws_crd else [])])
            if manifests is not None:
                _apply_kustomization(running, manifests, kustomize)
        finally:
            running.close()
        return running.kubeconfig


def dev_down(state_dir: Path) -> list[str]:
    """Stop what `dev_up` recorded and remove its state; return the names of the processes stopped."""
    if not state_dir.is_dir():
        return []
    with _locked(state_dir):
        return _stop_recorded(state_dir)


def _start(state_dir: Path, crd_paths: Sequence[Path]) -> ControlPlane:
    work_dir = state_dir / "control-plane"
    shutil.rmtree(work_dir, ignore_errors=True)
    plane = ControlPlane(crd_paths=crd_paths, work_dir=work_dir, kubeconfig=state_dir / "kubeconfig", detached=True)
    try:
        plane.start()
    except BaseException:  # a failure or Ctrl-C: start() stopped its processes; what it wrote goes too
        shutil.rmtree(work_dir, ignore_errors=True)
        (state_dir / "kubeconfig").unlink(missing_ok=True)
        raise
    _write_state(state_dir, plane.state())
    return plane


def _running_cluster(state_dir: Path) -> ExistingCluster | None:
    state = _read_state(state_dir)
    if state is None or not all(is_running(p["pid"], Path(p["executable"])) for p in state["processes"]):
        return None
    cluster = ExistingCluster(Path(state["kubeconfig"]))
    try:
        ready = cluster.admin_client().get_text("/readyz", timeout=5) == "ok"
    except (OSError, ApiError):
        ready = False
    if not ready:
        cluster.close()
        return None
    return cluster


def _stop_recorded(state_dir: Path) -> list[str]:
    state = _read_state(state_dir)
    if state is None:
        return []
    stopped = [p["name"] for p in state["processes"] if stop_detached(p["pid"], Path(p["executable"]))]
    still_listening = [port for port in state["ports"].values() if is_listening(port)]
    if still_listening:
        raise ControlPlaneError(f"ports still listening after stopping the dev control plane: {still_listening}")
    (state_dir / "state.json").unlink()
    (state_dir / "kubeconfig").unlink(missing_ok=True)
    shutil.rmtree(state_dir / "control-plane", ignore_errors=True)
    return stopped


def _apply_kustomization(cluster: Cluster, directory: Path, kustomize: Path | None) -> None:
    if kustomize is None:
        raise ControlPlaneError(f"applying {directory} needs kustomize (make kustomize)")
    built = subprocess.run([str(kustomize), "build", str(directory)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise ControlPlaneError(f"kustomize build {directory} failed: {built.stderr}")
    apply = ["apply", "--server-side", "--force-conflicts", f"--field-manager={_FIELD_MANAGER}", "-f", "-"]
    cluster.kubectl(*apply, input=built.stdout)


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    path = state_dir / "state.json"
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    scratch = state_dir / "state.json.tmp"
    scratch.write_text(json.dumps(state, indent=2))
    scratch.replace(state_dir / "state.json")


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    with (state_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
