"""Helm, the release `make helm` builds, run the way the tests and users run it.

Invariants:
- The binary is the pinned one (`tool_path("helm")`: `$HELM`, else the cache's `helm-<HELM_VERSION>`).
- Helm keeps its state (repository cache, configuration, plugins) in the directory the caller gives, never in
  `~/.cache/helm` or `~/.config/helm`; nothing is fetched from a repository.
- With a cluster, every command names its kubeconfig; the ambient `KUBECONFIG` is never used. Without one, only
  client-side commands (`template`, `lint`) make sense.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from llmaz_dev.envtest._assets import tool_path
from llmaz_dev.envtest._cluster import Cluster


class HelmError(RuntimeError):
    """helm exited non-zero; the message has its stderr."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str, stdout: str = "") -> None:
        super().__init__(f"helm {' '.join(args)} failed ({returncode}): {stderr.strip()}")
        self.stderr = stderr
        self.stdout = stdout  # `helm lint` reports its findings there


class Helm:
    def __init__(self, home: Path, cluster: Cluster | None = None) -> None:
        self.binary = tool_path("helm")
        self.home = home
        self.cluster = cluster

    def __call__(self, *args: str, input: str | None = None) -> str:
        """Run `helm args...`; return stdout, raise HelmError on failure."""
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        env.pop("KUBECONFIG", None)
        target = [f"--kubeconfig={self.cluster.kubeconfig}"] if self.cluster is not None else []
        argv = [str(self.binary), *args, *target]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise HelmError(args, result.returncode, result.stderr, result.stdout)
        return result.stdout
