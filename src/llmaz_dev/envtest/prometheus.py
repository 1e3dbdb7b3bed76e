"""A real Prometheus for the node tier: the Prometheus Operator as its release installs it, and a Prometheus that
scrapes what ServiceMonitors select, as kube-prometheus sets one up.

Invariants:
- The operator comes from its release's `bundle.yaml` (CRDs, RBAC, ServiceAccount, Deployment, Service), kept by
  `hack/cluster/build.sh --prometheus` (which `make image-build` runs) in
  `$LLMAZ_CACHE/bin/prometheus-operator-<version>/`, the version being the requirement in
  `hack/cluster/prometheus-operator/go.mod`. Only its two image references change: the operator's and the config
  reloader's, to the images `make image-build` made here.
- The Prometheus runs as kube-prometheus' `monitoring/prometheus-k8s` ServiceAccount, the subject config/prometheus
  binds to llmaz's metrics reader, with the service-discovery rights of the operator's example role; it selects
  every ServiceMonitor in every namespace, and may take raw scrape configs too (`additionalScrapeConfigs`), as a
  Prometheus without the operator would have them. Its `version` is the image's tag (`v<upstream version>`), so
  the operator writes a configuration that Prometheus release understands.
- promtool, which checks and unit-tests config/prometheus's alerting rules, is the one built with that Prometheus:
  `$LLMAZ_CACHE/bin/prometheus-<upstream version>/promtool` (`hack/cluster/build.sh --prometheus`), the version read
  from `hack/cluster/prometheus/go.mod` (Prometheus 3.x is tagged v0.3XX.Y as a Go module: v0.305.0 is v3.5.0), or
  the file `$PROMTOOL` names.
- Nothing here talks to a cluster: these are manifests, applied by whoever holds one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest._assets import AssetsMissingError, cache_root, module_version, source_root

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_IMAGES = ("prometheus", "prometheus-operator", "prometheus-config-reloader")
NAMESPACE = "monitoring"
SERVICE_ACCOUNT = "prometheus-k8s"
NAME = "k8s"
POD = f"prometheus-{NAME}-0"
ADDITIONAL_SCRAPE_CONFIGS = {"name": "additional-scrape-configs", "key": "prometheus-additional.yaml"}
PORT = 9090
_RELOADER_FLAG = "--prometheus-config-reloader="
_BUILD_HINT = "run `make image-build` (hack/cluster/build.sh --prometheus)"
_YAML_VALUE_TAG = "tag:yaml.org,2002:value"


class _BundleLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: PyYAML resolves a bare `=` to YAML 1.1's `value` type, which it then cannot
    construct; the bundle's CRDs have one (in an enum), a plain string to the API server."""


_BundleLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _YAML_VALUE_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def operator_bundle() -> Path:
    """The operator release's bundle.yaml in the build cache; AssetsMissingError when it is not there."""
    root = source_root()
    if root is None:
        raise AssetsMissingError(f"hack/cluster not found (not a source checkout): {_BUILD_HINT}")
    version = module_version(root / "hack/cluster/prometheus-operator/go.mod", OPERATOR_MODULE)
    bundle = cache_root() / "bin" / f"prometheus-operator-{version}" / "bundle.yaml"
    if not bundle.is_file():
        raise AssetsMissingError(f"not found: {bundle}: {_BUILD_HINT}")
    return bundle


def prometheus_release(module_version: str) -> str:
    """The Prometheus release of a github.com/prometheus/prometheus module version: v0.305.0 is v3.5.0."""
    match = re.fullmatch(r"v0\.(\d)(\d\d)\.(\d+)", module_version)
    if match is None:
        raise ValueError(f"{module_version} is not a Prometheus 3.x module version (v0.3XX.Y)")
    major, minor, patch = match.groups()
    return f"v{major}.{int(minor)}.{patch}"


def promtool() -> Path:
    """promtool of the node tier's Prometheus release (see the module docstring); AssetsMissingError when absent."""
    explicit = os.environ.get("PROMTOOL")
    if explicit:
        path = Path(explicit)
    else:
        root = source_root()
        if root is None:
            raise AssetsMissingError(
                f"no source checkout to read the Prometheus version from: set PROMTOOL or {_BUILD_HINT}"
            )
        version = module_version(root / "hack/cluster/prometheus/go.mod", PROMETHEUS_MODULE)
        path = cache_root() / "bin" / f"prometheus-{prometheus_release(version)}" / "promtool"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise AssetsMissingError(f"promtool not found at {path}: {_BUILD_HINT}, or set PROMTOOL")
    return path


def operator_manifests(bundle: str, operator_image: str, reloader_image: str) -> list[dict[str, Any]]:
    """The documents of `bundle`, its operator Deployment running `operator_image` and naming `reloader_image` for
    the config reloader of the Prometheus pods it makes. ValueError when the bundle has no such Deployment."""
    documents = [doc for doc in yaml.load_all(bundle, Loader=_BundleLoader) if doc]
    deployments = [
        doc
        for doc in documents
        if doc.get("kind") == "Deployment" and doc["metadata"].get("name") == "prometheus-operator"
    ]
    if len(deployments) != 1:
        raise ValueError(f"the bundle has {len(deployments)} Deployments named prometheus-operator, not one")
    (container,) = [
        c for c in deployments[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "prometheus-operator"
    ]
    args = container.get("args", [])
    flags = [i for i, arg in enumerate(args) if arg.startswith(_RELOADER_FLAG)]
    if len(flags) != 1:
        raise ValueError(f"the operator's arguments name the config reloader {len(flags)} times, not once: {args}")
    args[flags[0]] = _RELOADER_FLAG + reloader_image
    container["image"] = operator_image
    container["imagePullPolicy"] = "IfNotPresent"
    return documents


def prometheus_version(image: str) -> str:
    """The Prometheus release of an image tagged `v<major>.<minor>.<patch>`; ValueError for any other tag."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    parts = tag[1:].split(".")
    if not tag.startswith("v") or len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"image {image!r}: its tag must be the Prometheus release, v<major>.<minor>.<patch>")
    return tag


def prometheus_manifests(
    image: str, *, scrape_configs: str | None = None, scrape_interval: str = "5s"
) -> list[dict[str, Any]]:
    """The namespace, ServiceAccount, discovery RBAC and Prometheus resource of a Prometheus running `image`;
    `scrape_configs`, a YAML list of Prometheus scrape configs, is added to what the ServiceMonitors give."""
    labels = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/part-of": "llmaz-e2e"}
    discovery = [
        {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    ]
    spec: dict[str, Any] = {
        "image": image,
        "version": prometheus_version(image),
        "replicas": 1,
        "serviceAccountName": SERVICE_ACCOUNT,
        "serviceMonitorSelector": {},
        "serviceMonitorNamespaceSelector": {},
        # Every PodMonitor too: config/prometheus's engine monitor (left unset, the operator selects none).
        "podMonitorSelector": {},
        "podMonitorNamespaceSelector": {},
        "scrapeInterval": scrape_interval,
        "evaluationInterval": "30s",
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534},
    }
    extra: list[dict[str, Any]] = []
    if scrape_configs is not None:
        spec["additionalScrapeConfigs"] = ADDITIONAL_SCRAPE_CONFIGS
        extra.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": ADDITIONAL_SCRAPE_CONFIGS["name"], "namespace": NAMESPACE, "labels": labels},
                "stringData": {ADDITIONAL_SCRAPE_CONFIGS["key"]: scrape_configs},
            }
        )
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": SERVICE_ACCOUNT, "labels": labels},
            "rules": discovery,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SERVICE_ACCOUNT, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
        *extra,
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": spec,
        },
    ]
