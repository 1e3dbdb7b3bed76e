"""RFC 6902 JSON Patch between two JSON documents, for mutating webhooks.

Invariant: applying `diff(a, b)` to `a` yields `b`. Objects are diffed key by key (so a patch touches only what
changed, and fields this program does not know are never dropped); a changed list is replaced whole. A value
that is the same object in both documents is equal without being looked at, so a defaulter that copies only
the path it changes makes diffing cost what it changed, not the size of the object.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

Operation = dict[str, Any]


def escape(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def diff(original: Any, mutated: Any, path: str = "") -> list[Operation]:
    if original is mutated:
        return []
    if isinstance(original, dict) and isinstance(mutated, dict):
        return _diff_objects(original, mutated, path)
    if _same(original, mutated):
        return []
    return [{"op": "replace", "path": path, "value": mutated}]


def _diff_objects(original: dict[str, Any], mutated: dict[str, Any], path: str) -> list[Operation]:
    ops: list[Operation] = []
    for key in original:
        if key not in mutated:
            ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
    for key, value in mutated.items():
        child = f"{path}/{escape(key)}"
        if key not in original:
            ops.append({"op": "add", "path": child, "value": value})
        else:
            ops += diff(original[key], value, child)
    return ops


def _same(a: Any, b: Any) -> bool:
    # Compared as JSON text: JSON tells true from 1 and 1.0 from 1, Python's == does not.
    try:
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not representable by orjson (e.g. integers beyond 64 bits)
        return type(a) is type(b) and a == b


def apply(document: Any, patch: list[Operation]) -> Any:
    """Apply the add/replace/remove operations `diff` produces (for tests and checks, not a full RFC 6902)."""
    doc = copy.deepcopy(document)
    for op in patch:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            doc = op.get("value")
            continue
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        if op["op"] == "remove":
            del parent[tokens[-1]]
        else:
            parent[tokens[-1]] = op["value"]
    return doc
