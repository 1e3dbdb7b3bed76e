"""Helpers every reconciler shares."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import OpenModel, Playground
from llmaz.controllers.common import ParsedByVersion, parse_cached
from llmaz.runtime.controller import TerminalError


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
