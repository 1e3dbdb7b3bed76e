"""Would a server-side apply change anything? Decided from the live object, without a request.

A controller that applies its desired state on every reconcile still costs one PATCH per reconcile even when
nothing changed. `apply_is_noop(desired, live, manager)` answers whether that PATCH can be skipped:

1. every field of `desired` already has that value in `live` (a subset check: the server adds defaults and
   other managers' fields, which do not matter), and
2. every field `manager` owns through Apply in `live.metadata.managedFields` is still present in `desired`
   (otherwise the apply would remove it, so it is not a no-op).

An entry's `fieldsV1` may be the decoded tree, as the API server sends it, or its JSON text, as an informer cache
keeps it (`runtime.cache.transform.strip_metadata`). The second rule needs no schema: managed-field paths name
list items by their keys (`k:{"name":"x"}`), by value (`v:"x"`) or by index (`i:0`), which is enough to look them
up in `desired`.

Values are compared as JSON, except that an int and a string with the same text are equal (quantities such as
`4` and `"4"` round-trip either way). Other non-canonical forms (`0.5` vs `500m`) read as a change: the apply
is sent, and the server treats it as the no-op it is.
"""

from __future__ import annotations

from typing import Any

import orjson

_IGNORED_TOP_LEVEL = frozenset({"status"})
_IGNORED_METADATA = frozenset({"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"})


def apply_is_noop(desired: dict[str, Any], live: dict[str, Any] | None, manager: str) -> bool:
    if live is None:
        return False
    return _is_subset(_trim(desired), live) and _owned_paths_present(live, desired, manager)


def _trim(obj: dict[str, Any]) -> dict[str, Any]:
    trimmed = {k: v for k, v in obj.items() if k not in _IGNORED_TOP_LEVEL}
    meta = trimmed.get("metadata")
    if isinstance(meta, dict):
        trimmed["metadata"] = {k: v for k, v in meta.items() if k not in _IGNORED_METADATA}
    return trimmed


def _is_subset(want: Any, have: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_is_subset, want, have))
    return _scalar_equal(want, have)


def _scalar_equal(want: Any, have: Any) -> bool:
    if want == have and type(want) is type(have):
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    if isinstance(want, int | str) and isinstance(have, int | str):
        return str(want) == str(have)
    return bool(want == have)


def _owned_paths_present(live: dict[str, Any], desired: dict[str, Any], manager: str) -> bool:
    return all(
        _fields_present(_field_set(entry.get("fieldsV1")), desired)
        for entry in (live.get("metadata") or {}).get("managedFields") or []
        if entry.get("manager") == manager and entry.get("operation") == "Apply"
    )


def _field_set(fields: Any) -> dict[str, Any]:
    if isinstance(fields, str):
        decoded: dict[str, Any] = orjson.loads(fields)
        return decoded
    return fields or {}


def _fields_present(fields: dict[str, Any], node: Any) -> bool:
    for key, sub in fields.items():
        if key == ".":
            continue
        child = _child(key, node)
        if child is _MISSING:
            return False
        if sub and not _fields_present(sub, child):
            return False
    return True


_MISSING = object()


def _child(key: str, node: Any) -> Any:
    kind, _, rest = key.partition(":")
    if kind == "f" and isinstance(node, dict):
        return node.get(rest, _MISSING)
    if kind == "k" and isinstance(node, list):
        wanted = orjson.loads(rest)
        return next((item for item in node if _matches(item, wanted)), _MISSING)
    if kind == "v" and isinstance(node, list):
        value = orjson.loads(rest)
        return value if value in node else _MISSING
    if kind == "i" and isinstance(node, list) and rest.isdigit():
        index = int(rest)
        return node[index] if index < len(node) else _MISSING
    return _MISSING


def _matches(item: Any, wanted: dict[str, Any]) -> bool:
    return isinstance(item, dict) and all(_scalar_equal(v, item.get(k)) for k, v in wanted.items())
