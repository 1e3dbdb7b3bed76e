"""`helm template` of the chart: with the defaults it renders what `kustomize build config/default` does, object by
object, but for the differences listed below; values change what they say; bad values fail with the key named.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.gateway import envoy
from llmaz.gateway.__main__ import parse_args as gateway_args
from llmaz.manager.__main__ import parse_args as manager_args
from llmaz_dev.chartgen.sources import kustomize_build
from llmaz_dev.envtest.helm import Helm, HelmError

from .conftest import CHART, REPO, Key, keyed

RELEASE, NAMESPACE = "llmaz", "llmaz-system"
SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
CUSTOM_GROUPS = ("inference.llmaz.io", "llmaz.io", "monitoring.coreos.com")
HELM_LABELS = {
    "helm.sh/chart": "llmaz-{version}",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/version": "{version}",
}
Objects = dict[Key, dict[str, Any]]
GIE, GIE_CRD = REPO / "config" / "gie", "inference.networking.k8s.io_inferencepools.yaml"


def _without_the_namespace(objects: Objects, _version: str) -> Objects:
    return {key: obj for key, obj in objects.items() if key != ("Namespace", "", NAMESPACE)}


def _with_helm_labels(objects: Objects, version: str) -> Objects:
    labelled = copy.deepcopy(objects)
    for (kind, _, _), obj in labelled.items():
        if kind != "CustomResourceDefinition":
            labels = obj["metadata"].setdefault("labels", {})
            labels.update({name: value.format(version=version) for name, value in HELM_LABELS.items()})
    return labelled


def _with_the_inference_pool_crd(objects: Objects, _version: str) -> Objects:
    return objects | keyed((GIE / GIE_CRD).read_text())


def _with_ownership_on_custom_resources(objects: Objects, _version: str) -> Objects:
    annotated = copy.deepcopy(objects)
    for obj in annotated.values():
        if obj["apiVersion"].split("/")[0] in CUSTOM_GROUPS and obj["kind"] != "CustomResourceDefinition":
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations.update({"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE})
    return annotated


@dataclass(frozen=True)
class Difference:
    what: str
    why: str
    apply: Callable[[Objects, str], Objects]
    """Turns the kustomize objects into what Helm renders."""


# Every way `helm template` of the chart differs from `kustomize build` of the same config on purpose. A difference
# not listed here fails the golden tests.
INTENDED_DIFFERENCES = (
    Difference(
        what="the Namespace llmaz-system is not rendered",
        why="`helm install --create-namespace` creates it; a release that owned it would delete, on uninstall, the "
        "namespace holding the release's own records (and anything else put there)",
        apply=_without_the_namespace,
    ),
    Difference(
        what="Helm's labels (helm.sh/chart, app.kubernetes.io/managed-by, app.kubernetes.io/instance, "
        "app.kubernetes.io/version) on the metadata of every rendered object; not on the CRDs (crds/ is never "
        "templated), selectors or pod templates",
        why="the chart's conventions: `kubectl get all -l app.kubernetes.io/instance=llmaz`; selectors and pod "
        "templates stay as they are, so a chart upgrade alone restarts nothing",
        apply=_with_helm_labels,
    ),
    Difference(
        what="the custom resources (BackendRuntimes, the monitors, the PrometheusRule) carry Helm's ownership "
        "annotations meta.helm.sh/release-name and meta.helm.sh/release-namespace",
        why="Helm sets them on every object it installs anyway; Helm upgrades a custom resource by diffing the new "
        "manifest against the previous one, so without them in the manifest every upgrade patches every "
        "BackendRuntime through llmaz's webhooks, and fails whenever the manager is not serving",
        apply=_with_ownership_on_custom_resources,
    ),
    Difference(
        what="the chart's crds/ also holds the InferencePool CRD of config/gie, which config/default leaves out",
        why="Helm installs a CRD of crds/ only where the cluster lacks it, which is exactly when config/gie is to "
        "be applied by hand; a kustomize install must not apply it over a gateway's own copy",
        apply=_with_the_inference_pool_crd,
    ),
)


def _expected(built: Objects, version: str) -> Objects:
    for difference in INTENDED_DIFFERENCES:
        built = difference.apply(built, version)
    return built


def _template(helm: Helm, *args: str) -> Objects:
    return keyed(helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--include-crds", *args))


def _assert_same_objects(rendered: Objects, expected: Objects) -> None:
    assert sorted(rendered) == sorted(expected), "the chart renders other objects than kustomize builds"
    different = [key for key in expected if rendered[key] != expected[key]]
    details = "\n".join(
        f"--- {key}\nkustomize (with the intended differences):\n{yaml.safe_dump(expected[key])}\n"
        f"helm template:\n{yaml.safe_dump(rendered[key])}"
        for key in different[:3]
    )
    assert not different, f"{len(different)} objects differ: {different}\n{details}"


def _version() -> str:
    chart: dict[str, str] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return chart["version"]


def _build(kustomize: Path, directory: Path) -> Objects:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in kustomize_build(kustomize, directory)}  # fmt: skip


def test_the_default_values_render_what_kustomize_builds_of_config_default(helm: Helm, kustomize: Path) -> None:
    expected = _expected(_build(kustomize, REPO / "config" / "default"), _version())
    _assert_same_objects(_template(helm), expected)


def test_the_gateway_renders_what_enabling_its_component_in_config_default_builds(
    helm: Helm, kustomize: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    kustomization = config / "default" / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text().replace("# components: [../gateway]\n", "components: [../gateway]\n")
    )
    expected = _expected(_build(kustomize, config / "default"), _version())
    assert ("Deployment", NAMESPACE, "llmaz-gateway") in expected
    _assert_same_objects(_template(helm, "--set", "gateway.enabled=true"), expected)


def test_the_envoy_data_plane_renders_what_enabling_config_gateway_envoy_builds(
    helm: Helm, kustomize: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    kustomization = config / "default" / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text().replace("# components: [../gateway-envoy]\n", "components: [../gateway-envoy]\n")
    )
    expected = _expected(_build(kustomize, config / "default"), _version())
    pod = expected[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["gateway", "envoy"]
    # The chart's one difference: the modes on the pods, which roll them when a mode changes (kustomize's hashed
    # ConfigMap name does that there).
    annotations = expected[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["metadata"]["annotations"]
    annotations["llmaz.io/envoy-modes"] = "BUFFERED-FailClose"
    rendered = _template(helm, "--set", "gateway.enabled=true", "--set", "gateway.dataPlane=envoy")
    _assert_same_objects(rendered, expected)


@pytest.mark.parametrize("body_mode", envoy.BODY_MODES)
@pytest.mark.parametrize("failure_mode", envoy.FAILURE_MODES)
def test_the_envoy_bootstrap_follows_the_body_and_failure_modes_of_values(
    helm: Helm, body_mode: str, failure_mode: str
) -> None:
    rendered = _template(
        helm,
        *("--set", "gateway.enabled=true", "--set", "gateway.dataPlane=envoy"),
        *("--set", f"gateway.envoy.bodyMode={body_mode}", "--set", f"gateway.envoy.failureMode={failure_mode}"),
        *(
            "--set",
            "gateway.envoy.image.repository=registry.example/llmaz-envoy",
            "--set-string",
            "gateway.envoy.image.tag=9",
        ),
    )
    (config_map,) = [obj for key, obj in rendered.items() if key[0] == "ConfigMap" and "envoy" in key[2]]
    bootstrap = json.loads(config_map["data"]["envoy.json"])
    assert bootstrap == envoy.bootstrap(envoy.POD, body_mode=body_mode, failure_mode=failure_mode)
    pod = rendered[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["containers"] if c["name"] == "envoy"]
    assert sidecar["image"] == "registry.example/llmaz-envoy:9"
    annotations = rendered[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["llmaz.io/envoy-modes"] == f"{body_mode}-{failure_mode}"


def test_the_python_data_plane_renders_no_envoy(helm: Helm) -> None:
    rendered = _template(helm, "--set", "gateway.enabled=true")
    assert [key for key in rendered if "envoy" in key[2]] == []
    pod = rendered[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["gateway"]


def test_prometheus_renders_config_prometheus_when_the_cluster_has_servicemonitors(helm: Helm, kustomize: Path) -> None:
    built = _build(kustomize, REPO / "config" / "default") | _build(kustomize, REPO / "config" / "prometheus")
    expected = _expected(built, _version())
    rendered = _template(helm, "--set", "prometheus.enabled=true", "--api-versions", SERVICE_MONITOR)
    _assert_same_objects(rendered, expected)


def test_grafana_dashboards_render_the_configmaps_of_config_grafana_with_their_json_unchanged(
    helm: Helm, kustomize: Path
) -> None:
    dashboards = _build(kustomize, REPO / "config" / "grafana")
    expected = _expected(_build(kustomize, REPO / "config" / "default") | dashboards, _version())
    rendered = _template(helm, "--set", "grafana.dashboards.enabled=true")
    _assert_same_objects(rendered, expected)
    assert len(dashboards) == 4
    for key, config_map in dashboards.items():
        assert rendered[key]["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert rendered[key]["data"] == config_map["data"]  # legend formats' {{label}} reach Grafana as they are


def test_prometheus_without_the_servicemonitor_crd_fails_saying_so(helm: Helm) -> None:
    with pytest.raises(HelmError, match=r"no monitoring\.coreos\.com/v1 ServiceMonitor") as failure:
        _template(helm, "--set", "prometheus.enabled=true")
    assert "Prometheus Operator's CRD is missing" in failure.value.stderr


def _manager(objects: Objects, namespace: str = NAMESPACE) -> dict[str, Any]:
    container: dict[str, Any] = objects[("Deployment", namespace, "llmaz-controller-manager")]["spec"]["template"][
        "spec"
    ]["containers"][0]
    return container


def test_image_replicas_resources_and_extra_flags_come_from_values(helm: Helm) -> None:
    rendered = _template(
        helm,
        "--set",
        "controllerManager.manager.image.repository=registry.example/llmaz",
        "--set-string",
        "controllerManager.manager.image.tag=1.2",
        "--set",
        "controllerManager.replicas=3",
        "--set",
        "controllerManager.manager.resources.limits.memory=1Gi",
        "--set",
        "controllerManager.manager.extraArgs={--log-level=debug,--max-concurrent-reconciles=4}",
        "--set",
        "gateway.enabled=true",
    )
    manager = _manager(rendered)
    assert manager["image"] == "registry.example/llmaz:1.2"
    assert manager["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}
    assert manager["args"][0] == f"--namespace={NAMESPACE}"
    assert manager["args"][-2:] == ["--log-level=debug", "--max-concurrent-reconciles=4"]
    assert rendered[("Deployment", NAMESPACE, "llmaz-controller-manager")]["spec"]["replicas"] == 3
    gateway = rendered[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]["containers"][0]
    assert gateway["image"] == "registry.example/llmaz:1.2", "the gateway runs the manager's image by default"


def test_a_tracing_endpoint_turns_tracing_on_in_the_manager_and_the_gateway_before_their_extra_flags(
    helm: Helm,
) -> None:
    endpoint = "http://jaeger-collector.observability:4318"
    rendered = _template(
        helm,
        "--set", f"tracing.otlpEndpoint={endpoint}",
        "--set", "tracing.sampleRatio=0.25",
        "--set", "gateway.enabled=true",
        "--set", "gateway.extraArgs={--log-level=debug}",
    )  # fmt: skip
    flags = [f"--otlp-endpoint={endpoint}", "--trace-sample-ratio=0.25"]
    assert _manager(rendered)["args"][-2:] == flags
    gateway = rendered[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]["containers"][0]
    assert gateway["args"][-3:] == [*flags, "--log-level=debug"]
    # The flags are the processes' own: both parse what the chart renders.
    assert gateway_args(gateway["args"]).otlp_endpoint == f"{endpoint}/v1/traces"
    assert manager_args(_manager(rendered)["args"]).trace_sample_ratio == 0.25
    off = _template(helm, "--set", "gateway.enabled=true", "--set", "tracing.sampleRatio=0.5")
    gateway = off[("Deployment", NAMESPACE, "llmaz-gateway")]["spec"]["template"]["spec"]["containers"][0]
    every = [*_manager(off)["args"], *gateway["args"]]
    assert not [flag for flag in every if "otlp" in flag or "trace" in flag], "no endpoint: tracing off"


def test_an_empty_tag_is_the_charts_app_version(helm: Helm) -> None:
    rendered = _template(helm, "--set", "controllerManager.manager.image.tag=")
    assert _manager(rendered)["image"] == f"controller:{_version()}"


def test_backend_images_and_the_global_settings_come_from_values(helm: Helm) -> None:
    settings = "scheduler-name: my-scheduler\ninit-container-image: registry.example/loader:1\n"
    rendered = _template(
        helm,
        "--set",
        "backendRuntime.tensorrt_llm.image.repository=registry.example/trt",
        "--set-string",
        "backendRuntime.tensorrt_llm.image.tag=26.01",
        "--set-string",
        f"globalConfig.configData={settings}",
    )
    backend = rendered[("BackendRuntime", "", "tensorrt-llm")]["spec"]
    assert (backend["image"], backend["version"]) == ("registry.example/trt", "26.01")
    config = rendered[("ConfigMap", NAMESPACE, "llmaz-global-config")]["data"]["config.data"]
    assert config == settings
    assert "{{ .ModelPath }}" in backend["recommendedConfigs"][0]["args"], "placeholders reach the object unchanged"


def test_backends_can_be_left_out(helm: Helm) -> None:
    rendered = _template(helm, "--set", "backendRuntime.enabled=false")
    assert not [key for key in rendered if key[0] == "BackendRuntime"]


def test_another_release_namespace_is_used_everywhere(helm: Helm) -> None:
    text = helm("template", "other-name", str(CHART), "-n", "models", "--set", "gateway.enabled=true")
    assert "llmaz-system" not in text
    rendered = keyed(text)
    assert _manager(rendered, "models")["args"][0] == "--namespace=models"
    webhooks = rendered[("ValidatingWebhookConfiguration", "", "llmaz-validating-webhook-configuration")]
    assert {hook["clientConfig"]["service"]["namespace"] for hook in webhooks["webhooks"]} == {"models"}
    binding = rendered[("RoleBinding", "models", "llmaz-manager-rolebinding")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llmaz-controller-manager", "namespace": "models"}
    ]


@pytest.mark.parametrize(
    ("args", "where", "error"),
    [
        (["--set", "controllerManager.replica=3"], "/controllerManager", "additional properties 'replica' not allowed"),
        (["--set", "prometheus.enable=true"], "/prometheus", "additional properties 'enable' not allowed"),
        (
            ["--set", "backendRuntime.vllm.imag.tag=x"],
            "/backendRuntime/vllm",
            "additional properties 'imag' not allowed",
        ),
        (["--set", "fullnameOverride=llmaz"], "", "additional properties 'fullnameOverride' not allowed"),
        (["--set", "gateway.replicas=two"], "/gateway/replicas", "got string, want integer"),
        (
            ["--set", "tracing.otlpEndpoint=jaeger:4318"],
            "/tracing/otlpEndpoint",
            "'jaeger:4318' does not match pattern",
        ),
        (["--set", "tracing.sampleRatio=2"], "/tracing/sampleRatio", "maximum: got 2, want 1"),
        (["--set", "controllerManager=null"], "", "missing property 'controllerManager'"),
    ],
)
def test_a_misspelt_or_mistyped_value_fails_naming_it(helm: Helm, args: list[str], where: str, error: str) -> None:
    with pytest.raises(HelmError) as failure:
        _template(helm, *args)
    assert "values don't meet the specifications of the schema" in failure.value.stderr
    assert f"- at '{where}': {error}" in failure.value.stderr


def test_an_invalid_values_file_fails_naming_every_bad_field(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "backendRuntime:\n  vllm:\n    image:\n      tag: 0.8\n"  # a number: YAML reads 0.8 as a float
        "gateway:\n  enable: true\n"
        "controllerManager:\n  manager:\n    resources:\n      limit: {cpu: 1}\n"
    )
    with pytest.raises(HelmError) as failure:
        _template(helm, "-f", str(values))
    stderr = failure.value.stderr
    assert "- at '/backendRuntime/vllm/image/tag': got number, want string" in stderr
    assert "- at '/gateway': additional properties 'enable' not allowed" in stderr
    assert "- at '/controllerManager/manager/resources': additional properties 'limit' not allowed" in stderr


@pytest.mark.parametrize(
    ("toggle", "says"),
    [
        ("leaderWorkerSet", "Install LeaderWorkerSet v0.6.2 first"),
        ("open-webui", "does not bundle Open WebUI"),
        ("envoy-gateway", "does not bundle Envoy Gateway"),
        ("envoy-ai-gateway", "does not bundle Envoy AI Gateway"),
        ("kube-scheduler", "does not bundle InftyAI's kube-scheduler plugin"),
    ],
)
def test_enabling_what_the_chart_does_not_bundle_fails_saying_what_to_do(helm: Helm, toggle: str, says: str) -> None:
    with pytest.raises(HelmError, match=re.escape(f"{toggle}.enabled=true: ")) as failure:
        _template(helm, "--set", f"{toggle}.enabled=true")
    assert says in failure.value.stderr


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ("scheduler-name: default-scheduler\n", "init-container-image is required"),
        (
            "scheduler-name: x\n# init-container-image: inftyai/model-loader:v0.0.10\n",
            "init-container-image is required",
        ),
        ("init-container-image: ''\n", "init-container-image is required"),
        ("- init-container-image: x\n", "globalConfig.configData must be YAML settings"),
    ],
)
def test_global_settings_without_a_model_loader_image_are_refused(helm: Helm, settings: str, error: str) -> None:
    with pytest.raises(HelmError, match=error):
        _template(helm, "--set-string", f"globalConfig.configData={settings}")


def test_helm_lint_finds_nothing_to_fix(helm: Helm) -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
