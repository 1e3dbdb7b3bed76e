"""Helpers every reconciler shares."""

from __future__ import annotations

import pytest

from llmaz.apis import Playground
from llmaz.controllers.common import parse_cached
from llmaz.runtime.controller import TerminalError


def test_a_cached_object_that_does_not_match_the_schema_is_a_terminal_error() -> None:
    with pytest.raises(TerminalError, match="Playground ns/p does not match its schema"):
        parse_cached(Playground, {"kind": "Playground", "metadata": {"name": "p"}, "spec": {"replicas": "x"}}, "ns/p")
    parsed = parse_cached(Playground, {"kind": "Playground", "metadata": {"name": "p"}, "spec": {}}, "ns/p")
    assert parsed.metadata.name == "p"
