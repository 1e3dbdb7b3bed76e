"""Playground and Service status: llmaz's condition sequences with SetStatusCondition semantics."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from llmaz.apis import Playground, Service
from llmaz.apis.conditions import progressing_finding
from llmaz.controllers.builders import (
    PodFinding,
    abort_status,
    playground_status,
    service_status,
    set_condition,
)
from llmaz.controllers.builders.status import timestamp

from .factories import LATER, NOW, playground, single_host_service


def summary(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions", [])}


def service_with(available: str | None, replicas: int = 1, selector: str | None = "sel") -> Service:
    svc = single_host_service()
    status: dict[str, Any] = {"replicas": replicas}
    if selector:
        status["selector"] = selector
    if available is not None:
        status["conditions"] = [{"type": "Available", "status": available, "reason": "r", "message": "m"}]
    return Service.from_dict({**svc.to_dict(), "status": status})


def lws_with(available: str | None, replicas: int = 2, selector: str = "lws-sel") -> dict[str, Any]:
    status: dict[str, Any] = {"replicas": replicas, "hpaPodSelector": selector}
    if available is not None:
        status["conditions"] = [{"type": "Available", "status": available}]
    return {"status": status}


def status_of(obj: Playground | Service) -> dict[str, Any]:
    assert obj.status is not None
    return obj.status.to_dict()


def with_status(pg: Playground, status: dict[str, Any]) -> Playground:
    return Playground.from_dict({**pg.to_dict(), "status": status})


def test_playground_condition_sequence_follows_the_service() -> None:
    pg = playground()
    steps: list[tuple[Service | None, dict[str, tuple[str, str]]]] = [
        (None, {"Progressing": ("True", "Pending")}),
        (service_with("True"), {"Progressing": ("True", "Pending"), "Available": ("True", "PlaygroundReady")}),
        (
            service_with("False"),
            {"Progressing": ("True", "PlaygroundInProgress"), "Available": ("False", "PlaygroundNotReady")},
        ),
        (
            service_with("True"),
            {"Progressing": ("True", "PlaygroundInProgress"), "Available": ("True", "PlaygroundReady")},
        ),
    ]
    for service, expected in steps:
        pg = with_status(pg, playground_status(pg, service, NOW))
        assert summary(status_of(pg)) == expected


def test_playground_stays_pending_while_the_service_is_not_yet_available() -> None:
    pg = with_status(playground(), playground_status(playground(), None, NOW))
    status = playground_status(pg, service_with(None), LATER)
    assert summary(status) == {"Progressing": ("True", "Pending")}
    assert status == {**status_of(pg), "replicas": 1, "selector": "sel"}


def test_playground_conflict_then_recovery() -> None:
    pg = playground()
    conflict = "Playground owns the same name with an existing Service"
    pg = with_status(pg, abort_status(pg, conflict, NOW))
    assert pg.status is not None
    assert pg.status.conditions == [
        {
            "type": "Progressing",
            "status": "False",
            "observedGeneration": 1,
            "lastTransitionTime": "2025-01-02T03:04:05Z",
            "reason": "AbortProcessing",
            "message": conflict,
        }
    ]
    recovered = playground_status(pg, None, LATER)
    assert recovered["conditions"] == [
        {
            "type": "Progressing",
            "status": "True",
            "observedGeneration": 1,
            "lastTransitionTime": "2025-01-02T04:00:00Z",
            "reason": "Pending",
            "message": "Waiting for inference Service ready",
        }
    ]


def test_missing_model_then_model_created() -> None:
    pg = playground()
    pg = with_status(pg, abort_status(pg, "Waiting for model creation", NOW))
    assert summary(status_of(pg)) == {"Progressing": ("False", "AbortProcessing")}
    assert summary(playground_status(pg, None, LATER)) == {"Progressing": ("True", "Pending")}


def test_aborting_twice_with_the_same_message_changes_nothing() -> None:
    pg = playground()
    pg = with_status(pg, abort_status(pg, "Waiting for BackendRuntime vllm creation", NOW))
    assert abort_status(pg, "Waiting for BackendRuntime vllm creation", LATER) == status_of(pg)


def test_playground_copies_service_replicas_and_selector_and_drops_a_stale_selector() -> None:
    status = playground_status(playground(), service_with("True", replicas=3, selector="a=b"), NOW)
    assert (status["replicas"], status["selector"]) == (3, "a=b")
    pg = with_status(playground(), status)
    status = playground_status(pg, None, NOW)
    assert status["replicas"] == 0
    assert "selector" not in status


def test_service_condition_sequence_follows_the_lws() -> None:
    svc = single_host_service()
    steps = [
        (lws_with(None), {"Progressing": ("True", "ServiceInProgress")}),
        (lws_with("True"), {"Progressing": ("True", "ServiceInProgress"), "Available": ("True", "ServiceReady")}),
        (lws_with("False"), {"Progressing": ("True", "ServiceInProgress"), "Available": ("False", "ServiceNotReady")}),
        (lws_with("True"), {"Progressing": ("True", "ServiceInProgress"), "Available": ("True", "ServiceReady")}),
    ]
    for lws, expected in steps:
        svc = Service.from_dict({**svc.to_dict(), "status": service_status(svc, lws, NOW)})
        assert summary(status_of(svc)) == expected


def test_service_copies_lws_replicas_and_hpa_selector() -> None:
    status = service_status(single_host_service(), lws_with("True", replicas=4, selector="x=y"), NOW)
    assert (status["replicas"], status["selector"]) == (4, "x=y")
    assert status["conditions"][0]["message"] == "Inference Service is ready"


def test_service_without_lws_is_progressing() -> None:
    status = service_status(single_host_service(), None, NOW)
    assert status["conditions"][0]["message"] == "Inference Service is progressing"
    assert status["replicas"] == 0


@pytest.mark.parametrize(
    ("state", "reason", "expected_time"),
    [("True", "Other", "2025-01-02T03:04:05Z"), ("False", "Other", "2025-01-02T04:00:00Z")],
    ids=["same status keeps the transition time", "flipped status moves it"],
)
def test_last_transition_time_changes_only_when_status_flips(state: str, reason: str, expected_time: str) -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", "True", "First", "one", NOW, 1)
    set_condition(status, "Ready", state, reason, "two", LATER, 2)
    assert status["conditions"] == [
        {
            "type": "Ready",
            "status": state,
            "observedGeneration": 2,
            "lastTransitionTime": expected_time,
            "reason": reason,
            "message": "two",
        }
    ]


def test_conditions_keep_their_order() -> None:
    status: dict[str, Any] = {}
    for type_ in ("B", "A", "C"):
        set_condition(status, type_, "True", "R", "m", NOW, None)
    set_condition(status, "A", "False", "R", "m", LATER, None)
    assert [c["type"] for c in status["conditions"]] == ["B", "A", "C"]
    assert "observedGeneration" not in status["conditions"][0]


def test_status_functions_do_not_mutate_their_inputs() -> None:
    pg = with_status(playground(), playground_status(playground(), None, NOW))
    before = pg.to_dict()
    playground_status(pg, service_with("True"), LATER)
    abort_status(pg, "x", LATER)
    assert pg.to_dict() == before


def test_timestamps_are_utc_seconds() -> None:
    assert timestamp(NOW + timedelta(microseconds=999)) == "2025-01-02T03:04:05Z"
    assert timestamp(datetime(2025, 1, 2, 3, 4, 5)) == "2025-01-02T03:04:05Z"


LOADER_FAILED = PodFinding("pg-0", "ModelLoaderFailed", "exited with code 3: NotFound: x", "model-loader", True, 3)
LOADER_TEXT = "ModelLoaderFailed: pod pg-0, init container model-loader exited with code 3: NotFound: x"


def progressing(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Progressing")


def test_a_finding_goes_into_the_service_progressing_message_and_leaves_with_it() -> None:
    svc = single_host_service()
    before = service_status(svc, lws_with(None), NOW)
    svc = Service.from_dict({**svc.to_dict(), "status": before})
    failing = service_status(svc, lws_with(None), LATER, LOADER_FAILED)
    assert summary(failing) == {"Progressing": ("True", "ServiceInProgress")}
    assert progressing(failing)["message"] == f"Inference Service is progressing: {LOADER_TEXT}"
    assert progressing(failing)["lastTransitionTime"] == "2025-01-02T03:04:05Z"
    assert progressing_finding(failing) == LOADER_TEXT
    svc = Service.from_dict({**svc.to_dict(), "status": failing})
    assert service_status(svc, lws_with(None), LATER) == before


def test_an_available_service_drops_a_stale_finding_and_shows_a_current_one() -> None:
    svc = single_host_service()
    svc = Service.from_dict({**svc.to_dict(), "status": service_status(svc, lws_with(None), NOW, LOADER_FAILED)})
    ready = service_status(svc, lws_with("True"), LATER)
    assert summary(ready) == {"Progressing": ("True", "ServiceInProgress"), "Available": ("True", "ServiceReady")}
    assert progressing(ready)["message"] == "Inference Service is progressing"
    stuck = service_status(svc, lws_with("True"), LATER, LOADER_FAILED)
    assert progressing_finding(stuck) == LOADER_TEXT


def test_without_a_finding_the_service_status_is_llmazs() -> None:
    svc = single_host_service()
    assert service_status(svc, lws_with(None), NOW, None) == service_status(svc, lws_with(None), NOW)


def service_failing(available: str | None) -> Service:
    svc = single_host_service()
    status = service_status(svc, lws_with(available), NOW, LOADER_FAILED)
    return Service.from_dict({**svc.to_dict(), "status": status})


def test_a_pending_playground_mirrors_its_services_finding_then_recovers() -> None:
    pg = with_status(playground(), playground_status(playground(), None, NOW))
    failing = playground_status(pg, service_failing(None), LATER)
    assert summary(failing) == {"Progressing": ("True", "Pending")}
    assert progressing(failing)["message"] == f"Waiting for inference Service ready: {LOADER_TEXT}"
    assert progressing(failing)["lastTransitionTime"] == "2025-01-02T03:04:05Z"
    assert progressing_finding(failing) == LOADER_TEXT
    pg = with_status(pg, failing)
    recovered = playground_status(pg, service_with(None), LATER)
    assert progressing(recovered)["message"] == "Waiting for inference Service ready"
    assert progressing_finding(recovered) is None


def test_a_playground_that_was_ready_mirrors_the_finding_on_its_in_progress_condition() -> None:
    pg = with_status(playground(), playground_status(playground(), None, NOW))
    pg = with_status(pg, playground_status(pg, service_with("True"), NOW))
    failing = playground_status(pg, service_failing("False"), LATER)
    assert summary(failing) == {
        "Progressing": ("True", "PlaygroundInProgress"),
        "Available": ("False", "PlaygroundNotReady"),
    }
    assert progressing(failing)["message"] == f"Waiting for inference Service progressing: {LOADER_TEXT}"
    available = next(c for c in failing["conditions"] if c["type"] == "Available")
    assert available["message"] == "Waiting for inference Service ready"


def test_a_playground_recovering_from_abort_shows_the_finding_at_once() -> None:
    pg = with_status(playground(), abort_status(playground(), "Waiting for model creation", NOW))
    status = playground_status(pg, service_failing(None), LATER)
    assert summary(status) == {"Progressing": ("True", "Pending")}
    assert progressing_finding(status) == LOADER_TEXT


@pytest.mark.parametrize(
    "condition",
    [
        {"type": "Progressing", "status": "False", "reason": "AbortProcessing", "message": "Waiting for x: y"},
        {"type": "Progressing", "status": "True", "reason": "Other", "message": "Inference Service is progressing: y"},
        {
            "type": "Progressing",
            "status": "True",
            "reason": "ServiceInProgress",
            "message": "Inference Service is progressing",
        },
        {
            "type": "Progressing",
            "status": "True",
            "reason": "Pending",
            "message": "Waiting for inference Service ready: ",
        },
        {"type": "Available", "status": "True", "reason": "PlaygroundReady", "message": "Playground is ready: y"},
    ],
    ids=["aborted", "unknown reason", "normal message", "empty finding", "another condition"],
)
def test_only_an_in_progress_condition_carries_a_finding(condition: dict[str, Any]) -> None:
    assert progressing_finding({"conditions": [condition]}) is None
    assert progressing_finding(None) is None
