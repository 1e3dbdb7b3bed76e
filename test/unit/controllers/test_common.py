"""Helpers every reconciler shares."""

from __future__ import annotations

from typing import Any, cast

import pytest

from llmaz.apis import OpenModel, Playground
from llmaz.apis.resources import PLAYGROUNDS
from llmaz.controllers.common import ParsedByVersion, parse_cached, record_new_finding, write_status_if_changed
from llmaz.runtime.client import Client
from llmaz.runtime.controller import TerminalError
from llmaz.runtime.events import EventRecorder
from llmaz.runtime.resource import Resource


def test_a_cached_object_that_does_not_match_the_schema_is_a_terminal_error() -> None:
    with pytest.raises(TerminalError, match="Playground ns/p does not match its schema"):
        parse_cached(Playground, {"kind": "Playground", "metadata": {"name": "p"}, "spec": {"replicas": "x"}}, "ns/p")
    parsed = parse_cached(Playground, {"kind": "Playground", "metadata": {"name": "p"}, "spec": {}}, "ns/p")
    assert parsed.metadata.name == "p"


def _model(uid: str | None, version: str | None, family: str = "llama3") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "m"}
    if uid:
        meta["uid"] = uid
    if version:
        meta["resourceVersion"] = version
    return {"kind": "OpenModel", "metadata": meta, "spec": {"familyName": family, "source": {"uri": "host:///m"}}}


def test_parsed_by_version_parses_each_object_version_once() -> None:
    parse = ParsedByVersion(OpenModel)
    first = parse(_model("u1", "1"))
    assert parse(_model("u1", "1")) is first
    changed = parse(_model("u1", "2", family="qwen2"))
    assert changed is not first
    assert changed.spec.family_name == "qwen2"
    assert parse(_model("u2", "2")) is not changed  # another object at the same version number
    # Without a uid and resourceVersion (never the case for cached objects) nothing is shared.
    assert parse(_model(None, None)) is not parse(_model(None, None))


def test_parsed_by_version_holds_at_most_max_entries() -> None:
    parse = ParsedByVersion(OpenModel, max_entries=2)
    a = parse(_model("a", "1"))
    parse(_model("b", "1"))
    assert parse(_model("a", "1")) is a  # a hit does not evict
    parse(_model("c", "1"))  # evicts the oldest entry: "a"
    assert parse(_model("a", "1")) is not a
    assert len(parse._entries) == 2


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, note: str) -> None:
        self.events.append((type_, reason, note))


FINDING = 'ImagePullFailed: pod pg-0, container model-runner: cannot pull image "x"'


def _status(message: str, reason: str = "ServiceInProgress") -> dict[str, Any]:
    return {"conditions": [{"type": "Progressing", "status": "True", "reason": reason, "message": message}]}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, _status(f"Inference Service is progressing: {FINDING}"), [("Warning", "ImagePullFailed", FINDING)]),
        (
            _status("Inference Service is progressing: ModelLoaderFailed: pod pg-0, old"),
            _status(f"Inference Service is progressing: {FINDING}"),
            [("Warning", "ImagePullFailed", FINDING)],
        ),
        (
            _status(f"Waiting for inference Service ready: {FINDING}", "Pending"),
            _status(f"Waiting for inference Service progressing: {FINDING}", "PlaygroundInProgress"),
            [],
        ),
        (_status(f"Inference Service is progressing: {FINDING}"), _status("Inference Service is progressing"), []),
    ],
    ids=["new finding", "another finding", "same finding, other condition reason", "finding gone"],
)
def test_a_warning_event_is_recorded_once_per_new_finding(
    before: dict[str, Any] | None, after: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    recorder = _Recorder()
    live: dict[str, Any] = {"kind": "Service", "metadata": {"name": "pg", "namespace": "ns"}}
    if before is not None:
        live["status"] = before
    record_new_finding(cast(EventRecorder, recorder), live, after)
    assert recorder.events == expected


class StatusWrites:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def update_status(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(obj)
        return obj


async def test_a_status_write_leaves_managed_fields_to_the_server_and_only_writes_a_change() -> None:
    # The cache keeps only llmaz's Apply entry (controllers.caches): sent back, that partial list would replace
    # the server's whole record of who manages what.
    live = {
        "kind": "Playground",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "resourceVersion": "7",
            "managedFields": [{"manager": "llmaz", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"replicas": 1},
        "status": {"conditions": []},
    }
    client = StatusWrites()
    status = {"conditions": [{"type": "Available", "status": "True"}]}
    assert await write_status_if_changed(cast(Client, client), PLAYGROUNDS, live, status)
    assert not await write_status_if_changed(cast(Client, client), PLAYGROUNDS, {**live, "status": status}, status)
    (body,) = client.bodies
    assert body["metadata"] == {"name": "p", "namespace": "ns", "resourceVersion": "7"}
    assert body["status"] == status
    assert body["spec"] == live["spec"]
    assert "managedFields" in live["metadata"]  # the cached object is left as it was
