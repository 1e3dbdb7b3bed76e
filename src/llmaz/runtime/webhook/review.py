"""AdmissionReview decoding: the checks controller-runtime applies before a handler runs.

Invariants: `decode_review` never raises anything but `ReviewError`, whose `code` is the HTTP-style status
placed in the denial (400 for every client-side fault), and which carries the request's uid whenever the review
has one, so that denials are matched to their request too. The body is capped at `MAX_BODY_BYTES` (7 MiB, as
controller-runtime: the API server takes request bodies up to 3 MiB, so an UPDATE carries two objects of at most
3 MiB each, plus overhead) and at `MAX_JSON_VALUES` values (counted on the bytes, before decoding), which bounds
what one review can take in memory. `object` and `oldObject` may nest at most `MAX_OBJECT_DEPTH` levels (checked
without recursion, before any handler walks them recursively). Both `admission.k8s.io/v1` and `v1beta1` are read, and
the answer uses the version asked in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from llmaz.runtime.log import bounded

MAX_BODY_BYTES: Final = 7 * 1024 * 1024
# Decoded, then validated into models, a JSON value can take 300 bytes of Python objects (a map member with its
# key, its copy in the model): 250,000 values stay near 75 MB. An object etcd stores (1.5 MiB by default) holds
# about 100,000 values at a dense 15 bytes each, so an UPDATE carrying two of them fits.
MAX_JSON_VALUES: Final = 250_000
# Deeper than any real object (a pod template's affinity terms reach about 20); shallow enough for recursion in
# copying, diffing and validation to stay far from Python's recursion limit.
MAX_OBJECT_DEPTH: Final = 100
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
JSON_CONTENT_TYPE: Final = "application/json"
V1: Final = "admission.k8s.io/v1"
V1BETA1: Final = "admission.k8s.io/v1beta1"
REVIEW_VERSIONS: Final = (V1, V1BETA1)


class ReviewError(Exception):
    """The request cannot be handled; `code` is the status code reported in the AdmissionReview denial."""

    def __init__(self, code: int, message: str, api_version: str = V1, uid: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.api_version = api_version
        self.uid = uid


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str = ""
    version: str = ""
    kind: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """One admission request; `object`/`old_object` are the raw JSON objects (None when absent)."""

    uid: str
    kind: GroupVersionKind
    operation: str
    name: str = ""
    namespace: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False
    user_info: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    sub_resource: str = ""
    api_version: str = V1


def decode_review(body: bytes | bytearray, content_type: str | None) -> AdmissionRequest:
    if not body:
        raise ReviewError(400, "request body is empty")
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(400, f"request entity is too large; limit is {MAX_BODY_BYTES} bytes")
    if content_type != JSON_CONTENT_TYPE:
        raise ReviewError(400, f"contentType={bounded(content_type)}, expected {JSON_CONTENT_TYPE}")
    if (values := json_values(body)) > MAX_JSON_VALUES:
        raise ReviewError(400, f"request holds too many JSON values ({values}); limit is {MAX_JSON_VALUES}")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        limit = f" (objects may nest at most {MAX_OBJECT_DEPTH} levels)" if "depth" in str(exc) else ""
        raise ReviewError(400, f"couldn't decode AdmissionReview: {exc}{limit}") from exc
    if not isinstance(review, dict):
        raise ReviewError(400, "couldn't decode AdmissionReview: not a JSON object")
    raw = review.get("request")
    uid = raw.get("uid") if isinstance(raw, dict) else None
    uid = uid if isinstance(uid, str) else ""
    api_version = review.get("apiVersion")
    version = str(api_version) if api_version in REVIEW_VERSIONS else V1
    if review.get("kind") != "AdmissionReview" or api_version not in REVIEW_VERSIONS:
        kind = bounded(repr(review.get("kind")))
        raise ReviewError(400, f"unsupported kind {kind} of apiVersion {bounded(repr(api_version))}", version, uid)
    return _request(raw, uid, version)


def _request(raw: Any, uid: str, api_version: str) -> AdmissionRequest:
    if not isinstance(raw, dict):
        raise ReviewError(400, "got an empty AdmissionRequest", api_version)
    if not uid:
        raise ReviewError(400, "AdmissionRequest has no uid", api_version)
    try:
        return AdmissionRequest(
            uid=uid,
            kind=_gvk(raw.get("kind")),
            operation=_text(raw, "operation"),
            name=_text(raw, "name"),
            namespace=_text(raw, "namespace"),
            object=_object(raw, "object"),
            old_object=_object(raw, "oldObject"),
            dry_run=raw.get("dryRun") is True,
            user_info=_mapping(raw, "userInfo"),
            resource=_mapping(raw, "resource"),
            sub_resource=_text(raw, "subResource"),
            api_version=api_version,
        )
    except ValueError as exc:
        raise ReviewError(400, f"couldn't decode AdmissionRequest: {exc}", api_version, uid) from exc


def _gvk(raw: Any) -> GroupVersionKind:
    if not isinstance(raw, dict):
        raise ValueError("kind is not an object")
    return GroupVersionKind(_text(raw, "group"), _text(raw, "version"), _text(raw, "kind"))


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value


def _mapping(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _object(raw: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{key} is not an object")
    if nesting_depth(value, MAX_OBJECT_DEPTH) > MAX_OBJECT_DEPTH:
        raise ValueError(f"{key} is nested more than {MAX_OBJECT_DEPTH} levels deep")
    return value


def json_values(text: bytes | bytearray) -> int:
    """About how many values the JSON `text` holds: its objects and arrays, and the commas between members.

    Counted on the bytes, much cheaper than decoding. Only when that count is over `MAX_JSON_VALUES` are the
    commas and brackets inside strings found and taken off (without copying the text), until it is not.
    """
    count = _separators(text, 0, len(text))
    if count > MAX_JSON_VALUES:
        for string in _JSON_STRING.finditer(text):
            count -= _separators(text, *string.span())
            if count <= MAX_JSON_VALUES:
                break
    return count


def _separators(text: bytes | bytearray, start: int, end: int) -> int:
    return text.count(b",", start, end) + text.count(b"{", start, end) + text.count(b"[", start, end)


def nesting_depth(value: Any, stop_above: int | None = None) -> int:
    """How many levels of objects and arrays `value` nests (0 for a scalar, 1 for `{}`), without recursion.

    With `stop_above`, the walk ends as soon as the depth exceeds it (and returns that depth).
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        deepest = max(deepest, depth)
        if stop_above is not None and deepest > stop_above:
            break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest
