"""JSON Patch diff: applying diff(a, b) to a gives b, only changed members are touched, pointers are escaped."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmaz.runtime.webhook.jsonpatch import apply, diff, escape

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_applying_the_diff_yields_the_target(a: Any, b: Any) -> None:
    assert apply(a, diff(a, b)) == b


def test_an_added_label_is_one_add_with_an_escaped_pointer() -> None:
    before = {"metadata": {"labels": {"x": "1"}}}
    after = {"metadata": {"labels": {"x": "1", "llmaz.io/model-name": "m"}}}
    assert diff(before, after) == [{"op": "add", "path": "/metadata/labels/llmaz.io~1model-name", "value": "m"}]


def test_pointer_tokens_escape_tilde_before_slash() -> None:
    assert escape("a~/b") == "a~0~1b"


def test_true_and_one_are_different_json_values() -> None:
    assert diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]


def test_identical_documents_have_an_empty_diff() -> None:
    doc = {"a": [1, {"b": None}], "c": "d"}
    assert diff(doc, doc) == []
