"""`helm template` of the chart with the knobs every chart has: each value renders in its object and nowhere else,
the gateway is exposed and given API keys from values, and a value of the wrong type, an unknown key or a value the
chart cannot honour fails naming the value (`helm template` and `helm lint` alike). That the defaults render what
kustomize builds is test_helm_template.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.helm import Helm, HelmError

from .conftest import CHART, Key, keyed

RELEASE, NAMESPACE = "llmaz", "llmaz-system"
HTTP_ROUTE_API = "gateway.networking.k8s.io/v1/HTTPRoute"
MANAGER: Key = ("Deployment", NAMESPACE, "llmaz-controller-manager")
GATEWAY: Key = ("Deployment", NAMESPACE, "llmaz-gateway")
GATEWAY_SERVICE: Key = ("Service", NAMESPACE, "llmaz-gateway")
INGRESS: Key = ("Ingress", NAMESPACE, "llmaz-gateway")
ROUTE: Key = ("HTTPRoute", NAMESPACE, "llmaz-gateway")
Objects = dict[Key, dict[str, Any]]


def _template(helm: Helm, tmp_path: Path, values: dict[str, Any], *args: str) -> Objects:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return keyed(helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(path), *args))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(obj)["containers"]
    result: dict[str, Any] = container
    return result


@dataclass(frozen=True)
class Deployment:
    key: Key
    pod: str
    """Where the pod's values are (`controllerManager`, `gateway`)."""
    container: str
    """Where the container's values are."""


DEPLOYMENTS = (
    Deployment(MANAGER, "controllerManager", "controllerManager.manager"),
    Deployment(GATEWAY, "gateway", "gateway"),
)


@dataclass(frozen=True)
class Knob:
    name: str
    container_level: bool
    value: Any
    rendered: Callable[[dict[str, Any]], Any]
    """What of the rendered Deployment the value becomes."""
    expected: Any = None
    """What that must be; None: the value."""


NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]
    }
}
CONFIG_POD_LABELS = ("control-plane", "app.kubernetes.io/name", "app.kubernetes.io/component")


def _without(mapping: dict[str, str], *chart_keys: str) -> dict[str, str]:
    return {key: value for key, value in mapping.items() if key not in chart_keys}


KNOBS = (
    Knob("imagePullSecrets", False, [{"name": "regcred"}], lambda d: _pod(d)["imagePullSecrets"]),
    Knob("nodeSelector", False, {"kubernetes.io/os": "linux"}, lambda d: _pod(d)["nodeSelector"]),
    Knob(
        "tolerations",
        False,
        [{"key": "dedicated", "operator": "Equal", "value": "llmaz", "effect": "NoSchedule"}],
        lambda d: _pod(d)["tolerations"],
    ),
    Knob(
        "affinity",
        False,
        {"nodeAffinity": NODE_AFFINITY, "podAntiAffinity": None},
        lambda d: _pod(d)["affinity"],
        {"nodeAffinity": NODE_AFFINITY},  # null removes config/'s spreading over nodes
    ),
    Knob("priorityClassName", False, "system-cluster-critical", lambda d: _pod(d)["priorityClassName"]),
    Knob(
        "podAnnotations",
        False,
        {"example.com/team": "models"},
        lambda d: _without(d["spec"]["template"]["metadata"]["annotations"], "kubectl.kubernetes.io/default-container"),
    ),
    Knob(
        "podLabels",
        False,
        {"team": "models"},
        lambda d: _without(d["spec"]["template"]["metadata"]["labels"], *CONFIG_POD_LABELS),
    ),
    Knob(
        "extraVolumes",
        False,
        [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
        lambda d: _pod(d)["volumes"][1:],
        # after the chart's own
    ),
    Knob("extraEnv", True, [{"name": "TZ", "value": "UTC"}], lambda d: _container(d)["env"]),
    Knob(
        "extraVolumeMounts",
        True,
        [{"name": "cache", "mountPath": "/cache", "readOnly": True}],
        lambda d: _container(d)["volumeMounts"][1:],
    ),
)


def _nested(path: str, value: Any) -> dict[str, Any]:
    """`a.b.c`, v -> {a: {b: {c: v}}}."""
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _merged(*trees: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tree in trees:
        for name, value in tree.items():
            out[name] = _merged(out[name], value) if isinstance(value, dict) and name in out else value
    return out


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d.pod)
@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.name)
def test_each_knob_renders_in_its_deployment_and_nowhere_else(
    helm: Helm, tmp_path: Path, deployment: Deployment, knob: Knob
) -> None:
    where = deployment.container if knob.container_level else deployment.pod
    # The gateway with an image of its own: with the manager's it also takes the manager's pull secrets (below).
    base = {"gateway": {"enabled": True, "image": {"repository": "registry.example/gateway"}}}
    rendered = _template(helm, tmp_path, _merged(base, _nested(f"{where}.{knob.name}", knob.value)))
    assert knob.rendered(rendered[deployment.key]) == (knob.value if knob.expected is None else knob.expected)
    defaults = _template(helm, tmp_path, base)
    other = next(d for d in DEPLOYMENTS if d is not deployment)
    assert rendered[other.key] == defaults[other.key], f"{where}.{knob.name} changed {other.key}"


def test_an_affinity_is_merged_into_the_default_spreading_over_nodes(helm: Helm, tmp_path: Path) -> None:
    defaults = _pod(_template(helm, tmp_path, {})[MANAGER])["affinity"]
    rendered = _template(helm, tmp_path, {"controllerManager": {"affinity": {"nodeAffinity": NODE_AFFINITY}}})
    assert _pod(rendered[MANAGER])["affinity"] == {**defaults, "nodeAffinity": NODE_AFFINITY}
    assert "podAntiAffinity" in defaults


def test_pod_labels_leave_the_selector_alone(helm: Helm, tmp_path: Path) -> None:
    rendered = _template(helm, tmp_path, {"controllerManager": {"podLabels": {"team": "models"}}})
    selector = rendered[MANAGER]["spec"]["selector"]["matchLabels"]
    assert "team" not in selector
    assert selector.items() <= rendered[MANAGER]["spec"]["template"]["metadata"]["labels"].items()


def test_the_gateway_pulls_the_managers_image_with_the_managers_secrets_unless_it_has_its_own(
    helm: Helm, tmp_path: Path
) -> None:
    manager_secrets = {"controllerManager": {"imagePullSecrets": [{"name": "regcred"}]}, "gateway": {"enabled": True}}
    inherited = _template(helm, tmp_path, manager_secrets)
    assert _pod(inherited[GATEWAY])["imagePullSecrets"] == [{"name": "regcred"}]

    own_image = _merged(manager_secrets, {"gateway": {"image": {"repository": "registry.example/gateway"}}})
    assert "imagePullSecrets" not in _pod(_template(helm, tmp_path, own_image)[GATEWAY])

    own_secrets = _merged(manager_secrets, {"gateway": {"imagePullSecrets": [{"name": "gateway-pull"}]}})
    assert _pod(_template(helm, tmp_path, own_secrets)[GATEWAY])["imagePullSecrets"] == [{"name": "gateway-pull"}]


def test_the_gateway_reads_api_keys_from_the_named_secret(helm: Helm, tmp_path: Path) -> None:
    values = {
        "gateway": {
            "enabled": True,
            "apiKeys": {"existingSecret": "team-keys", "secretKey": "tokens"},
            "extraArgs": ["--log-level=debug"],
        }
    }
    gateway = _template(helm, tmp_path, values)[GATEWAY]
    assert {
        "name": "api-keys",
        "secret": {"secretName": "team-keys", "items": [{"key": "tokens", "path": "keys"}]},
    } in (_pod(gateway)["volumes"])
    container = _container(gateway)
    assert {"name": "api-keys", "mountPath": "/etc/llmaz-gateway/api-keys", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert container["args"][-2:] == ["--api-keys-file=/etc/llmaz-gateway/api-keys/keys", "--log-level=debug"], (
        "the flag comes before extraArgs, which can override it"
    )


def test_without_a_secret_the_gateway_has_no_api_keys(helm: Helm, tmp_path: Path) -> None:
    gateway = _template(helm, tmp_path, {"gateway": {"enabled": True}})[GATEWAY]
    assert not [arg for arg in _container(gateway)["args"] if arg.startswith("--api-keys-file")]
    assert [volume["name"] for volume in _pod(gateway)["volumes"]] == ["tmp"]


@pytest.mark.parametrize("kind", ["ClusterIP", "NodePort", "LoadBalancer"])
def test_the_gateway_service_type_and_annotations_come_from_values(helm: Helm, tmp_path: Path, kind: str) -> None:
    annotations = {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    values = {"gateway": {"enabled": True, "service": {"type": kind, "annotations": annotations}}}
    rendered = _template(helm, tmp_path, values)
    service = rendered[GATEWAY_SERVICE]
    assert service["spec"]["type"] == kind
    assert service["metadata"]["annotations"] == annotations
    assert "type" not in rendered[("Service", NAMESPACE, "llmaz-gateway-metrics")]["spec"], "metrics stay inside"


def test_the_ingress_sends_every_path_of_its_hosts_to_the_gateway(helm: Helm, tmp_path: Path) -> None:
    hosts = ["llm.example", "models.example"]
    ingress: dict[str, Any] = {
        "enabled": True,
        "className": "nginx",
        "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "600"},
        "hosts": hosts,
        "tls": [{"hosts": ["llm.example"], "secretName": "llm-tls"}],
    }
    rendered = _template(helm, tmp_path, {"gateway": {"enabled": True, "ingress": ingress}})[INGRESS]
    assert rendered["metadata"]["annotations"] == ingress["annotations"]
    assert rendered["spec"]["ingressClassName"] == "nginx"
    assert rendered["spec"]["tls"] == ingress["tls"]
    backend = {"service": {"name": "llmaz-gateway", "port": {"name": "http"}}}
    paths = [{"path": "/", "pathType": "Prefix", "backend": backend}]
    assert rendered["spec"]["rules"] == [{"host": host, "http": {"paths": paths}} for host in hosts]


def test_an_ingress_without_hosts_serves_any_host_with_the_default_class(helm: Helm, tmp_path: Path) -> None:
    rendered = _template(helm, tmp_path, {"gateway": {"enabled": True, "ingress": {"enabled": True}}})[INGRESS]
    assert "ingressClassName" not in rendered["spec"]
    assert "tls" not in rendered["spec"]
    assert "annotations" not in rendered["metadata"]
    (rule,) = rendered["spec"]["rules"]
    assert "host" not in rule


def test_the_http_route_attaches_to_the_named_gateways(helm: Helm, tmp_path: Path) -> None:
    parents = [{"name": "public", "namespace": "gateways", "sectionName": "https"}]
    route = {"enabled": True, "parentRefs": parents, "hostnames": ["llm.example"]}
    rendered = _template(
        helm, tmp_path, {"gateway": {"enabled": True, "httpRoute": route}}, "--api-versions", HTTP_ROUTE_API
    )
    spec = rendered[ROUTE]["spec"]
    assert spec["parentRefs"] == parents
    assert spec["hostnames"] == ["llm.example"]
    assert spec["rules"] == [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [{"name": "llmaz-gateway", "port": 80}],
        }
    ]


def test_ingress_and_route_are_off_by_default(helm: Helm, tmp_path: Path) -> None:
    rendered = _template(helm, tmp_path, {"gateway": {"enabled": True}}, "--api-versions", HTTP_ROUTE_API)
    assert INGRESS not in rendered
    assert ROUTE not in rendered


@pytest.mark.parametrize(
    ("args", "where", "error"),
    [
        (["--set", "gateway.service.type=123"], "/gateway/service/type", "got number, want string"),
        (["--set", "gateway.service.type=Ingress"], "/gateway/service/type", "value must be one of 'ClusterIP'"),
        (["--set", "controllerManager.nodeSelector=abc"], "/controllerManager/nodeSelector", "got string, want object"),
        (["--set", "gateway.tolerations=NoSchedule"], "/gateway/tolerations", "got string, want array"),
        (["--set", "gateway.podLabels.tier=1"], "/gateway/podLabels/tier", "got number, want string"),
        (
            ["--set", "gateway.apiKeys.existingSecret=true"],
            "/gateway/apiKeys/existingSecret",
            "got boolean, want string",
        ),
        (["--set", "gateway.service.typ=NodePort"], "/gateway/service", "additional properties 'typ' not allowed"),
        (["--set", "gateway.ingress.host=llm.example"], "/gateway/ingress", "additional properties 'host' not allowed"),
        (
            ["--set", "gateway.tolerations[0].efect=NoSchedule"],
            "/gateway/tolerations/0",
            "additional properties 'efect' not allowed",
        ),
        (
            ["--set", "controllerManager.manager.extraVolumeMounts[0].name=cache"],
            "/controllerManager/manager/extraVolumeMounts/0",
            "missing property 'mountPath'",
        ),
        (
            ["--set", "gateway.httpRoute.parentRefs[0].port=http"],
            "/gateway/httpRoute/parentRefs/0/port",
            "got string, want integer",
        ),
    ],
)
@pytest.mark.parametrize("command", ["template", "lint"])
def test_a_mistyped_or_unknown_value_fails_template_and_lint_naming_it(
    helm: Helm, command: str, args: list[str], where: str, error: str
) -> None:
    argv = ["template", RELEASE] if command == "template" else ["lint", "--strict"]
    with pytest.raises(HelmError) as failure:
        helm(*argv, str(CHART), *args)
    report = failure.value.stdout if command == "lint" else failure.value.stderr  # lint reports on stdout
    assert f"- at '{where}': {error}" in report


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (
            {"controllerManager": {"podLabels": {"control-plane": "mine"}}},
            "controllerManager.podLabels.control-plane: the chart sets this pod label itself",
        ),
        (
            {"gateway": {"enabled": True, "podAnnotations": {"kubectl.kubernetes.io/default-container": "x"}}},
            "gateway.podAnnotations.kubectl.kubernetes.io/default-container: the chart sets this pod annotation",
        ),
        (
            {"gateway": {"enabled": True, "extraVolumes": [{"name": "api-keys", "emptyDir": {}}]}},
            "gateway.extraVolumes: the volume name api-keys is the chart's own",
        ),
        (
            {"gateway": {"ingress": {"enabled": True}}},
            "gateway.ingress.enabled=true exposes llmaz-gateway, which is not installed: set gateway.enabled=true",
        ),
        (
            {"gateway": {"httpRoute": {"enabled": True, "parentRefs": [{"name": "public"}]}}},
            "gateway.httpRoute.enabled=true exposes llmaz-gateway, which is not installed",
        ),
        (
            {"gateway": {"enabled": True, "httpRoute": {"enabled": True}}},
            "gateway.httpRoute.parentRefs: name the Gateway the route attaches to",
        ),
    ],
)
def test_a_value_the_chart_cannot_honour_fails_saying_which_and_why(
    helm: Helm, tmp_path: Path, values: dict[str, Any], error: str
) -> None:
    with pytest.raises(HelmError) as failure:
        _template(helm, tmp_path, values, "--api-versions", HTTP_ROUTE_API)
    assert error in failure.value.stderr


def test_an_http_route_without_the_gateway_api_fails_saying_so(helm: Helm, tmp_path: Path) -> None:
    route = {"enabled": True, "parentRefs": [{"name": "public"}]}
    with pytest.raises(HelmError) as failure:
        _template(helm, tmp_path, {"gateway": {"enabled": True, "httpRoute": route}})
    assert "no gateway.networking.k8s.io/v1 HTTPRoute (the Gateway API CRDs are missing)" in failure.value.stderr
