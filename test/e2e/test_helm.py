"""llmaz installed with Helm, as llmaz users install it: `helm install`, `helm upgrade`, `helm uninstall`.

The session's cluster already has llmaz from config/default, and a release of the same (fixed) names would collide
with it; so the release test starts a simulated cluster of its own (~30 s). Its kwok nodes run no container: the
manager's pods turn Running and Ready with no process behind them, nothing serves the webhooks, and so:
- "installed" is: `helm install --wait` returns, the Deployment is Available with its replicas, every object of
  the release exists as Helm rendered it (the webhook configurations included), and the four CRDs are Established
  and served;
- the manager's own writes (the certificate in its Secret, the CA in the webhook configurations) are played by
  the test, to check that `helm upgrade` keeps them;
- no admission request is made: the API server would look for the webhook Service's name in this host's DNS.
That the installed manager really admits, reconciles and serves a model is the node tier's test
(test_helm_node.py). The refusal to install over a kustomize install runs on the session's cluster.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.envtest.helm import Helm, HelmError
from llmaz_dev.envtest.simulated import SimulatedCluster

from .charts import (
    CHART,
    CRD_NAMES,
    NAMESPACE,
    RELEASE,
    labelled_leftovers,
    live,
    missing_from,
    release_objects,
    release_records,
    types_of,
)
from .managers import DEPLOYMENT
from .support import Environment, conditions, eventually

WEBHOOK_CONFIGURATIONS = (
    ("mutatingwebhookconfiguration", "llmaz-mutating-webhook-configuration"),
    ("validatingwebhookconfiguration", "llmaz-validating-webhook-configuration"),
)
CERT_SECRET = "llmaz-webhook-server-cert"
FAKE_CA = base64.b64encode(b"the manager's CA").decode()


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    """A simulated cluster with nothing of llmaz installed (the LeaderWorkerSet CRD and controller only)."""
    cluster = SimulatedCluster(work_dir=tmp_path_factory.mktemp("helm-cluster") / "cluster")
    with cluster:
        yield cluster


def _deployment(cluster: SimulatedCluster) -> dict[str, Any]:
    found = live(
        cluster,
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE}},
    )
    assert found is not None
    return found


def _available(cluster: SimulatedCluster, replicas: int) -> dict[str, Any] | None:
    deployment = _deployment(cluster)
    status = deployment.get("status") or {}
    ready = conditions(deployment).get("Available", ("False", None))[0] == "True"
    settled = status.get("updatedReplicas") == status.get("availableReplicas") == status.get("replicas") == replicas
    return deployment if ready and settled and deployment["spec"]["replicas"] == replicas else None


def _play_the_manager(cluster: SimulatedCluster) -> None:
    """What the running manager writes: its certificate into the Secret and its CA into every webhook."""
    for kind, name in WEBHOOK_CONFIGURATIONS:
        count = len(json.loads(cluster.kubectl("get", kind, name, "-o", "json"))["webhooks"])
        patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": FAKE_CA} for i in range(count)]
        cluster.kubectl("patch", kind, name, "--type=json", "-p", json.dumps(patch))
    data = {"ca.crt": FAKE_CA, "tls.crt": FAKE_CA, "tls.key": FAKE_CA}
    cluster.kubectl("patch", "secret", CERT_SECRET, "-n", NAMESPACE, "-p", json.dumps({"data": data}))


def _what_the_manager_wrote(cluster: SimulatedCluster) -> tuple[set[str], dict[str, str]]:
    bundles = set()
    for kind, name in WEBHOOK_CONFIGURATIONS:
        configuration = json.loads(cluster.kubectl("get", kind, name, "-o", "json"))
        bundles |= {hook["clientConfig"].get("caBundle", "") for hook in configuration["webhooks"]}
    secret = json.loads(cluster.kubectl("get", "secret", CERT_SECRET, "-n", NAMESPACE, "-o", "json"))
    return bundles, secret.get("data") or {}


def _backend_versions(cluster: SimulatedCluster) -> dict[str, str]:
    backends = json.loads(cluster.kubectl("get", "backendruntimes", "-o", "json"))["items"]
    return {b["metadata"]["name"]: b["metadata"]["resourceVersion"] for b in backends}


@pytest.mark.simulated
def test_helm_installs_upgrades_and_uninstalls_llmaz_leaving_only_the_crds(
    own_cluster: SimulatedCluster, tmp_path: Path
) -> None:
    cluster = own_cluster
    helm = Helm(tmp_path / "helm", cluster)

    notes = helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait", "--timeout=3m",
        "--set", "gateway.enabled=true",
    )  # fmt: skip
    assert f"is installed in namespace {NAMESPACE}" in notes
    assert "is served by the Service <name>-lb in its namespace, port 8080" in notes
    assert f"http://llmaz-gateway.{NAMESPACE}.svc/v1 (port 80)" in notes
    assert "WARNING: the manager image is the placeholder controller:latest" in notes
    assert "LeaderWorkerSet is not installed" not in notes
    for crd in CRD_NAMES:
        established = cluster.kubectl(
            "get", "crd", crd, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        )
        assert established == "True", crd
    cluster.kubectl("get", "openmodels,playgrounds,services.inference.llmaz.io", "-A")  # served
    rendered = release_objects(helm)
    for obj in rendered:
        found = live(cluster, obj)
        assert found is not None, f"{obj['kind']} {obj['metadata']['name']} was not installed"
        assert missing_from(obj, found) == [], f"{obj['kind']} {obj['metadata']['name']}"
    kinds = {obj["kind"] for obj in rendered}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "BackendRuntime"} <= kinds
    assert ("Deployment", "llmaz-gateway") in {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert not kinds & {"Namespace", "CustomResourceDefinition"}, "--create-namespace and crds/ make those"
    assert eventually(lambda: _available(cluster, 2), what="the manager Deployment Available with 2 replicas")

    _play_the_manager(cluster)
    written = _what_the_manager_wrote(cluster)
    backends = _backend_versions(cluster)
    assert len(backends) == 6
    helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--wait", "--timeout=3m",
        "--set", "controllerManager.replicas=3",
        "--set", "controllerManager.manager.extraArgs={--log-level=debug}",
    )  # fmt: skip
    status = json.loads(helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))
    assert (status["version"], status["info"]["status"]) == (2, "deployed")
    deployment = eventually(lambda: _available(cluster, 3), what="the manager Deployment rolled out with 3 replicas")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == f"--namespace={NAMESPACE}"
    assert container["args"][-1] == "--log-level=debug"
    assert _what_the_manager_wrote(cluster) == written, "the upgrade kept the manager's certificate and CA"
    assert _backend_versions(cluster) == backends, "unchanged BackendRuntimes are not patched"

    helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=3m")
    gone = [f"{o['kind']} {o['metadata']['name']}" for o in rendered if live(cluster, o) is not None]
    assert gone == [], "helm uninstall left these"
    assert labelled_leftovers(cluster, types_of(rendered) | {"pods", "replicasets"}) == []
    assert release_records(cluster) == []
    assert sorted(cluster.kubectl("get", "crds", "-o", "name").split()) == sorted(
        [f"customresourcedefinition.apiextensions.k8s.io/{crd}" for crd in CRD_NAMES]
        + ["customresourcedefinition.apiextensions.k8s.io/leaderworkersets.leaderworkerset.x-k8s.io"]
    ), "only the CRDs stay (with the LeaderWorkerSet CRD, which the cluster came with)"
    eventually(lambda: not cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name").strip(), what="no pods")


@pytest.mark.tier("simulated", "node")
def test_helm_refuses_to_install_over_a_kustomize_install_naming_what_it_would_take_over(
    e2e: Environment, tmp_path: Path
) -> None:
    helm = Helm(tmp_path / "helm", e2e.cluster)
    before = e2e.must_get("services", "llmaz-webhook-service", NAMESPACE)["metadata"]

    with pytest.raises(HelmError) as refused:
        helm("install", RELEASE, str(CHART), "-n", NAMESPACE)
    stderr = refused.value.stderr
    assert "Unable to continue with install" in stderr
    assert f'in namespace "{NAMESPACE}" exists and cannot be imported into the current release' in stderr
    assert 'missing key "app.kubernetes.io/managed-by": must be set to "Helm"' in stderr
    assert f'missing key "meta.helm.sh/release-name": must be set to "{RELEASE}"' in stderr
    assert helm("list", "-n", NAMESPACE, "-q").strip() == ""
    after = e2e.must_get("services", "llmaz-webhook-service", NAMESPACE)["metadata"]
    assert after["resourceVersion"] == before["resourceVersion"], "the refused install changed nothing"
