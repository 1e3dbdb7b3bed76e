"""llmaz installed with Helm on the real node, as users install it: the chart with the images built here, the
gateway enabled, a model really served, an upgrade under traffic, and an uninstall leaving the CRDs.

The upgrade follows docs/operations.md (Upgrade): the chart's CRDs applied server-side, then `helm upgrade
--reset-then-reuse-values` to another manager image, which rolls both the manager and the gateway (it runs the
manager's image). Throughout, a client chats through the gateway twice a second and OpenModels are created ten
times a second through admission: none of either may fail. The image is the same build under its other local name,
so the upgrade exercises the rollout itself, not a change of behaviour between builds.

Node tier only, and disruptive (it runs after the other node tests): the session installed llmaz with `make deploy`
of config/node, so the test first stops that manager and removes that install but for the CRDs and the namespace,
and puts it back afterwards whatever happened (`install_llmaz`, as the session did). The chart gets config/node's
local images through values: the manager image `make image-build` made, the global settings of
config/node/global-config.yaml (the local model loader) and the llama.cpp server image of config/node/llamacpp.yaml.
The chart does not template BackendRuntime resources, so the Playground (config/samples/tiny-llama.yaml) asks
for the small resources config/node gives the llamacpp backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import ClusterOperationError
from llmaz_dev.envtest.helm import Helm, HelmError
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.node.cluster import DEV_TAG
from llmaz_dev.envtest.node.install import install_llmaz
from llmaz_dev.envtest.objectstore import ObjectStore

from .charts import CHART, CRD_NAMES, NAMESPACE, RELEASE, labelled_leftovers, live, release_objects, release_records
from .conftest import REPO
from .managers import DEPLOYMENT, DeployedManager
from .serving import GATEWAY, GATEWAY_NAMESPACE, credentials, first_answer, gateway_url, lb_url, paced, routable
from .support import Environment, creating_openmodels_steadily, eventually, open_model, pod_ready, wait_playground_ready

pytestmark = [pytest.mark.tier("node"), pytest.mark.disruptive]
NODE = REPO / "config" / "node"
SAMPLE = REPO / "config" / "samples" / "tiny-llama.yaml"
PLAYGROUND = "tiny-llama"


@pytest.fixture
def helm(e2e: Environment, tmp_path: Path) -> Iterator[Helm]:
    """Helm on the node, with the session's kustomize install of llmaz removed for the test and put back after."""
    assert isinstance(e2e.manager, DeployedManager)
    image = find_images(["manager"])["manager"].image
    e2e.manager.scale(0)  # no manager left to re-create what is deleted next (its certificate Secret, say)
    eventually(
        lambda: not e2e.items("pods", NAMESPACE, "control-plane=controller-manager"),
        within=120,
        what="the kustomize-installed manager's pods gone, terminating ones included",
    )
    built = yaml.safe_load_all(e2e.kubectl("kustomize", str(NODE)))
    removed = [doc for doc in built if doc and doc["kind"] not in ("CustomResourceDefinition", "Namespace")]
    e2e.kubectl(
        "delete", "--ignore-not-found", "--wait", "--timeout=180s", "-f", "-", input=yaml.safe_dump_all(removed)
    )
    helm = Helm(tmp_path / "helm", e2e.cluster)
    try:
        yield helm
    finally:
        with contextlib.suppress(HelmError):
            helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=3m")
        install_llmaz(e2e.cluster, image)


def _node_values(manager_image: str) -> dict[str, Any]:
    """config/node's images as chart values."""
    repository, tag = manager_image.rsplit(":", 1)
    llamacpp = {op["path"]: op["value"] for op in yaml.safe_load((NODE / "llamacpp.yaml").read_text())}
    return {
        "controllerManager": {"manager": {"image": {"repository": repository, "tag": tag}}},
        "gateway": {"enabled": True},
        "globalConfig": {"configData": _node_config_data()},
        "backendRuntime": {
            "llamacpp": {"image": {"repository": llamacpp["/spec/image"], "tag": str(llamacpp["/spec/version"])}}
        },
    }


def _node_config_data() -> str:
    """The settings config/node installs as one config.data: config/default's, with the keys config/node's
    global-config.yaml sets beside config.data (which override it) written in."""
    default = yaml.safe_load((REPO / "config" / "default" / "configmap.yaml").read_text())
    settings = yaml.safe_load(default["data"]["config.data"])
    node = yaml.safe_load((NODE / "global-config.yaml").read_text())
    assert "config.data" not in node["data"], "config/node sets single settings, not config.data"
    settings.update(node["data"])
    return yaml.safe_dump(settings, sort_keys=False)


def _sample(store: ObjectStore) -> list[dict[str, Any]]:
    """config/samples/tiny-llama.yaml, its Playground with config/node's llamacpp resources."""
    documents = [doc for doc in yaml.safe_load_all(SAMPLE.read_text()) if doc]
    (playground,) = [doc for doc in documents if doc["kind"] == "Playground"]
    config = playground["spec"]["backendRuntimeConfig"]
    assert {"name": "AWS_ENDPOINT_URL", "value": store.url} in config["envs"], "the sample names the node's store"
    ops = yaml.safe_load((NODE / "llamacpp.yaml").read_text())
    config["resources"] = next(op["value"] for op in ops if op["path"] == "/spec/recommendedConfigs/0/resources")
    return documents


def _manager_pods(e2e: Environment) -> list[dict[str, Any]]:
    pods = e2e.items("pods", NAMESPACE, "control-plane=controller-manager")
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def _running(e2e: Environment, image: str) -> bool:
    pods = _manager_pods(e2e)
    return len(pods) == 2 and all(pod_ready(p) and p["spec"]["containers"][0]["image"] == image for p in pods)


def _admitting(e2e: Environment) -> bool:
    try:
        e2e.kubectl(
            "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(open_model("admission-probe"))
        )
    except ClusterOperationError:
        return False
    return True


def _gateway_pods(e2e: Environment) -> list[dict[str, Any]]:
    pods = e2e.items("pods", GATEWAY_NAMESPACE, "app.kubernetes.io/component=gateway")
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def _gateway_running(e2e: Environment, image: str) -> bool:
    pods = _gateway_pods(e2e)
    return len(pods) == 2 and all(pod_ready(p) and p["spec"]["containers"][0]["image"] == image for p in pods)


def test_helm_installs_llmaz_that_serves_a_model_upgrades_it_under_chats_and_creates_failing_none_and_uninstalls_it(
    e2e: Environment, namespace: str, helm: Helm, object_store: ObjectStore, tmp_path: Path
) -> None:
    image = find_images(["manager"])["manager"].image
    values = tmp_path / "node-values.yaml"
    values.write_text(yaml.safe_dump(_node_values(image)))

    helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values), "--wait", "--timeout=3m")
    eventually(lambda: _running(e2e, image), what=f"two Ready manager pods running {image}")
    eventually(lambda: _admitting(e2e), within=120, what="admission through the webhook Service")
    print(e2e.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))

    e2e.apply([credentials()], namespace)
    sample = _sample(object_store)
    e2e.apply(sample, namespace)
    try:
        wait_playground_ready(e2e, namespace, PLAYGROUND, replicas=1)
        url = lb_url(e2e, namespace, PLAYGROUND)
        first_answer(url, PLAYGROUND)

        eventually(lambda: _gateway_running(e2e, image), what="two Ready gateway pods")
        routable(e2e, PLAYGROUND)

        upgraded = f"{image.rsplit(':', 1)[0]}:{DEV_TAG}"  # the same build under its other local name
        repository, tag = upgraded.rsplit(":", 1)
        with (
            paced(gateway_url(e2e), PLAYGROUND, period=0.5) as chats,
            creating_openmodels_steadily(e2e, f"helm-{namespace.rsplit('-', 1)[-1]}") as creates,
        ):
            eventually(lambda: len(chats.answers) >= 4, what="the client answered before the upgrade")
            e2e.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
            helm(
                "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reset-then-reuse-values", "--wait",
                "--timeout=3m",
                "--set", f"controllerManager.manager.image.repository={repository}",
                "--set-string", f"controllerManager.manager.image.tag={tag}",
            )  # fmt: skip
            for deployment in (DEPLOYMENT, GATEWAY):
                e2e.kubectl("rollout", "status", f"deployment/{deployment}", "-n", NAMESPACE, "--timeout=180s")
            eventually(lambda: _gateway_running(e2e, upgraded), what=f"two Ready gateway pods running {upgraded}")
            seen = len(chats.answers)
            eventually(lambda: len(chats.answers) >= seen + 4, what="4 more answers through the new gateway pods")
        creates.assert_none_failed()
        failed = [a for a in chats.answers if a.status != 200]
        assert failed == [], f"{len(failed)} chats failed: {[a.body[:200] for a in failed]}\n{chats.timeline()}"
        print(f"upgrade under traffic: {len(chats.answers)} chats through the gateway, none failed")
        eventually(lambda: _running(e2e, upgraded), what=f"two Ready manager pods running {upgraded}")
        first_answer(url, PLAYGROUND)

        rendered = release_objects(helm)
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=3m")
        left = [f"{o['kind']} {o['metadata']['name']}" for o in rendered if live(e2e.cluster, o) is not None]
        assert left == [], "helm uninstall left these"
        assert release_records(e2e.cluster) == []
        assert labelled_leftovers(e2e.cluster, {"deployments", "pods", "services", "secrets", "backendruntimes"}) == []
        for crd in CRD_NAMES:
            e2e.kubectl("get", "crd", crd)
        assert e2e.get("playgrounds", PLAYGROUND, namespace) is not None, "llmaz objects stay with their CRDs"
        eventually(lambda: not _manager_pods(e2e), what="the manager's pods gone")
    finally:
        e2e.kubectl("delete", "-n", namespace, "-f", str(SAMPLE), "--ignore-not-found", "--wait=false")
