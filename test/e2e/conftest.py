"""The e2e tier: llmaz in a whole cluster, where pods are created, scheduled, become Ready and are collected.

Which cluster (`E2E_CLUSTER`):
- `simulated` (default): a `SimulatedCluster` started for the session (kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok nodes, the LeaderWorkerSet controller). llmaz is installed from `config/default`; its
  Deployment is scaled to 0 and the manager runs instead as local processes with the Deployment's arguments and its
  ServiceAccount's token (only the generated RBAC applies); the webhook configurations are `config/local`'s, by URL.
- `node`: a `NodeCluster` (one real node: containerd, kubelet, kube-proxy, kube-router, CoreDNS) with the images of
  `make image-build` imported. llmaz is installed as users install it, `make deploy` of `config/node` with the
  local manager image: its pods really run, and admission goes through the webhook Service.
- `migration` (`make test-migration LLMAZ_GO_SRC=<llmaz checkout>`, opt-in): the same real node with nothing of
  llmaz installed and Go llmaz's image (hack/llmaz-go/build.sh) beside ours; its test installs Go llmaz, switches
  to this one and back.
- `USE_EXISTING_CLUSTER=true`: the cluster of `KUBECONFIG` (kind from `make test-e2e`, or yours), where llmaz is
  already deployed (`make deploy`), and kwok and LeaderWorkerSet are installed. The simulated node pools are
  created there if missing, and every test namespace carries a `type=kwok` node selector (honoured where the
  PodNodeSelector admission plugin is on, as in the kind cluster `make test-e2e` creates).

Every test here carries the `e2e` marker; tests marked `disruptive` (they stop or kill the manager) run last.
`tier(...)` names the tiers a test runs on (default: simulated only); each run keeps the tests of its tier.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import yaml

from llmaz_dev.envtest import Cluster, ExistingCluster
from llmaz_dev.envtest._rest import ApiError
from llmaz_dev.envtest.forward import TcpForwarder
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.node import NodeCluster
from llmaz_dev.envtest.node.install import install_llmaz
from llmaz_dev.envtest.objectstore import ObjectStore, tiny_lora, tiny_model
from llmaz_dev.envtest.simulated import SimulatedCluster, default_node_pools
from llmaz_dev.envtest.simulated.nodes import node_manifests

from .managers import DEPLOYMENT, NAMESPACE, DeployedManager, LocalManagers
from .serving import ADAPTER_KEY, BUCKET, KEY, OTHER_MODELS_ADAPTER_KEY, node_of
from .support import Environment, ModelNames, eventually, fresh_namespace

REPO = Path(__file__).resolve().parents[2]
_HERE = Path(__file__).parent
TIERS = ("simulated", "node", "migration")
# envoy: the Envoy data plane's image (config/gateway-envoy), on the node for a gateway switched to that variant.
NODE_IMAGES = ("pause", "manager", "loader", "envoy", "llama-server")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "disruptive: stops or kills the llmaz manager; runs after the other e2e tests")
    config.addinivalue_line("markers", "simulated: tests the simulated cluster itself; deselected on other clusters")
    config.addinivalue_line(
        "markers", "tier(*names): the e2e tiers the test runs on (simulated, node); default simulated"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if _HERE in item.path.parents]
    for item in mine:
        item.add_marker(pytest.mark.e2e)
    tier = _tier()
    elsewhere = [item for item in mine if not _runs_on(item, tier)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        mine = [item for item in mine if item not in elsewhere]
        items[:] = [item for item in items if item not in elsewhere]
    disruptive = [item for item in mine if item.get_closest_marker("disruptive")]
    for item in disruptive:
        items.remove(item)
        items.append(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed e2e test's report shows what its namespace holds, its events and the manager's log."""
    report: pytest.TestReport = yield
    funcargs = getattr(item, "funcargs", {})
    if report.failed and call.when == "call" and "namespace" in funcargs and "e2e" in funcargs:
        report.sections.append(("e2e diagnostics", _diagnostics(funcargs["e2e"], funcargs["namespace"])))
    return report


def _diagnostics(e2e: Environment, namespace: str) -> str:
    parts = []
    for args in (
        ("get", "playground,isvc,lws,statefulsets,pods,services,endpointslices,hpa", "-o", "wide", "-n", namespace),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
    ):
        try:
            parts.append(e2e.kubectl(*args))
        except Exception as error:
            parts.append(f"kubectl {' '.join(args)}: {error}")
    try:
        parts.append(e2e.manager.describe())
    except Exception as error:  # a report must not hide the failure it reports on
        parts.append(f"the manager's state: {error}")
    if isinstance(e2e.cluster, SimulatedCluster):
        parts.append(e2e.cluster.component_logs())
    return "\n".join(parts)


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    tier = _tier()
    if tier == "existing":
        yield from _existing_cluster()
    elif tier == "node":
        yield from _node_cluster(tmp_path_factory.mktemp("node"))
    elif tier == "migration":
        yield from _migration_cluster(tmp_path_factory.mktemp("migration"))
    else:
        yield from _simulated_cluster(tmp_path_factory.mktemp("simulated"))


@pytest.fixture
def namespace(e2e: Environment, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace, ready for pods (its ServiceAccount exists), whose pods go to the simulated nodes except on
    the node tier."""
    with fresh_namespace(e2e, request.node.name) as name:
        yield name


@pytest.fixture
def models(e2e: Environment, namespace: str) -> Iterator[ModelNames]:
    """Unique names for the (cluster-scoped) OpenModels a test creates; those models are deleted afterwards."""
    names = ModelNames(namespace.rsplit("-", 1)[-1])
    yield names
    for name in names.issued:
        e2e.cluster.kubectl("delete", "openmodel", name, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def object_store(e2e: Environment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """The node's S3-compatible store with the tiny model at s3://BUCKET/KEY, its LoRA adapter at
    s3://BUCKET/ADAPTER_KEY, and an adapter made for another model at s3://BUCKET/OTHER_MODELS_ADAPTER_KEY (node
    tier)."""
    node = node_of(e2e)
    log = tmp_path_factory.mktemp("object-store") / "moto.log"
    with ObjectStore(node.layout.host_ip, node.layout.ports.object_store, log) as store:
        store.upload(BUCKET, KEY, tiny_model())
        store.upload(BUCKET, ADAPTER_KEY, tiny_lora())
        store.upload(BUCKET, OTHER_MODELS_ADAPTER_KEY, tiny_lora("prefill-heavy"))
        yield store


def _use_existing_cluster() -> bool:
    return os.environ.get("USE_EXISTING_CLUSTER", "").lower() == "true"


def _tier() -> str:
    if _use_existing_cluster():
        return "existing"
    tier = os.environ.get("E2E_CLUSTER") or "simulated"
    if tier not in TIERS:
        raise pytest.UsageError(f"E2E_CLUSTER={tier}: the e2e tiers are {', '.join(TIERS)} (or USE_EXISTING_CLUSTER)")
    return tier


def _runs_on(item: pytest.Item, tier: str) -> bool:
    marker = item.get_closest_marker("tier")
    tiers = marker.args if marker else ("simulated",)
    if tier == "existing":  # a cluster prepared elsewhere runs what the simulated tier runs, less its self-checks
        return "simulated" in tiers and not item.get_closest_marker("simulated")
    return tier in tiers


def _simulated_cluster(work_dir: Path) -> Iterator[Environment]:
    with SimulatedCluster(crd_paths=[REPO / "config" / "crd" / "bases"], work_dir=work_dir / "cluster") as cluster:
        webhook_service = TcpForwarder()
        webhook_service.start()
        try:
            _install(cluster, webhook_service.port)
            managers = LocalManagers(cluster, work_dir / "manager", webhook_service)
            try:
                managers.scale(1)
                yield Environment(cluster, managers, "simulated")
            finally:
                managers.stop()
        finally:
            webhook_service.stop()


def _node_cluster(work_dir: Path) -> Iterator[Environment]:
    images = find_images(NODE_IMAGES)
    cluster = NodeCluster(
        sandbox_image=images["pause"],
        images=list(images.values()),
        crd_paths=[REPO / "config" / "crd" / "bases"],
        work_dir=work_dir / "cluster",
    )
    with cluster:
        install_llmaz(cluster, images["manager"].image)
        yield Environment(cluster, DeployedManager(cluster), "node")


def _migration_cluster(work_dir: Path) -> Iterator[Environment]:
    """The real node with no llmaz installed, and Go llmaz's image beside ours: the migration test installs each."""
    images = find_images((*NODE_IMAGES, "llmaz-go"))
    cluster = NodeCluster(
        sandbox_image=images["pause"], images=list(images.values()), crd_paths=[], work_dir=work_dir / "cluster"
    )
    with cluster:
        yield Environment(cluster, DeployedManager(cluster), "migration")


def _install(cluster: Cluster, webhook_port: int) -> None:
    """config/default as documented; then the manager leaves the Deployment for local processes and the webhook
    configurations call them by URL (config/local), through the loopback stand-in for the webhook Service."""
    cluster.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "default"))
    cluster.kubectl("scale", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--replicas=0")
    built = cluster.kubectl("kustomize", str(REPO / "config" / "local" / "webhook"))
    local = [doc for doc in yaml.safe_load_all(built) if doc and doc["kind"].endswith("WebhookConfiguration")]
    for doc in local:
        cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"])
    text = yaml.safe_dump_all(local).replace("https://127.0.0.1:9443/", f"https://127.0.0.1:{webhook_port}/")
    cluster.kubectl("apply", "--server-side", "-f", "-", input=text)


def _existing_cluster() -> Iterator[Environment]:
    cluster = ExistingCluster(Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"))
    try:
        try:
            cluster.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=120s")
        except Exception as error:
            raise RuntimeError(f"llmaz is not deployed in this cluster (make deploy IMG=...): {error}") from error
        _ensure_nodes(cluster)
        yield Environment(cluster, DeployedManager(cluster), "existing")
    finally:
        cluster.close()


def _ensure_nodes(cluster: Cluster) -> None:
    """Create the simulated node pools where missing; kwok in the cluster must make them Ready."""
    client = cluster.admin_client()
    manifests = node_manifests(default_node_pools())
    for node in manifests:
        try:
            client.request("POST", "/api/v1/nodes", node)
        except ApiError as error:
            if error.status != 409:
                raise
    names = {node["metadata"]["name"] for node in manifests}

    def all_ready() -> bool:
        nodes = client.request("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
        }
        return ready >= names

    eventually(all_ready, within=120, what="the kwok nodes to be Ready (is kwok, with its stages, installed?)")
