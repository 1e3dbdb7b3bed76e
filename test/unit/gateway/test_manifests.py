"""config/gateway agrees with the code: flags, ports, probes, the script, the identity and least-privilege RBAC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmaz.gateway.__main__ import SHUTDOWN_MARGIN, parse_args
from llmaz.gateway.routing.catalog import RBAC_RULES, Catalog
from llmaz.gateway.scaling import activator
from llmaz.runtime import rbac
from llmaz.runtime.cache import SharedInformer, SharedInformerFactory
from llmaz.runtime.client import Client, RestConfig
from llmaz.runtime.resource import Resource

REPO = Path(__file__).resolve().parents[3]
GATEWAY = REPO / "config" / "gateway"


def documents(name: str) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all((GATEWAY / name).read_text()) if d}


def container() -> dict[str, Any]:
    deployment = documents("gateway.yaml")["Deployment/gateway"]
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(found, dict)
    return found


def test_the_component_lists_every_manifest_in_its_directory() -> None:
    kustomization = yaml.safe_load((GATEWAY / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in GATEWAY.glob("*.yaml") if p.stem != "kustomization"
    )


def test_config_default_enables_the_gateway_with_one_commented_line() -> None:
    lines = (REPO / "config" / "default" / "kustomization.yaml").read_text().splitlines()
    assert "# components: [../gateway]" in lines


def test_the_deployment_runs_the_gateway_script_from_the_manager_image_with_real_flags() -> None:
    gateway = container()
    assert gateway["image"] == "controller:latest"  # `make deploy` sets the image of `controller`
    assert gateway["command"] == ["llmaz-gateway"]
    args = parse_args(gateway["args"])
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert args.bind_address == f":{ports['http']}"
    assert args.metrics_bind_address == f":{ports['metrics']}"
    assert args.health_probe_bind_address == f":{ports['health']}"
    assert args.activator_port == ports["activator"]
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": ports["health"]}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": ports["health"]}
    pod = documents("gateway.yaml")["Deployment/gateway"]["spec"]["template"]["spec"]
    grace = gateway["lifecycle"]["preStop"]["sleep"]["seconds"] + args.drain_timeout + SHUTDOWN_MARGIN
    assert pod["terminationGracePeriodSeconds"] >= grace


def test_the_pod_is_locked_down_with_resources() -> None:
    gateway = container()
    pod = documents("gateway.yaml")["Deployment/gateway"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert gateway["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert set(gateway["resources"]) == {"requests", "limits"}


def test_the_service_sends_port_80_to_the_api_and_selects_only_gateway_pods() -> None:
    services = documents("service.yaml")
    deployment = documents("gateway.yaml")["Deployment/gateway"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    api = services["Service/gateway"]["spec"]
    assert [(p["port"], p["targetPort"]) for p in api["ports"]] == [(80, "http")]
    for service in services.values():
        assert service["spec"]["selector"].items() <= labels.items()
    # The manager's Services select on control-plane: controller-manager; gateway pods must never match them.
    assert "control-plane" not in labels


def test_the_gateway_runs_as_its_own_service_account_bound_to_the_generated_role() -> None:
    pod = documents("gateway.yaml")["Deployment/gateway"]["spec"]["template"]["spec"]
    binding = documents("role_binding.yaml")["ClusterRoleBinding/gateway-rolebinding"]
    role = documents("role.yaml")["ClusterRole/gateway-role"]
    assert "ServiceAccount/gateway" in documents("service_account.yaml")
    assert pod["serviceAccountName"] == "gateway"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gateway", "namespace": "system"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def _watched() -> list[tuple[Resource, str | None, str | None]]:
    """(resource, namespace, label selector) of every informer the gateway asks for."""
    factory = SharedInformerFactory(Client(RestConfig(host="https://127.0.0.1:1")))
    created: list[tuple[Resource, str | None, str | None]] = []
    informer_for = factory.informer_for

    def recording(
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> SharedInformer:
        created.append((resource, namespace, label_selector))
        return informer_for(resource, namespace, label_selector, field_selector)

    factory.informer_for = recording  # type: ignore[method-assign]
    Catalog.watch(factory, "llmaz-system/llmaz-gateway")
    return created


def test_the_role_grants_exactly_get_list_watch_on_what_the_gateway_watches() -> None:
    watched = _watched()
    assert len(watched) == 7  # the four kinds routing reads, llmaz's core Services, and three kinds of slices
    for resource, namespace, _ in watched:
        assert namespace is None
        for verb in rbac.READ:
            assert rbac.allows(RBAC_RULES, resource.group, resource.plural, verb, own_namespace=False)
    granted = {(r.api_group, plural, verb) for r in RBAC_RULES for plural in r.resources for verb in r.verbs}
    assert granted == {(r.group, r.plural, v) for r, _, _ in watched for v in rbac.READ}


def test_endpointslices_are_watched_by_label_never_the_whole_cluster() -> None:
    selectors = sorted(str(selector) for resource, _, selector in _watched() if resource.plural == "endpointslices")
    assert selectors == [
        "app.kubernetes.io/managed-by=llmaz",  # the -lb Services' slices, which inherit the Service's labels
        "endpointslice.kubernetes.io/managed-by=llmaz-gateway.llmaz.io",  # the activator's own
        "kubernetes.io/service-name=llmaz-gateway",  # the gateway's own Service's, in its namespace
    ]


def test_the_role_lets_the_activator_write_endpointslices_and_nothing_else_new() -> None:
    role = documents("role.yaml")["ClusterRole/gateway-role"]
    slices = [r for r in role["rules"] if r["apiGroups"] == ["discovery.k8s.io"]]
    assert slices == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": sorted(slices[0]["verbs"])}
    ]
    assert set(slices[0]["verbs"]) == {"get", "list", "watch", "create", "update", "delete"}
    for verb in ("create", "update", "delete"):
        assert rbac.allows(activator.RBAC_RULES, "discovery.k8s.io", "endpointslices", verb, own_namespace=False)
    core = [r for r in role["rules"] if r["apiGroups"] == [""]]
    assert core == [{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]}]
