"""The start-up guard: a fresh Lease held by a manager that is not ours, or a Go llmaz Deployment, refuses the start
with one message; our own replicas, stale Leases, scaled-down Deployments and unreadable signs do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.apis.resources import PODS
from llmaz.manager import startguard
from llmaz.manager.__main__ import parse_args
from llmaz.manager.startguard import DEPLOYMENTS
from llmaz.runtime.client import ApiError, Forbidden, NotFound, ObjectList
from llmaz.runtime.entrypoint import StartRefusedError
from llmaz.runtime.leaderelection import LEASES
from llmaz.runtime.resource import Resource
from llmaz.runtime.timestamp import micro_time

NAMESPACE = "llmaz-system"
LEASE = "fbb36db9.llmaz.io"
NOW = datetime(2026, 11, 26, 16, 0, 0, tzinfo=UTC)
OURS = "llmaz-controller-manager-6cb94dc8d4-2565k"


class FakeApi:
    """Objects by (plural, name); `refuse` maps a plural to the error every request for it raises."""

    def __init__(self, *objects: tuple[Resource, dict[str, Any]], refuse: dict[str, ApiError] | None = None) -> None:
        self.objects = {(resource.plural, obj["metadata"]["name"]): obj for resource, obj in objects}
        self.refuse = refuse or {}
        self.requests: list[tuple[str, str]] = []

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.requests.append(("get", f"{resource.plural}/{name}"))
        if resource.plural in self.refuse:
            raise self.refuse[resource.plural]
        try:
            return self.objects[(resource.plural, name)]
        except KeyError:
            raise NotFound(404, "NotFound", f"{resource.plural} {name!r} not found") from None

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList:
        self.requests.append(("list", resource.plural))
        if resource.plural in self.refuse:
            raise self.refuse[resource.plural]
        return ObjectList([o for (plural, _), o in self.objects.items() if plural == resource.plural], "1")


def lease(holder: str | None, renewed_ago: float, duration: int = 15) -> tuple[Resource, dict[str, Any]]:
    spec: dict[str, Any] = {
        "leaseDurationSeconds": duration,
        "renewTime": micro_time(NOW - timedelta(seconds=renewed_ago)),
    }
    if holder is not None:
        spec["holderIdentity"] = holder
    return LEASES, {"metadata": {"name": LEASE, "namespace": NAMESPACE}, "spec": spec}


def containers(command: list[str] | None, image: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "manager", "image": image}
    if command is not None:
        container["command"] = command
    return {"containers": [container]}


def pod(name: str, command: list[str] | None, image: str) -> tuple[Resource, dict[str, Any]]:
    return PODS, {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": containers(command, image)}


def deployment(
    name: str, command: list[str] | None, image: str, replicas: int = 1, labels: dict[str, str] | None = None
) -> tuple[Resource, dict[str, Any]]:
    return DEPLOYMENTS, {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {"replicas": replicas, "template": {"spec": containers(command, image)}},
    }


GO_POD = pod("llmaz-go-xyz", ["/manager"], "inftyai/llmaz:v0.1.4")
GO_DEPLOYMENT = deployment(
    "llmaz-controller-manager",
    ["/manager"],
    "inftyai/llmaz:v0.1.4",
    labels={"control-plane": "controller-manager", "app.kubernetes.io/part-of": "llmaz"},
)
OUR_DEPLOYMENT = deployment(
    "llmaz-controller-manager",
    ["llmaz-manager"],
    "registry.example/llmaz:v0.1.0",
    replicas=2,
    labels={"control-plane": "controller-manager", "app.kubernetes.io/name": "llmaz"},
)


async def findings(api: FakeApi, hostname: str = OURS) -> list[str]:
    return [f.text for f in await startguard.find_other_managers(api, NAMESPACE, LEASE, hostname, NOW)]


async def test_a_fresh_lease_held_by_a_live_go_pod_refuses_the_start_naming_it_and_the_way_out() -> None:
    api = FakeApi(lease("llmaz-go-xyz_0f3c", renewed_ago=3), GO_POD)
    with pytest.raises(StartRefusedError) as refused:
        await startguard.check(api, NAMESPACE, LEASE, hostname=OURS, allow_other_manager=False, now=NOW)
    message = str(refused.value)
    assert message.startswith(
        f"another llmaz manager is running: Lease {NAMESPACE}/{LEASE} held by llmaz-go-xyz_0f3c "
        "(pod llmaz-go-xyz runs inftyai/llmaz:v0.1.4), renewed 3s ago; "
    )
    assert "scale the other to 0 replicas" in message
    assert "docs/migration.md" in message
    assert "--allow-other-manager (LLMAZ_ALLOW_OTHER_MANAGER=true)" in message


async def test_a_fresh_lease_held_by_a_go_pod_names_the_pod_and_its_image() -> None:
    api = FakeApi(
        lease("llmaz-controller-manager-5d8f-abcde_1b2c", renewed_ago=1),
        pod("llmaz-controller-manager-5d8f-abcde", ["/manager"], "inftyai/llmaz:v0.1.4"),
    )
    assert await findings(api) == [
        f"Lease {NAMESPACE}/{LEASE} held by llmaz-controller-manager-5d8f-abcde_1b2c "
        "(pod llmaz-controller-manager-5d8f-abcde runs inftyai/llmaz:v0.1.4), renewed 1s ago"
    ]


@pytest.mark.parametrize(
    ("holder", "renewed_ago", "duration"),
    [
        ("llmaz-go-xyz_0f3c", 15.0, 15),  # expired exactly at its duration
        ("llmaz-go-xyz_0f3c", 60.0, 15),
        ("llmaz-go-xyz_0f3c", 40.0, 30),  # held past a longer duration
        (None, 0.0, 1),  # released: no holder
        (f"{OURS}_9a8b", 1.0, 15),  # this pod's previous container, not released on a crash
        ("llmaz-controller-manager-6cb94dc8d4-x7q2m_5e6f", 1.0, 15),  # a deleted sibling of this ReplicaSet
    ],
)
async def test_a_stale_released_or_own_lease_lets_the_manager_start(
    holder: str | None, renewed_ago: float, duration: int
) -> None:
    assert await findings(FakeApi(lease(holder, renewed_ago, duration))) == []


async def test_a_lease_held_by_a_replica_of_an_earlier_version_of_ours_lets_the_manager_start() -> None:
    other = "llmaz-controller-manager-7f9d6b5c8-bfzp8"  # another ReplicaSet: a rolling update in progress
    api = FakeApi(lease(f"{other}_77aa", 2), pod(other, ["/opt/llmaz/app/bin/llmaz-manager"], "llmaz:v0.0.9"))
    assert await findings(api) == []
    assert api.requests[:2] == [("get", f"leases/{LEASE}"), ("get", f"pods/{other}")]


@pytest.mark.parametrize(
    ("host", "hostname", "siblings"),
    [
        ("llmaz-controller-manager-6cb94dc8d4-x7q2m", OURS, True),
        ("llmaz-controller-manager-5d8f7c9b4-x7q2m", OURS, False),  # another ReplicaSet: another template
        ("llmaz-go-xyz", "llmaz-go-abc", False),  # not pod names of a ReplicaSet
        ("laptop", "laptop-2", False),
    ],
)
def test_only_pods_of_one_replica_set_are_siblings(host: str, hostname: str, siblings: bool) -> None:
    assert startguard.same_replica_set(host, hostname) is siblings


async def test_a_fresh_lease_whose_holder_names_no_pod_lets_the_manager_start_as_a_follower() -> None:
    # One install replacing another: the old manager's pods are gone, its Lease not yet expired.
    for holder in ("llmaz-controller-manager-5d8f7c9b4-x7q2m_5e6f", "laptop_0f3c"):
        assert await findings(FakeApi(lease(holder, 2))) == []


async def test_no_lease_and_no_deployment_lets_the_manager_start() -> None:
    assert await findings(FakeApi()) == []


async def test_a_go_llmaz_deployment_refuses_the_start_and_our_own_deployment_does_not() -> None:
    assert await findings(FakeApi(OUR_DEPLOYMENT)) == []
    assert await findings(FakeApi(GO_DEPLOYMENT)) == [
        f"Deployment {NAMESPACE}/llmaz-controller-manager (image inftyai/llmaz:v0.1.4, 1 replicas)"
    ]


async def test_a_labelled_controller_manager_that_is_not_ours_refuses_the_start_whatever_its_image() -> None:
    labelled = deployment(
        "llmaz-go",
        ["/manager"],
        "mirror.example/llmaz:v0.1.4",
        labels={"control-plane": "controller-manager", "app.kubernetes.io/created-by": "llmaz"},
    )
    assert await findings(FakeApi(labelled)) == [
        f"Deployment {NAMESPACE}/llmaz-go (labelled as llmaz's controller-manager, 1 replicas)"
    ]


async def test_deployments_scaled_to_zero_or_of_other_programs_do_not_refuse_the_start() -> None:
    scaled_down = deployment("go", ["/manager"], "inftyai/llmaz:v0.1.4", replicas=0)
    gateway = deployment("llmaz-gateway", ["llmaz-gateway"], "llmaz:v0.1.0", labels={"app.kubernetes.io/name": "llmaz"})
    other_operator = deployment("x", ["/manager"], "example/x:v1", labels={"control-plane": "controller-manager"})
    assert await findings(FakeApi(scaled_down, gateway, other_operator)) == []


@pytest.mark.parametrize(
    ("image", "go"),
    [
        ("inftyai/llmaz:v0.1.4", True),
        ("docker.io/inftyai/llmaz:v0.1.4", True),
        ("inftyai/llmaz@sha256:0123", True),
        ("localhost:5000/inftyai/llmaz", True),
        ("llmaz.local/llmaz-go:v0.1.4", True),
        ("inftyai/llmaz-model-loader:v0.1.4", False),
        ("inftyai/model-loader:v0.0.10", False),
        ("llmaz:v0.1.0", False),
        ("registry.example/myllmaz-go:1", False),
        ("localhost:5000/llmaz", False),
    ],
)
def test_go_llmaz_images_are_recognised_under_any_registry_tag_or_digest(image: str, go: bool) -> None:
    assert startguard.image_is_go_llmaz(image) is go


async def test_both_signs_are_reported_in_one_message() -> None:
    api = FakeApi(lease("llmaz-go-xyz_0f3c", 3), GO_POD, GO_DEPLOYMENT)
    with pytest.raises(StartRefusedError, match="renewed 3s ago; Deployment llmaz-system/llmaz-controller-manager"):
        await startguard.check(api, NAMESPACE, LEASE, hostname=OURS, allow_other_manager=False, now=NOW)


async def test_allow_other_manager_starts_anyway_with_one_warning_naming_what_it_found() -> None:
    api = FakeApi(lease("llmaz-go-xyz_0f3c", 3), GO_POD, GO_DEPLOYMENT)
    with capture_logs() as logs:
        await startguard.check(api, NAMESPACE, LEASE, hostname=OURS, allow_other_manager=True, now=NOW)
    (warning,) = logs
    assert warning["log_level"] == "warning"
    assert warning["event"] == "starting beside another llmaz manager, as --allow-other-manager says"
    assert [f.split(" ", 1)[0] for f in warning["found"]] == ["Lease", "Deployment"]


@pytest.mark.parametrize("refused", ["leases", "deployments", "pods"])
async def test_a_sign_rbac_does_not_let_it_read_is_skipped_not_fatal(refused: str) -> None:
    forbidden = Forbidden(403, "Forbidden", f'{refused} is forbidden: User "x" cannot get resource "{refused}"')
    api = FakeApi(lease("llmaz-go-xyz_0f3c", 3), GO_POD, GO_DEPLOYMENT, refuse={refused: forbidden})
    with capture_logs() as logs:
        found = await findings(api)
    (warning,) = logs
    assert warning["event"] == "start-up guard: cannot read, so this check is skipped"
    assert warning["error"] == str(forbidden)
    assert "config/rbac/role.yaml" in warning["fix"]
    # What could be read is still reported; what could not is skipped. A holder whose pod cannot be read is not
    # known to be foreign: refusing then would stop our own second replica wherever pods cannot be read.
    assert any(f.startswith("Lease") for f in found) is (refused not in ("leases", "pods"))
    assert any(f.startswith("Deployment") for f in found) is (refused != "deployments")


async def test_an_api_server_that_fails_skips_every_sign() -> None:
    failing = ApiError(0, "ConnectionError", "connection refused")
    api = FakeApi(refuse={"leases": failing, "deployments": failing})
    with capture_logs() as logs:
        await startguard.check(api, NAMESPACE, LEASE, hostname=OURS, allow_other_manager=False, now=NOW)
    assert [line["what"] for line in logs] == [f"Lease {NAMESPACE}/{LEASE}", f"Deployments in {NAMESPACE}"]


def test_the_flag_and_the_environment_variable_allow_another_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(startguard.ALLOW_ENV, raising=False)
    assert parse_args([]).allow_other_manager is False
    assert parse_args(["--allow-other-manager"]).allow_other_manager is True
    monkeypatch.setenv(startguard.ALLOW_ENV, "true")
    assert parse_args([]).allow_other_manager is True
    monkeypatch.setenv(startguard.ALLOW_ENV, "no")
    assert parse_args([]).allow_other_manager is False
