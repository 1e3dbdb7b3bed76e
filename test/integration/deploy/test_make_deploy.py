"""`make deploy` as users run it, on a control plane of its own: config/default with config/scheduler enabled (as its
comment says), a manager image and a model-loader image. The loader image changes the global config's
init-container-image and nothing else: config/scheduler's scheduler-name survives, and so does config.data.

Without a kubelet nothing runs; what is checked is what the API server holds after the apply.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.controllers.settings import parse_global_config
from llmaz_dev.envtest import ControlPlane

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "llmaz-system"
MANAGER_IMAGE = "registry.example:5000/llmaz:deploy-test"
LOADER_IMAGE = "registry.example:5000/llmaz-model-loader:deploy-test"


@pytest.fixture(scope="module")
def fresh_cluster() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        yield plane


@pytest.fixture(scope="module")
def with_scheduler() -> Iterator[str]:
    """A copy of config/ with config/scheduler enabled in config/default, inside the repository (kustomize takes
    only relative paths, and `make deploy` resolves DEPLOY_CONFIG from the repository); its DEPLOY_CONFIG."""
    scratch = REPO / ".dev" / f"deploy-test-{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "config", scratch / "config")
    default = scratch / "config" / "default" / "kustomization.yaml"
    text = default.read_text()
    assert "# components: [../gateway]\n" in text
    default.write_text(text.replace("# components: [../gateway]\n", "components: [../scheduler]\n"))
    try:
        yield str((scratch / "config" / "default").relative_to(REPO))
    finally:
        shutil.rmtree(scratch)


def make_deploy(cluster: ControlPlane, *variables: str) -> None:
    assert cluster.kubectl_path is not None
    kubectl = f"{cluster.kubectl_path} --kubeconfig={cluster.kubeconfig}"
    # Only what is passed here: a LOADER_IMG in the environment would count as given.
    env = {key: value for key, value in os.environ.items() if key not in ("LOADER_IMG", "IMG", "DEPLOY_CONFIG")}
    env["KUBECACHEDIR"] = str(cluster.scratch_dir / "kubectl-cache")
    argv = ["make", "--no-print-directory", "deploy", f"KUBECTL={kubectl}", *variables]
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"make deploy failed:\n{result.stdout}\n{result.stderr}"


def _global_config(cluster: ControlPlane) -> dict[str, Any]:
    found: dict[str, Any] = cluster.admin_client().request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/llmaz-global-config"
    )
    return found


def _default_config_data() -> str:
    config_map = yaml.safe_load((REPO / "config" / "default" / "configmap.yaml").read_text())
    text: str = config_map["data"]["config.data"]
    return text


def test_a_loader_image_keeps_the_scheduler_name_config_scheduler_sets(
    fresh_cluster: ControlPlane, with_scheduler: str
) -> None:
    cluster = fresh_cluster
    make_deploy(cluster, f"DEPLOY_CONFIG={with_scheduler}", f"IMG={MANAGER_IMAGE}", f"LOADER_IMG={LOADER_IMAGE}")
    config_map = _global_config(cluster)
    settings = parse_global_config(config_map)
    assert (settings.scheduler_name, settings.init_container_image) == ("llmaz-scheduler", LOADER_IMAGE)
    assert config_map["data"]["config.data"] == _default_config_data()  # every other setting as config/default has it
    deployments = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
    manager = cluster.admin_client().request("GET", f"{deployments}/llmaz-controller-manager")
    assert manager["spec"]["template"]["spec"]["containers"][0]["image"] == MANAGER_IMAGE
    assert cluster.admin_client().request("GET", f"{deployments}/llmaz-scheduler")["spec"]["replicas"] == 1

    # Deployed again without a loader image: config/default's comes back, the scheduler name stays. No manager runs
    # here to admit the re-applied BackendRuntimes, so its webhook configurations go first (the apply restores them).
    for kind in ("mutating", "validating"):
        cluster.kubectl("delete", f"{kind}webhookconfiguration", f"llmaz-{kind}-webhook-configuration")
    make_deploy(cluster, f"DEPLOY_CONFIG={with_scheduler}", f"IMG={MANAGER_IMAGE}")
    settings = parse_global_config(_global_config(cluster))
    default_image = yaml.safe_load(_default_config_data())["init-container-image"]
    assert (settings.scheduler_name, settings.init_container_image) == ("llmaz-scheduler", default_image)
