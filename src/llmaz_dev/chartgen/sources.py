"""What the chart is made of: the objects `kustomize build` makes of `config/`, read once per generation.

- `default`: `config/default`, the install (CRDs and the `llmaz-system` Namespace included).
- `gateway`: what enabling `config/gateway` adds to it, built the way its kustomization says users enable it: a
  scratch copy of `config/` with the one commented line of `config/default/kustomization.yaml` uncommented.
- `gateway_envoy`: the same for `config/gateway-envoy` (the gateway with Envoy as its data plane), its own commented
  line uncommented.
- `prometheus`: `config/prometheus`.
- `grafana`: `config/grafana`, the dashboards' ConfigMaps.
- `crds`: the CRD files of `config/crd/bases` and `config/gie` (the InferencePool CRD), verbatim (Helm installs
  `crds/` as they are, untemplated, and skips a CRD the cluster already has).
- `version`: the project's version (`pyproject.toml`), the chart's version and appVersion.
- `lws_version`: the LeaderWorkerSet release llmaz runs against (`hack/cluster/lws/go.mod`), named where the chart
  tells users to install LeaderWorkerSet themselves.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Object = dict[str, Any]
GATEWAY_LINE = "components: [../gateway]"
GATEWAY_ENVOY_LINE = "components: [../gateway-envoy]"


class SourceError(RuntimeError):
    """kustomize failed, or `config/` is not shaped the way the generator reads it."""


@dataclass(frozen=True)
class Sources:
    default: list[Object]
    gateway: list[Object]
    gateway_envoy: list[Object]
    prometheus: list[Object]
    grafana: list[Object]
    crds: dict[str, str]
    version: str
    lws_version: str


def key(obj: Object) -> tuple[str, str, str]:
    """(kind, namespace, name): how objects are told apart here and in the tests."""
    metadata = obj["metadata"]
    return obj["kind"], metadata.get("namespace", ""), metadata["name"]


def kustomize_build(kustomize: Path, directory: Path) -> list[Object]:
    result = subprocess.run([str(kustomize), "build", str(directory)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SourceError(f"kustomize build {directory} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def read_sources(kustomize: Path, repo: Path) -> Sources:
    config = repo / "config"
    default = kustomize_build(kustomize, config / "default")
    with tempfile.TemporaryDirectory(prefix="llmaz-chartgen-") as scratch:
        with_gateway = _build_with(kustomize, config, Path(scratch) / "gateway", GATEWAY_LINE)
        with_envoy = _build_with(kustomize, config, Path(scratch) / "gateway-envoy", GATEWAY_ENVOY_LINE)
    present = {key(obj) for obj in default}
    return Sources(
        default=default,
        gateway=[obj for obj in with_gateway if key(obj) not in present],
        gateway_envoy=[obj for obj in with_envoy if key(obj) not in present],
        prometheus=kustomize_build(kustomize, config / "prometheus"),
        grafana=kustomize_build(kustomize, config / "grafana"),
        crds={path.name: path.read_text() for path in _crd_files(config)},
        version=tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"],
        lws_version=_required_version(repo / "hack" / "cluster" / "lws" / "go.mod", "sigs.k8s.io/lws"),
    )


def _crd_files(config: Path) -> list[Path]:
    gie = [path for path in (config / "gie").glob("*.yaml") if path.name != "kustomization.yaml"]
    return sorted([*(config / "crd" / "bases").glob("*.yaml"), *gie], key=lambda path: path.name)


def _build_with(kustomize: Path, config: Path, scratch: Path, line: str) -> list[Object]:
    copy = scratch / "config"
    shutil.copytree(config, copy)
    kustomization = copy / "default" / "kustomization.yaml"
    text = kustomization.read_text()
    if text.count(f"# {line}\n") != 1:
        raise SourceError(f"config/default/kustomization.yaml must carry the line `# {line}` once")
    kustomization.write_text(text.replace(f"# {line}\n", f"{line}\n"))
    return kustomize_build(kustomize, copy / "default")


def _required_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise SourceError(f"{go_mod} does not require {module}")
    return match.group(1)
