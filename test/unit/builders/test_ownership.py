"""Whether an existing child may be written over: only one this owner controls, or a leftover of an earlier
object of the owner's kind and name; anything else is a conflict naming the child and its controller."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Playground, Service
from llmaz.controllers.builders import ChildConflictError, Conflict, kind_label, ownership_conflict

from .factories import PLAYGROUND_UID, SERVICE_UID, playground, single_host_service


def _ref(api_version: str, kind: str, name: str, uid: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    if controller is not None:
        ref["controller"] = controller
    return ref


def _live(name: str, *refs: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "X", "uid": "child-uid", "resourceVersion": "3"}
    if refs:
        meta["ownerReferences"] = list(refs)
    return {"metadata": meta, "spec": {}}


SVC = "inference.llmaz.io/v1alpha1"
CASES: list[tuple[str, dict[str, Any] | None, str | None]] = [
    ("absent: created", None, None),
    ("controlled by this Service", _live("svc", _ref(SVC, "Service", "svc", SERVICE_UID)), None),
    (
        "a leftover of a deleted Service of the same name: adopted",
        _live("svc", _ref(SVC, "Service", "svc", "uid-of-a-deleted-svc")),
        None,
    ),
    ("no owner at all", _live("svc"), "LeaderWorkerSet X/svc has no controller owner"),
    (
        "only a non-controller reference to this Service",
        _live("svc", _ref(SVC, "Service", "svc", SERVICE_UID, controller=None)),
        "LeaderWorkerSet X/svc has no controller owner",
    ),
    (
        "controlled by another controller",
        _live("svc", _ref("apps/v1", "Deployment", "web", "d-uid")),
        "LeaderWorkerSet X/svc is controlled by Deployment web",
    ),
    (
        "controlled by another inference Service",
        _live("svc", _ref(SVC, "Service", "other", "o-uid")),
        "LeaderWorkerSet X/svc is controlled by inference Service other",
    ),
    (
        "controlled by a Playground of the Service's name (another kind)",
        _live("svc", _ref(SVC, "Playground", "svc", "p-uid")),
        "LeaderWorkerSet X/svc is controlled by Playground svc",
    ),
    (
        "controlled by a core Service of the same name (another group)",
        _live("svc", _ref("v1", "Service", "svc", "core-uid")),
        "LeaderWorkerSet X/svc is controlled by Service svc",
    ),
]


@pytest.mark.parametrize(("case", "live", "expected"), CASES, ids=[c[0] for c in CASES])
def test_ownership_of_a_service_child(case: str, live: dict[str, Any] | None, expected: str | None) -> None:
    conflict = ownership_conflict(single_host_service(), "LeaderWorkerSet", live)
    assert (conflict.message if conflict else None) == expected


def _playground() -> Playground:
    return playground({"modelClaim": {"modelName": "llama3-8b"}})


def test_a_playground_adopts_the_leftover_of_an_earlier_playground_of_its_name_only() -> None:
    pg = _playground()
    name = pg.metadata.name or ""
    earlier = _live(name, _ref(SVC, "Playground", name, "uid-of-a-deleted-playground"))
    assert ownership_conflict(pg, "inference Service", earlier) is None
    mine = _live(name, _ref(SVC, "Playground", name, PLAYGROUND_UID))
    assert ownership_conflict(pg, "inference Service", mine) is None
    other = _live(name, _ref(SVC, "Playground", "another", "a-uid"))
    assert ownership_conflict(pg, "inference Service", other) == Conflict(
        "inference Service", "X", name, "Playground another"
    )


def test_the_conflict_message_names_every_child_and_the_owner() -> None:
    conflicts = [
        Conflict("LeaderWorkerSet", "X", "svc", "Deployment web"),
        Conflict("Service", "X", "svc-lb", None),
    ]
    error = ChildConflictError(single_host_service(), conflicts)
    assert error.message == (
        "Not taking over objects that this inference Service does not control: "
        "LeaderWorkerSet X/svc is controlled by Deployment web; Service X/svc-lb has no controller owner"
    )
    assert error.reason == "AbortProcessing"


def test_a_playground_service_conflict_keeps_llmaz_message_in_front() -> None:
    conflict = Conflict("inference Service", "X", "pg", None)
    error = ChildConflictError(_playground(), [conflict], "Playground owns the same name with an existing Service")
    assert error.message == (
        "Playground owns the same name with an existing Service: inference Service X/pg has no controller owner"
    )


@pytest.mark.parametrize(
    ("group", "kind", "label"),
    [
        (Service.GROUP, Service.KIND, "inference Service"),
        ("", "Service", "Service"),
        (Playground.GROUP, Playground.KIND, "Playground"),
        ("autoscaling", "HorizontalPodAutoscaler", "HorizontalPodAutoscaler"),
    ],
)
def test_kind_labels_tell_inference_services_from_core_services(group: str, kind: str, label: str) -> None:
    assert kind_label(group, kind) == label
