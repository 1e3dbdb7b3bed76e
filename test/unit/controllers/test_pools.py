"""Whether InferencePools are served (the CRD's state), which Playgrounds a change of the CRD concerns, the
`InferencePool` condition, and its one Event per finding."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llmaz.apis import Playground
from llmaz.controllers.builders.status import PoolCondition, with_inference_pool
from llmaz.controllers.common import record_inference_pool
from llmaz.controllers.pools import reports_on_pool, serves_pools, strip_crd

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _crd(established: str | None = "True", served: bool = True, version: str = "v1") -> dict[str, Any]:
    crd: dict[str, Any] = {
        "metadata": {"name": "inferencepools.inference.networking.k8s.io", "uid": "u", "resourceVersion": "1"},
        "spec": {
            "group": "inference.networking.k8s.io",
            "versions": [{"name": version, "served": served, "schema": {}}],
        },
        "status": {"conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"}]},
    }
    if established is not None:
        crd["status"]["conditions"].append({"type": "Established", "status": established, "reason": "x"})
    return crd


@pytest.mark.parametrize(
    ("crd", "served"),
    [
        (None, False),
        (_crd(), True),
        (_crd(established="False"), False),
        (_crd(established=None), False),
        (_crd(served=False), False),
        (_crd(version="v1alpha2"), False),
    ],
)
def test_pools_are_served_once_the_crd_is_established_with_v1_served(crd: dict[str, Any] | None, served: bool) -> None:
    assert serves_pools(crd) is served
    if crd is not None:
        assert serves_pools(strip_crd(crd)) is served, "the cache's transform keeps what serves_pools reads"


def _playground(
    annotations: dict[str, str] | None = None, conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "pg", "namespace": "ns", "uid": "u", "generation": 2}}
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    obj["spec"] = {"modelClaim": {"modelName": "m"}}
    if conditions is not None:
        obj["status"] = {"replicas": 0, "conditions": conditions}
    return obj


POOL_TRUE = {"llmaz.io/inference-pool": "true"}
CONDITION = {"type": "InferencePool", "status": "False", "reason": "InferencePoolCRDMissing", "message": "m"}


@pytest.mark.parametrize(
    ("obj", "concerned"),
    [
        (_playground(), False),
        (_playground({"llmaz.io/inference-pool": "false"}), False),
        (_playground(POOL_TRUE), True),
        (_playground({}, [CONDITION]), True),
        (_playground({}, [{"type": "Progressing", "status": "True"}]), False),
    ],
)
def test_a_change_of_the_crd_concerns_playgrounds_asking_for_a_pool_or_reporting_on_one(
    obj: dict[str, Any], concerned: bool
) -> None:
    assert reports_on_pool(obj) is concerned


def test_the_condition_is_set_and_dropped_with_the_rest_kept() -> None:
    playground = Playground.from_dict(_playground(POOL_TRUE))
    status: dict[str, Any] = {"conditions": [{"type": "Progressing", "status": "True"}]}
    with_inference_pool(playground, status, PoolCondition("True", "InferencePoolApplied", "ok"), NOW)
    pool = status["conditions"][1]
    assert (pool["type"], pool["status"], pool["reason"], pool["message"]) == (
        "InferencePool",
        "True",
        "InferencePoolApplied",
        "ok",
    )
    assert pool["observedGeneration"] == 2
    with_inference_pool(playground, status, None, NOW)
    assert status["conditions"] == [{"type": "Progressing", "status": "True"}]


class _Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, note: str) -> None:
        self.sent.append((type_, reason, note))


@pytest.mark.parametrize(
    ("before", "after", "sent"),
    [
        (None, CONDITION, [("Warning", "InferencePoolCRDMissing", "m")]),
        (CONDITION, CONDITION, []),
        (
            CONDITION,
            {**CONDITION, "reason": "InferencePoolConflict", "message": "c"},
            [("Warning", "InferencePoolConflict", "c")],
        ),
        (CONDITION, {**CONDITION, "status": "True", "reason": "InferencePoolApplied"}, []),
        (None, None, []),
    ],
)
def test_one_warning_per_finding(
    before: dict[str, Any] | None, after: dict[str, Any] | None, sent: list[tuple[str, str, str]]
) -> None:
    events = _Events()
    live = _playground(POOL_TRUE, [before] if before else [])
    record_inference_pool(events, live, {"conditions": [after] if after else []})  # type: ignore[arg-type]
    assert events.sent == sent
