"""config/scheduler, enabled in config/default as its comment says: the second kube-scheduler, its extender
configuration and the manager's extender agree on names, ports and the scheduler name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.controllers.settings import parse_global_config
from llmaz_dev.envtest._assets import module_version
from llmaz_dev.testing.kustomize import default_with_component

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object of `kustomize build config/default` with `components: [../scheduler]`."""
    return default_with_component(tmp_path_factory.mktemp("config"), "scheduler", "gateway")


def _scheduler_config(installed: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """The KubeSchedulerConfiguration the scheduler Deployment mounts."""
    volumes = installed["Deployment", "llmaz-scheduler"]["spec"]["template"]["spec"]["volumes"]
    (name,) = [v["configMap"]["name"] for v in volumes if v["name"] == "config"]
    # Generated with a hash of its content, so that a changed configuration rolls the scheduler.
    assert name.startswith("llmaz-scheduler-config-")
    config: dict[str, Any] = yaml.safe_load(installed["ConfigMap", name]["data"]["config.yaml"])
    return config


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_scheduler_calls_the_extender_the_manager_serves(installed: dict[tuple[str, str], Any]) -> None:
    config = _scheduler_config(installed)
    (extender,) = config["extenders"]
    service = installed["Service", "llmaz-scheduler-extender"]
    (port,) = service["spec"]["ports"]
    assert (
        extender["urlPrefix"]
        == f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}"
    )
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["nodeCacheCapable"]) == (
        "filter",
        "prioritize",
        True,
    )

    manager = installed["Deployment", "llmaz-controller-manager"]
    container = _container(manager)
    (named,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--scheduler-extender-bind-address=:{named['containerPort']}" in container["args"]
    assert service["spec"]["selector"].items() <= manager["spec"]["template"]["metadata"]["labels"].items()


def test_model_pods_are_sent_to_that_scheduler_which_runs_the_project_s_kubernetes_release(
    installed: dict[tuple[str, str], Any],
) -> None:
    config = _scheduler_config(installed)
    (profile,) = config["profiles"]
    global_config = installed["ConfigMap", "llmaz-global-config"]
    assert parse_global_config(global_config).scheduler_name == profile["schedulerName"] == "llmaz-scheduler"
    # Only scheduler-name changes: config.data, with config/default's loader image, is config/default's.
    default = yaml.safe_load((REPO / "config" / "default" / "configmap.yaml").read_text())
    assert global_config["data"] == {**default["data"], "scheduler-name": "llmaz-scheduler"}
    scheduler = installed["Deployment", "llmaz-scheduler"]
    assert scheduler["spec"]["template"]["spec"]["serviceAccountName"] == "llmaz-scheduler"
    release = module_version(REPO / "hack" / "cluster" / "go.mod", "k8s.io/kubernetes")
    assert _container(scheduler)["image"] == f"registry.k8s.io/kube-scheduler:{release}"
    lease = config["leaderElection"]
    assert (lease["resourceNamespace"], scheduler["metadata"]["namespace"]) == ("llmaz-system", "llmaz-system")
