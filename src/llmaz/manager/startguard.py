"""The start-up guard: llmaz-manager does not start beside another llmaz manager, such as Go llmaz.

Go llmaz and this manager use the same leader-election Lease (`fbb36db9.llmaz.io`), webhook configurations,
certificate Secret, field manager (`llmaz`) and child objects, so two of them in one cluster fight over all of
these (docs/migration.md says how, and how to switch). Before the manager starts anything, `check` looks in its
namespace for two signs of another manager:

- the Lease held by a holder that is not one of this project's managers, renewed within its lease duration as
  this machine's clock reads it (a one-off check has no other clock; a wrong verdict from skew is still safe,
  since both managers then contend for the same Lease);
- a Deployment with replicas that runs Go llmaz's image (`inftyai/llmaz`, or `llmaz-go` as `make llmaz-go` builds
  it), or is labelled as llmaz's controller-manager, and whose pod template does not run `llmaz-manager`.

A holder's identity is `<host name>_<uuid>`, the host name being the pod's name. It is one of ours when that host
name is this process's (a restarted container of the same pod), or a sibling's of the same ReplicaSet (same name
but for the random suffix: the same pod template, so the same program, even once that pod is gone, as when a
crashed leader's pod is deleted and replaced), or names a pod in the namespace one of whose containers runs
`llmaz-manager` (a rolling update of our own Deployment, from any earlier version). A holder that names no pod
in the namespace (deleted, as when one install replaces another, or a process outside the cluster) is not a
running manager the guard can see: the start goes on, and leader election keeps this manager a follower until the
Lease is released or expires. Only a live pod that runs another program refuses the start.

When either is found, `check` raises `StartRefusedError` with one message naming what was found and how to
proceed; `allow_other_manager` (the `--allow-other-manager` flag, or `LLMAZ_ALLOW_OTHER_MANAGER=true`) turns that
into a warning. A sign that cannot be read (RBAC denies it, the API server fails) is logged and skipped: the guard
never keeps a manager from starting on its own error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from llmaz.apis.resources import PODS
from llmaz.runtime.client import ApiError, NotFound, ObjectList
from llmaz.runtime.entrypoint import StartRefusedError
from llmaz.runtime.leaderelection import LEASES
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import Resource
from llmaz.runtime.timestamp import parse_timestamp

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
RBAC_RULES = (
    allow(LEASES, "get", own_namespace=True),
    allow(DEPLOYMENTS, "list", own_namespace=True),
    allow(PODS, "get", own_namespace=True),
)

OUR_COMMAND = "llmaz-manager"
ALLOW_ENV = "LLMAZ_ALLOW_OTHER_MANAGER"
HOW_TO_PROCEED = (
    "run one llmaz manager at a time: scale the other to 0 replicas and wait until the Lease has no holder or "
    "is older than its duration (docs/migration.md), or start with --allow-other-manager "
    f"({ALLOW_ENV}=true) to run beside it"
)
# Go llmaz's Deployment labels (its kustomize and Helm installs); ours carries `app.kubernetes.io/name: llmaz`.
_CONTROLLER_LABEL = ("control-plane", "controller-manager")
_LLMAZ_LABELS = (("app.kubernetes.io/part-of", "llmaz"), ("app.kubernetes.io/created-by", "llmaz"))

_log = get_logger("llmaz.manager.startguard")


class GuardClient(Protocol):
    """The verbs the guard uses (`llmaz.runtime.client.Client` has them)."""

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList: ...


@dataclass(frozen=True, slots=True)
class Finding:
    """Another manager, as one phrase for the refusal message."""

    text: str


def allowed_by_env() -> bool:
    return os.environ.get(ALLOW_ENV, "").lower() == "true"


def image_is_go_llmaz(image: str) -> bool:
    """`inftyai/llmaz[:tag|@digest]` under any registry, or a repository named `llmaz-go`."""
    repository = image.split("@", 1)[0]
    last_slash = repository.rfind("/")
    if ":" in repository[last_slash + 1 :]:
        repository = repository[: repository.rfind(":")]
    return f"/{repository}".endswith("/inftyai/llmaz") or repository.rsplit("/", 1)[-1] == "llmaz-go"


def runs_our_manager(pod_spec: dict[str, Any]) -> bool:
    """Whether a container of the pod spec runs `llmaz-manager` (the Deployment sets it as the command)."""
    for container in pod_spec.get("containers") or []:
        command = container.get("command") or []
        if command and os.path.basename(str(command[0])) == OUR_COMMAND:
            return True
    return False


def _images(pod_spec: dict[str, Any]) -> list[str]:
    return [str(c.get("image", "")) for c in pod_spec.get("containers") or []]


def _renewed(spec: dict[str, Any]) -> datetime | None:
    return parse_timestamp(spec.get("renewTime") or spec.get("acquireTime"))


def fresh_holder(lease: dict[str, Any], now: datetime) -> tuple[str, float] | None:
    """The holder of `lease` and the seconds since its renewal, when it is held and renewed within its duration."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = _renewed(spec)
    if not holder or renewed is None:
        return None
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if now >= renewed + timedelta(seconds=duration):
        return None
    return str(holder), max((now - renewed).total_seconds(), 0.0)


def holder_host(identity: str) -> str:
    """The host name in a `<host name>_<uuid>` identity (the whole identity when it has no `_`)."""
    return identity.rsplit("_", 1)[0]


_REPLICA_SET_POD = re.compile(r"^(?P<replica_set>.+-[a-z0-9]{1,10})-[a-z0-9]{5}$")


def same_replica_set(host: str, hostname: str) -> bool:
    """Whether two host names are pod names of one ReplicaSet: `<deployment>-<template hash>-<5 characters>`."""
    mine, theirs = _REPLICA_SET_POD.match(hostname), _REPLICA_SET_POD.match(host)
    return bool(mine and theirs and mine["replica_set"] == theirs["replica_set"])


def foreign_deployments(deployments: Iterable[dict[str, Any]]) -> list[Finding]:
    """Deployments with replicas that run Go llmaz, or are llmaz's controller-manager, and do not run ours."""
    found = []
    for deployment in deployments:
        metadata = deployment.get("metadata") or {}
        spec = deployment.get("spec") or {}
        pod_spec = ((spec.get("template") or {}).get("spec")) or {}
        replicas = spec.get("replicas", 1) or (deployment.get("status") or {}).get("replicas", 0)
        if not replicas or runs_our_manager(pod_spec):
            continue
        labels = metadata.get("labels") or {}
        go_images = [image for image in _images(pod_spec) if image_is_go_llmaz(image)]
        labelled = labels.get(_CONTROLLER_LABEL[0]) == _CONTROLLER_LABEL[1] and any(
            labels.get(key) == value for key, value in _LLMAZ_LABELS
        )
        if go_images or labelled:
            why = f"image {go_images[0]}" if go_images else "labelled as llmaz's controller-manager"
            found.append(
                Finding(f"Deployment {metadata.get('namespace')}/{metadata.get('name')} ({why}, {replicas} replicas)")
            )
    return found


_UNREADABLE = object()


async def _read(what: str, read: Awaitable[Any]) -> Any:
    """`await read`; None when it is not found, `_UNREADABLE` with a warning when the API refuses or fails (the
    sign is then skipped)."""
    try:
        return await read
    except NotFound:
        return None
    except ApiError as err:
        _log.warning(
            "start-up guard: cannot read, so this check is skipped",
            what=what,
            error=str(err),
            fix="grant the manager's Role get on leases and pods and list on deployments (config/rbac/role.yaml)",
        )
        return _UNREADABLE


async def lease_finding(
    client: GuardClient, namespace: str, lease_name: str, hostname: str, now: datetime
) -> Finding | None:
    """The Lease's holder, when it is fresh and not one of ours."""
    lease = await _read(f"Lease {namespace}/{lease_name}", client.get(LEASES, lease_name, namespace))
    held = fresh_holder(lease, now) if lease not in (None, _UNREADABLE) else None
    if held is None:
        return None
    holder, age = held
    host = holder_host(holder)
    if host == hostname or same_replica_set(host, hostname):
        return None
    # Unreadable: whether the holder is ours is unknown, and refusing then would stop our own second replica.
    pod = await _read(f"Pod {namespace}/{host}", client.get(PODS, host, namespace))
    if pod is _UNREADABLE:
        return None
    if pod is None or runs_our_manager(pod.get("spec") or {}):
        return None
    runs = f"pod {host} runs {', '.join(_images(pod.get('spec') or {})) or 'no container'}"
    return Finding(f"Lease {namespace}/{lease_name} held by {holder} ({runs}), renewed {age:.0f}s ago")


async def find_other_managers(
    client: GuardClient, namespace: str, lease_name: str, hostname: str, now: datetime
) -> list[Finding]:
    found = []
    lease = await lease_finding(client, namespace, lease_name, hostname, now)
    if lease is not None:
        found.append(lease)
    deployments = await _read(f"Deployments in {namespace}", client.list(DEPLOYMENTS, namespace))
    if isinstance(deployments, ObjectList):
        found += foreign_deployments(deployments.items)
    return found


def refusal(found: Sequence[Finding]) -> str:
    return f"another llmaz manager is running: {'; '.join(f.text for f in found)}; {HOW_TO_PROCEED}"


async def check(
    client: GuardClient,
    namespace: str,
    lease_name: str,
    *,
    hostname: str,
    allow_other_manager: bool,
    now: datetime | None = None,
) -> None:
    """Raise StartRefusedError when another llmaz manager runs in `namespace`, unless `allow_other_manager`."""
    found = await find_other_managers(client, namespace, lease_name, hostname, now or datetime.now(UTC))
    if not found:
        return
    if not allow_other_manager:
        raise StartRefusedError(refusal(found))
    _log.warning(
        "starting beside another llmaz manager, as --allow-other-manager says",
        found=[f.text for f in found],
    )
