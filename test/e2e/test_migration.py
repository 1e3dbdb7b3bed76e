"""Switching a serving cluster from Go llmaz to this one and back, with a client asking all the while.

Opt-in: `make test-migration LLMAZ_GO_SRC=<a checkout or git directory of llmaz>` builds Go llmaz (v0.1.4 by
default, hack/llmaz-go/build.sh) and runs this on the `migration` tier: the real node with nothing of llmaz on it.

1. Go llmaz is installed as its users install it: its own `config/default`, built with kustomize, with its manager
   image set to the local build. Go llmaz v0.1.4 runs the model loader `inftyai/model-loader:v0.0.10` whatever its
   global config says, and that image cannot be pulled here: this project's loader is tagged so on the node, and
   this project is installed with `LOADER_IMG` naming it, as docs/migration.md (step 2) says, so the switch keeps
   the loader image. This project's llama.cpp BackendRuntime (config/node's) is applied, so the switch
   changes the manager alone, and the tiny model is served by a Playground on it from an OSS bucket on the node
   (`llmaz_dev.testing.storage.OssServer` on the node's address, reached over http). Of this machine's sources it is
   the one Go llmaz v0.1.4 can load: it writes a `host://` model's volume twice (the apply is rejected) and gives
   the loader no source variables for S3.
2. The Playground has 2 replicas. A client asks its `-lb` Service for a short chat every 100 ms, on its own
   thread, until the end.
3. Switch to llmaz for Python by docs/migration.md: Go's Deployment scaled to 0, its Lease left to expire, then
   `make deploy` of config/node; done when this manager has written the Playground's conditions (they carry
   observedGeneration, which Go's leave 0).
4. Switch back the same way: this manager scaled to 0 (it releases its Lease), Go's manifests applied again; done
   when Go has rewritten the conditions (observedGeneration back to 0).
5. The mistake: this project applied while Go still runs. Its pod must refuse to start and write nothing; step 1
   on the same Deployment and a scale back finish the switch. Then back to Go.
6. An interrupted switch: this manager's pod killed the moment it takes the Lease; the next pod finishes.

For each switch the report gives the requests and the failed ones, the model pods replaced or restarted, the
LeaderWorkerSet template fields that changed (in value, or only written differently) and its new revisions, the
time until the new manager had reconciled, and each child's controller owners. Goals: no failed request; pods
replaced and revisions made only when a template value changed (and then the fields are listed); one controller
owner per child.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest._cluster import ClusterOperationError
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.node.install import InstallError, install_llmaz, wait_admitting
from llmaz_dev.envtest.objectstore import tiny_model
from llmaz_dev.testing.storage import OssServer

from .managers import DEPLOYMENT, LEASE, NAMESPACE, lease_holder
from .serving import KEY, Answer, PacedClient, lb_url, node_of, paced, served, tiny_llama
from .support import Environment, ModelNames, eventually, wait_playground_ready

pytestmark = pytest.mark.tier("migration")
REPO = Path(__file__).resolve().parents[2]
GO_SOURCE_ENV = "LLMAZ_GO_SOURCE"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
MANAGER_SELECTOR = "control-plane=controller-manager"
NAME = "tiny"
SWITCH_TIMEOUT = 300.0
GO_LOADER_IMAGE = "inftyai/model-loader:v0.0.10"
OSS_BUCKET = "models"
REPLICAS = 2  # a switch that rolls the pods does so one at a time: one replica serves while the other restarts


def _kustomize() -> str:
    found = os.environ.get("KUSTOMIZE") or shutil.which("kustomize")
    assert found, "set KUSTOMIZE (make test-migration does) to build Go llmaz's config"
    return found


def go_manifests(source: Path, manager_image: str, work_dir: Path) -> str:
    """Go llmaz's `config/default` as its users build it, with the local manager image."""
    config = work_dir / "go-config"
    shutil.rmtree(config, ignore_errors=True)
    shutil.copytree(source / "config", config)
    global_config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "global-config"},
        "data": {"config.data": f"scheduler-name: default-scheduler\ninit-container-image: {GO_LOADER_IMAGE}\n"},
    }
    (config / "default" / "configmap.yaml").write_text(yaml.safe_dump(global_config))
    kustomization_path = config / "manager" / "kustomization.yaml"
    kustomization = yaml.safe_load(kustomization_path.read_text())
    repository, tag = manager_image.rsplit(":", 1)
    kustomization["images"] = [{"name": "controller", "newName": repository, "newTag": tag}]
    kustomization_path.write_text(yaml.safe_dump(kustomization))
    built = subprocess.run(
        [_kustomize(), "build", str(config / "default")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    return built.stdout


def node_backend_runtime() -> str:
    """config/node's llama.cpp BackendRuntime (the node's image and probes), as `make deploy` applies it."""
    built = subprocess.run(
        [_kustomize(), "build", str(REPO / "config" / "node")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    (runtime,) = [
        doc
        for doc in yaml.safe_load_all(built.stdout)
        if doc and doc["kind"] == "BackendRuntime" and doc["metadata"]["name"] == "llamacpp"
    ]
    return yaml.safe_dump(runtime)


@pytest.fixture
def oss(e2e: Environment) -> Iterator[OssServer]:
    """An OSS bucket with the tiny model, on the node's address (pods reach it; anonymous, path-style)."""
    server = OssServer(host=node_of(e2e).layout.host_ip)
    server.buckets[OSS_BUCKET] = {KEY: tiny_model().read_bytes()}
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Snapshot:
    pods: dict[str, tuple[str, int]]
    """Model pod name -> (uid, container restarts)."""
    template: dict[str, Any]
    """The LeaderWorkerSet's leaderWorkerTemplate."""
    revisions: frozenset[str]
    """The LeaderWorkerSet's ControllerRevisions: a template change that rolls pods makes a new one."""


def snapshot(e2e: Environment, namespace: str) -> Snapshot:
    pods = {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(s.get("restartCount", 0) for s in (p.get("status") or {}).get("containerStatuses") or []),
        )
        for p in e2e.items("pods", namespace, f"{LWS_NAME_LABEL}={NAME}")
        if not p["metadata"].get("deletionTimestamp")
    }
    lws = e2e.must_get("leaderworkersets", NAME, namespace)
    revisions = frozenset(
        r["metadata"]["name"] for r in e2e.items("controllerrevisions", namespace, f"{LWS_NAME_LABEL}={NAME}")
    )
    return Snapshot(pods, lws["spec"]["leaderWorkerTemplate"], revisions)


def changed_paths(before: Any, after: Any, path: str = "") -> list[str]:
    """The JSON paths where `after` differs from `before`."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        keys = sorted(set(before) | set(after))
        return [p for key in keys for p in changed_paths(before.get(key), after.get(key), f"{path}.{key}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        pairs = enumerate(zip(before, after, strict=True))
        return [p for i, (b, a) in pairs for p in changed_paths(b, a, f"{path}[{i}]")]
    return [] if before == after else [path or "."]


def _at(document: Any, path: str) -> Any:
    for step in path.strip(".").replace("[", ".[").split("."):
        if document is None:
            return None
        document = document[int(step[1:-1])] if step.startswith("[") else document.get(step)
    return document


def zero_or_absent(value: Any) -> bool:
    """The LeaderWorkerSet controller hashes its Go types, where a zero value and an absent field are one."""
    return value is None or value in (0, "", False) or value == [] or value == {}


def changed_in_value(before: Any, after: Any) -> list[str]:
    """`changed_paths` without those that only write a zero value in place of nothing or back: such a change
    makes no new revision, so it rolls no pod."""
    return [
        p
        for p in changed_paths(before, after)
        if not (zero_or_absent(_at(before, p)) and zero_or_absent(_at(after, p)))
    ]


def controllers_of(e2e: Environment, namespace: str) -> dict[str, list[str]]:
    """For each child of the Playground: the kinds/names of its controller owners that exist."""
    children = {
        "services.inference": e2e.get("services.inference", NAME, namespace),
        "leaderworkersets": e2e.get("leaderworkersets", NAME, namespace),
        "services": e2e.get("services", f"{NAME}-lb", namespace),
    }
    owners: dict[str, list[str]] = {}
    for kind, child in children.items():
        assert child is not None, f"{kind} of the Playground is gone"
        refs = [r for r in child["metadata"].get("ownerReferences") or [] if r.get("controller")]
        owners[kind] = [f"{r['kind']}/{r['name']}" for r in refs]
    return owners


def _available(playground: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions = (playground.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Available"), None)


def reconciled_by_python(playground: Mapping[str, Any]) -> bool:
    """This project's manager writes the conditions it sets with the Playground's generation; Go's leave it 0.
    Available is set on every reconcile of a Playground by both."""
    available = _available(playground)
    return available is not None and available.get("observedGeneration") == playground["metadata"]["generation"]


def reconciled_by_go(playground: Mapping[str, Any]) -> bool:
    available = _available(playground)
    return available is not None and not available.get("observedGeneration")


def lease_free(e2e: Environment) -> bool:
    lease = e2e.get("leases", LEASE, NAMESPACE)
    if lease is None:
        return True
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity") or not spec.get("renewTime"):
        return True
    renewed = datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
    return (datetime.now(UTC) - renewed).total_seconds() > float(spec.get("leaseDurationSeconds") or 15)


def stop_manager(e2e: Environment) -> None:
    """docs/migration.md, step 1: the Deployment scaled to 0, its pods gone, its Lease free."""
    e2e.kubectl("scale", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--replicas=0")
    eventually(lambda: not e2e.items("pods", NAMESPACE, MANAGER_SELECTOR), within=120, what="the manager's pods gone")
    eventually(lambda: lease_free(e2e), within=60, what=f"Lease {LEASE} free")


@dataclass
class Switch:
    name: str
    started: float
    reconciled: float
    before: Snapshot
    after: Snapshot
    answers: list[Answer]
    owners: dict[str, list[str]]
    note: str = ""

    @property
    def failed(self) -> list[Answer]:
        return [a for a in self.answers if a.status != 200]

    @property
    def replaced(self) -> list[str]:
        return sorted(n for n, (uid, _) in self.before.pods.items() if self.after.pods.get(n, ("",))[0] != uid)

    @property
    def new_revisions(self) -> list[str]:
        return sorted(self.after.revisions - self.before.revisions)

    @property
    def restarts(self) -> int:
        return sum(r for _, r in self.after.pods.values()) - sum(r for _, r in self.before.pods.values())

    def report(self) -> str:
        written = changed_paths(self.before.template, self.after.template)
        in_value = changed_in_value(self.before.template, self.after.template)
        lines = [
            f"{self.name}:",
            f"  reconciled {self.reconciled - self.started:.1f} s after the switch began",
            f"  requests {len(self.answers)}, failed {len(self.failed)}",
            f"  model pods replaced {len(self.replaced)} of {len(self.before.pods)} {self.replaced}, "
            f"container restarts {self.restarts}",
            f"  LeaderWorkerSet template fields changed in value: {in_value or 'none'}; new revisions: "
            f"{self.new_revisions or 'none'}",
            f"  written differently, a zero value for none or back (no new revision): "
            f"{sorted(set(written) - set(in_value)) or 'none'}",
            f"  controller owners: {self.owners}",
        ]
        return "\n".join(lines + ([f"  {self.note}"] if self.note else []))


def switch(
    e2e: Environment,
    namespace: str,
    client: PacedClient,
    name: str,
    start: Callable[[], str],
    reconciled: Any,
    *,
    stop_first: bool = True,
) -> Switch:
    """Stop the running manager (unless not `stop_first`), `start` the other (it returns a note for the report),
    and wait until it has reconciled the Playground, the pods are ready, and 20 more answers came."""
    before = snapshot(e2e, namespace)
    first = len(client.answers)
    started = time.monotonic()
    if stop_first:
        stop_manager(e2e)
    note = start()
    eventually(lambda: reconciled(e2e.must_get("playgrounds", NAME, namespace)), within=SWITCH_TIMEOUT,
               what=f"{name}: the Playground reconciled by the new manager")  # fmt: skip
    done = time.monotonic()
    wait_playground_ready(e2e, namespace, NAME, replicas=REPLICAS)
    seen = len(client.answers)
    eventually(lambda: len(client.answers) >= seen + 20, what=f"{name}: 20 answers after the switch")
    return Switch(name, started, done, before, snapshot(e2e, namespace), client.answers[first:],
                  controllers_of(e2e, namespace), note)  # fmt: skip


def pod_log(e2e: Environment, pod: str) -> str:
    """The pod's log, and its previous container's (a pod that exits at start is mostly between runs)."""
    logs = []
    for previous in ("--previous=true", "--previous=false"):
        with contextlib.suppress(ClusterOperationError):
            logs.append(e2e.kubectl("logs", pod, "-n", NAMESPACE, previous))
    return "\n".join(logs)


def applied_beside_go(e2e: Environment, namespace: str, image: str, install: Callable[[float], None]) -> str:
    """The mistake: this project applied while Go llmaz still runs. Its pods must refuse to start (the start-up
    guard) and change nothing, Go's pod goes on; then the documented step 1 on the same Deployment and a scale back
    finish the switch."""
    go_holder = lease_holder(e2e.cluster)
    try:
        install(60.0)
    except InstallError:
        pass  # the rollout cannot finish while Go's pod leads
    else:
        raise AssertionError("this manager rolled out while Go llmaz ran")
    ours = [
        p["metadata"]["name"]
        for p in e2e.items("pods", NAMESPACE, MANAGER_SELECTOR)
        if p["spec"]["containers"][0]["image"] == image
    ]
    assert ours, "no pod of this manager was created"
    refusal = eventually(lambda: next((line for line in pod_log(e2e, ours[0]).splitlines()
                                       if "manager refused to start" in line), None),
                         within=60, what="the start-up guard's refusal in the log")  # fmt: skip
    assert lease_holder(e2e.cluster) == go_holder, "the Lease changed hands while Go llmaz ran"
    assert reconciled_by_go(e2e.must_get("playgrounds", NAME, namespace)), "the Playground was written meanwhile"
    stop_manager(e2e)
    e2e.kubectl("scale", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--replicas=2")
    e2e.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=180s")
    wait_admitting(e2e.cluster, 180)
    return f"applied while Go ran: {ours[0]} refused: {refusal[:400]}"


def killed_while_adopting(e2e: Environment, namespace: str, install: Callable[[], None]) -> str:
    """`install` this project's manager, and kill its pod (no graceful stop) the moment it takes the Lease, when
    its first reconciles start; the Deployment's next pod takes over once the dead one's Lease expires."""
    previous = lease_holder(e2e.cluster)
    installing = threading.Thread(target=install, name="install-llmaz", daemon=True)
    installing.start()
    holder = eventually(lambda: (h := lease_holder(e2e.cluster)) != previous and h, within=SWITCH_TIMEOUT,
                        what="this manager taking the Lease")  # fmt: skip
    pod = holder.split("_", 1)[0]
    adopted = reconciled_by_python(e2e.must_get("playgrounds", NAME, namespace))
    e2e.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--grace-period=0", "--force", "--wait=false")
    installing.join(SWITCH_TIMEOUT)
    assert not installing.is_alive(), "make deploy did not return"
    return f"manager pod {pod} killed as it took the Lease (Playground already reconciled by it: {adopted})"


def test_a_serving_playground_switches_from_go_llmaz_to_python_and_back_with_no_failed_request(
    e2e: Environment, namespace: str, models: ModelNames, oss: OssServer, tmp_path: Path
) -> None:
    source = os.environ.get(GO_SOURCE_ENV)
    assert source, f"{GO_SOURCE_ENV} names Go llmaz's built source: run `make test-migration LLMAZ_GO_SRC=...`"
    images = find_images(("manager", "loader", "llmaz-go"))
    go = go_manifests(Path(source), images["llmaz-go"].image, tmp_path)
    node_of(e2e).ctr("images", "tag", "--force", images["loader"].image, f"docker.io/{GO_LOADER_IMAGE}")

    def start_go() -> str:
        e2e.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=go)
        e2e.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=180s")
        wait_admitting(e2e.cluster, 180)
        return ""

    def install_python(timeout: float = 180.0) -> None:
        # Go's loader image and Go's pod rendering (no security contexts), as docs/migration.md step 2 says.
        install_llmaz(
            e2e.cluster, images["manager"].image, timeout=timeout, loader_image=GO_LOADER_IMAGE, pod_security="none"
        )

    def start_python() -> str:
        install_python()
        return ""

    start_go()
    e2e.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=node_backend_runtime())
    model = models.new("tiny")
    playground = served(NAME, model, None, replicas=REPLICAS)
    playground["spec"]["backendRuntimeConfig"]["envs"] = [{"name": "OBJSTORE_ENDPOINT_SCHEME", "value": "http"}]
    e2e.apply([tiny_llama(model, f"oss://{OSS_BUCKET}.{oss.host}:{oss.port}/{KEY}"), playground], namespace)
    wait_playground_ready(e2e, namespace, NAME, replicas=REPLICAS)
    assert reconciled_by_go(e2e.must_get("playgrounds", NAME, namespace))

    switches: list[Switch] = []
    try:
        with paced(lb_url(e2e, namespace, NAME) + "/v1", model, period=0.1) as client:
            eventually(lambda: len(client.answers) >= 10, what="answers from Go llmaz's Playground")
            switches.append(switch(e2e, namespace, client, "Go v0.1.4 -> llmaz for Python", start_python,
                                   reconciled_by_python))  # fmt: skip
            switches.append(switch(e2e, namespace, client, "llmaz for Python -> Go v0.1.4", start_go, reconciled_by_go))
            switches.append(switch(e2e, namespace, client, "Go v0.1.4 -> llmaz for Python, applied while Go ran",
                                   lambda: applied_beside_go(e2e, namespace, images["manager"].image, install_python),
                                   reconciled_by_python, stop_first=False))  # fmt: skip
            switches.append(switch(e2e, namespace, client, "llmaz for Python -> Go v0.1.4, again", start_go,
                                   reconciled_by_go))  # fmt: skip
            switches.append(switch(e2e, namespace, client, "Go v0.1.4 -> llmaz for Python, interrupted",
                                   lambda: killed_while_adopting(e2e, namespace, install_python),
                                   reconciled_by_python))  # fmt: skip
    finally:
        print("\nmigration report\n" + "\n".join(s.report() for s in switches))

    for done in switches:
        assert done.failed == [], f"{done.name}: {[a.body[:200] for a in done.failed]}"
        changed = changed_in_value(done.before.template, done.after.template)
        assert done.replaced == [] or changed, done.report()
        assert done.new_revisions == [] or changed, done.report()
        assert all(len(owners) == 1 for owners in done.owners.values()), done.report()
