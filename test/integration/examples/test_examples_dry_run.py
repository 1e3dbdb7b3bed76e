"""docs/examples/ judged by kube-apiserver: every document of every example passes a server-side dry run
(`kubectl apply --server-side --dry-run=server`, strict field validation) against the real schemas of its kind,
and a broken copy of each kind is refused, which shows the dry run validates rather than waves through.

Where the schemas come from:
- GatewayClass and Gateway: the Gateway API CRDs Envoy Gateway bundles; Backend and ClientTrafficPolicy: Envoy
  Gateway's own CRDs. Both from the Go module github.com/envoyproxy/gateway at the Makefile's
  ENVOY_GATEWAY_VERSION.
- AIGatewayRoute and AIServiceBackend: Envoy AI Gateway's CRDs, from the Go module github.com/envoyproxy/ai-gateway
  at the Makefile's ENVOY_AI_GATEWAY_VERSION.
- PersistentVolumeClaim, Deployment and Service (Open WebUI): built into kube-apiserver.
`make example-crds` (a prerequisite of `make test-integration`) copies the CRDs from the module cache into
`$LLMAZ_CACHE/crd/<name>-<version>/`; nothing third-party is committed. No document is only checked structurally:
every kind the examples use is served by one of those CRDs or built in (the first test fails otherwise).

The CRDs are installed (server-side apply, then waiting until Established) into a control plane of this module's
own, so the session control plane never carries third-party CRDs. A dry run checks schemas, CEL rules, defaulting
and admission, not references between objects (a backendRef to a missing AIServiceBackend passes): the unit test
test/unit/examples/test_examples.py checks those within each file.
"""

from __future__ import annotations

import copy
import functools
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import ControlPlane
from llmaz_dev.envtest._assets import AssetsMissingError, cache_root, makefile_version
from llmaz_dev.envtest._crds import install_crds, load_crds

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "docs" / "examples"
EXAMPLE_FILES = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml"))
BUILT_IN_GROUPS = {"", "apps"}
# Namespaces the examples name; `default` exists in every cluster.
NAMESPACES = ("llmaz-system",)
AI_GATEWAY_GROUP = "aigateway.envoyproxy.io"


def documents(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / relative).read_text()) if d]


def group_kind(document: dict[str, Any]) -> tuple[str, str]:
    api_version: str = document["apiVersion"]
    return (api_version.rpartition("/")[0], document["kind"])


def pinned_crd_dirs() -> list[Path]:
    """The cache directories `make example-crds` fills, at the Makefile's versions."""
    dirs = [
        cache_root() / "crd" / f"envoy-gateway-{makefile_version('ENVOY_GATEWAY')}",
        cache_root() / "crd" / f"envoy-ai-gateway-{makefile_version('ENVOY_AI_GATEWAY')}",
    ]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise AssetsMissingError(f"{', '.join(missing)} missing: run `make example-crds`")
    return dirs


@functools.cache
def crds_for_the_examples() -> tuple[dict[str, Any], ...]:
    """The CRDs of the pinned releases that serve a kind some example uses (read once: about 6 MB of YAML)."""
    used = {group_kind(d) for f in EXAMPLE_FILES for d in documents(f)}
    crds = load_crds(pinned_crd_dirs())
    return tuple(crd for crd in crds if (crd["spec"]["group"], crd["spec"]["names"]["kind"]) in used)


@dataclass(frozen=True)
class Kubectl:
    cluster: ControlPlane

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        assert self.cluster.kubectl_path is not None, "no kubectl: run `make cluster-bins`"
        argv = [str(self.cluster.kubectl_path), f"--kubeconfig={self.cluster.kubeconfig}", *args]
        env = {**os.environ, "KUBECACHEDIR": str(self.cluster.scratch_dir / "kubectl-cache")}
        return subprocess.run(argv, input=input, capture_output=True, text=True, env=env, check=False)

    def dry_run(self, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        """`kubectl apply --server-side --dry-run=server` (kubectl's default --validate=strict: unknown fields fail)."""
        return self.run("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs))


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    """A control plane with the examples' CRDs installed and Established, and their namespaces created."""
    crds = crds_for_the_examples()
    with ControlPlane() as plane:
        install_crds(plane.admin_client(), list(crds), timeout=60.0)
        for name in NAMESPACES:
            plane.kubectl("create", "namespace", name)
        yield Kubectl(plane)


def test_every_kind_the_examples_use_is_served_by_a_pinned_crd_or_built_in() -> None:
    used = {group_kind(d) for f in EXAMPLE_FILES for d in documents(f)}
    from_crds = {(c["spec"]["group"], c["spec"]["names"]["kind"]) for c in crds_for_the_examples()}

    assert from_crds == {
        ("gateway.networking.k8s.io", "GatewayClass"),
        ("gateway.networking.k8s.io", "Gateway"),
        ("gateway.envoyproxy.io", "ClientTrafficPolicy"),
        ("gateway.envoyproxy.io", "Backend"),
        (AI_GATEWAY_GROUP, "AIGatewayRoute"),
        (AI_GATEWAY_GROUP, "AIServiceBackend"),
    }
    assert {gk for gk in used if gk[0] in BUILT_IN_GROUPS} == {
        ("", "PersistentVolumeClaim"),
        ("apps", "Deployment"),
        ("", "Service"),
    }
    assert used == from_crds | {gk for gk in used if gk[0] in BUILT_IN_GROUPS}  # nothing left unvalidated


def test_the_examples_use_the_envoy_ai_gateway_version_the_release_stores() -> None:
    # Envoy AI Gateway v1.0.0 stores v1beta1 and asks new manifests to use it; it serves v1alpha1 deprecated.
    crds = {c["spec"]["names"]["kind"]: c for c in crds_for_the_examples() if c["spec"]["group"] == AI_GATEWAY_GROUP}
    assert sorted(crds) == ["AIGatewayRoute", "AIServiceBackend"]
    for kind, crd in crds.items():
        storage = next(v["name"] for v in crd["spec"]["versions"] if v["storage"])
        used = {d["apiVersion"] for f in EXAMPLE_FILES for d in documents(f) if d["kind"] == kind}
        assert (storage, used) == ("v1beta1", {f"{AI_GATEWAY_GROUP}/v1beta1"}), kind


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_document_passes_a_server_side_dry_run(kubectl: Kubectl, example: str) -> None:
    docs = documents(example)

    result = kubectl.dry_run(docs)

    assert result.returncode == 0, result.stderr
    applied = result.stdout.splitlines()
    assert len(applied) == len(docs), result.stdout
    for line, doc in zip(applied, docs, strict=True):
        kind, name = line.split()[0].split("/")
        assert (kind.split(".")[0], name) == (doc["kind"].lower(), doc["metadata"]["name"]), line
        assert line.endswith("serverside-applied (server dry run)"), line
    assert "Warning" not in result.stderr, result.stderr  # no deprecated API, no dropped field


def test_the_dry_runs_persisted_nothing(kubectl: Kubectl) -> None:
    for resource in ("aigatewayroutes", "aiservicebackends", "backends", "gateways", "deployments"):
        assert kubectl.run("get", resource, "-A", "-o", "name").stdout == "", resource


def _find(example: str, kind: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in documents(example) if (d["kind"], d["metadata"]["name"]) == (kind, name)))


def _typo_in_backend(doc: dict[str, Any]) -> None:
    fqdn = doc["spec"]["endpoints"][0]["fqdn"]
    fqdn["host"] = fqdn.pop("hostname")


def _service_backend_ref(doc: dict[str, Any]) -> None:
    # What llmaz (Go) documents for older Envoy AI Gateway releases: the `-lb` Service itself, no Backend.
    doc["spec"]["backendRef"] = {"kind": "Service", "name": "tiny-llama-lb", "port": 8080}


def _llmaz_go_route(doc: dict[str, Any]) -> None:
    # llmaz (Go)'s route, for older Envoy AI Gateway releases: `targetRefs` and a route-level `schema`.
    doc["spec"]["targetRefs"] = doc["spec"].pop("parentRefs")
    doc["spec"]["schema"] = {"name": "OpenAI"}


def _no_rules(doc: dict[str, Any]) -> None:
    del doc["spec"]["rules"]


def _unknown_schema(doc: dict[str, Any]) -> None:
    doc["spec"]["schema"]["name"] = "LlamaCpp"


def _no_gateway_class(doc: dict[str, Any]) -> None:
    del doc["spec"]["gatewayClassName"]


def _selector_misses_the_pods(doc: dict[str, Any]) -> None:
    doc["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "something-else"}


def _port_out_of_range(doc: dict[str, Any]) -> None:
    doc["spec"]["endpoints"][0]["fqdn"]["port"] = 70000


PER_MODEL = "envoy-ai-gateway/per-model-routes.yaml"
VIA_GATEWAY = "envoy-ai-gateway/via-llmaz-gateway.yaml"
OPEN_WEBUI = "open-webui/open-webui.yaml"
BROKEN: dict[str, tuple[str, str, str, Callable[[dict[str, Any]], None], str]] = {
    "backend-unknown-field": (
        PER_MODEL,
        "Backend",
        "tiny-llama",
        _typo_in_backend,
        ".spec.endpoints[0].fqdn.host: field not declared in schema",
    ),
    "backend-port-out-of-range": (
        VIA_GATEWAY,
        "Backend",
        "llmaz-gateway",
        _port_out_of_range,
        "should be less than or equal to 65535",
    ),
    "aiservicebackend-to-a-service": (
        PER_MODEL,
        "AIServiceBackend",
        "tiny-llama",
        _service_backend_ref,
        "BackendRef must be a Backend resource of Envoy Gateway",
    ),
    "aiservicebackend-unknown-schema": (
        VIA_GATEWAY,
        "AIServiceBackend",
        "llmaz-gateway",
        _unknown_schema,
        'spec.schema.name: Unsupported value: "LlamaCpp"',
    ),
    "aigatewayroute-without-rules": (PER_MODEL, "AIGatewayRoute", "llmaz-models", _no_rules, "spec.rules: Required"),
    "aigatewayroute-in-llmaz-gos-older-form": (
        PER_MODEL,
        "AIGatewayRoute",
        "llmaz-models",
        _llmaz_go_route,
        "field not declared in schema",
    ),
    "gateway-without-class": (PER_MODEL, "Gateway", "envoy-ai-gateway", _no_gateway_class, "gatewayClassName"),
    "deployment-selector-misses-its-pods": (
        OPEN_WEBUI,
        "Deployment",
        "open-webui",
        _selector_misses_the_pods,
        "`selector` does not match template `labels`",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_copy_is_refused(kubectl: Kubectl, case: str) -> None:
    example, kind, name, breaks, error = BROKEN[case]
    doc = _find(example, kind, name)
    assert kubectl.dry_run([doc]).returncode == 0  # the document as written passes ...
    breaks(doc)

    result = kubectl.dry_run([doc])  # ... and the broken copy does not

    assert result.returncode != 0, result.stdout
    assert error in result.stderr, result.stderr


def test_llmaz_gos_apiversion_v1alpha1_is_still_served_with_the_same_schema_but_deprecated(kubectl: Kubectl) -> None:
    # llmaz (Go) documents aigateway.envoyproxy.io/v1alpha1; the pinned release serves it, deprecated, with the
    # same schema, so the examples pass as v1alpha1 too, with the API server's deprecation warning.
    docs = [d for d in documents(PER_MODEL) if group_kind(d)[0] == AI_GATEWAY_GROUP]
    for doc in docs:
        doc["apiVersion"] = f"{AI_GATEWAY_GROUP}/v1alpha1"

    result = kubectl.dry_run(docs)

    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(docs) == 3
    assert f"{AI_GATEWAY_GROUP}/v1alpha1 is deprecated; use {AI_GATEWAY_GROUP}/v1beta1" in result.stderr
