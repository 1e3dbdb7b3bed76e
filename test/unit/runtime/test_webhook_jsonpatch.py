"""JSON Patch diff: applying diff(a, b) to a gives b, only changed members are touched, pointers are escaped.

The patches are applied by `rfc6902_apply` below, written from RFC 6902 and RFC 6901 alone, not by the
module's own `apply` (which shares the differ's assumptions, so it could not catch a patch the API server
would apply differently).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmaz.runtime.webhook.jsonpatch import diff, escape


class PatchError(Exception):
    pass


def _tokens(pointer: str) -> list[str]:
    """RFC 6901: "" is the whole document; otherwise "/"-separated tokens, "~1" is "/" and "~0" is "~"."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"pointer {pointer!r} does not start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(token: str, size: int, *, end_ok: bool) -> int:
    if token == "-" and end_ok:
        return size
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"bad array index {token!r}")
    index = int(token)
    if index > size or (index == size and not end_ok):
        raise PatchError(f"array index {index} out of range")
    return index


def _parent(document: Any, tokens: list[str]) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"no member {token!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), end_ok=False)]
        else:
            raise PatchError("path goes through a scalar")
    return node


def rfc6902_apply(document: Any, patch: list[dict[str, Any]]) -> Any:
    """Apply add, remove and replace operations (RFC 6902 sections 4.1-4.3); any error fails the whole patch."""
    doc = copy.deepcopy(document)
    for op in patch:
        tokens = _tokens(op["path"])
        if not tokens:
            if op["op"] == "remove":
                raise PatchError("cannot remove the whole document")
            doc = copy.deepcopy(op["value"])
            continue
        parent, last = _parent(doc, tokens), tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, dict):
                parent[last] = copy.deepcopy(op["value"])
            elif isinstance(parent, list):
                parent.insert(_index(last, len(parent), end_ok=True), copy.deepcopy(op["value"]))
            else:
                raise PatchError("add into a scalar")
        elif op["op"] in ("remove", "replace"):
            if isinstance(parent, dict):
                if last not in parent:
                    raise PatchError(f"{op['op']} of missing member {last!r}")
                key: Any = last
            elif isinstance(parent, list):
                key = _index(last, len(parent), end_ok=False)
            else:
                raise PatchError(f"{op['op']} inside a scalar")
            if op["op"] == "remove":
                del parent[key]
            else:
                parent[key] = copy.deepcopy(op["value"])
        else:
            raise PatchError(f"unexpected operation {op['op']!r}")
    return doc


def test_the_independent_applier_follows_the_rfc_examples() -> None:
    # RFC 6902 appendix A.1, A.2, A.3, A.5 and a remove of a missing member (an error, not a no-op).
    assert rfc6902_apply({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}]) == {
        "foo": "bar",
        "baz": "qux",
    }
    assert rfc6902_apply({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}]) == {
        "foo": ["bar", "qux", "baz"]
    }
    assert rfc6902_apply({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}]) == {"foo": "bar"}
    assert rfc6902_apply({"baz": "qux"}, [{"op": "replace", "path": "/baz", "value": "boo"}]) == {"baz": "boo"}
    assert (
        rfc6902_apply({"a/b": 1, "m~n": 2}, [{"op": "remove", "path": "/a~1b"}, {"op": "remove", "path": "/m~0n"}])
        == {}
    )
    with pytest.raises(PatchError):
        rfc6902_apply({"a": 1}, [{"op": "remove", "path": "/b"}])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=15,
)


@settings(deadline=None)
@given(json_values, json_values)
def test_applying_the_diff_yields_the_target(a: Any, b: Any) -> None:
    # Compared as JSON text: Python's == takes true for 1, JSON does not.
    assert as_json(rfc6902_apply(a, diff(a, b))) == as_json(b)


def as_json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@settings(max_examples=200, deadline=None)
@given(json_values, json_values)
def test_the_diff_never_touches_the_original(a: Any, b: Any) -> None:
    before = copy.deepcopy(a)
    diff(a, b)
    assert a == before


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
