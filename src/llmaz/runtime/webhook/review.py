"""AdmissionReview decoding: the checks controller-runtime applies before a handler runs.

Invariants: `decode_review` never raises anything but `ReviewError`, whose `code` is the HTTP-style status
placed in the denial (400 for every client-side fault). The body is capped at `MAX_BODY_BYTES` (7 MiB: two
3 MiB objects on UPDATE plus 1 MiB of overhead). Both `admission.k8s.io/v1` and `v1beta1` are read, and the
answer uses the version asked in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson

MAX_BODY_BYTES: Final = 7 * 1024 * 1024
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


def decode_review(body: bytes, content_type: str | None) -> AdmissionRequest:
    if not body:
        raise ReviewError(400, "request body is empty")
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(400, f"request entity is too large; limit is {MAX_BODY_BYTES} bytes")
    if content_type != JSON_CONTENT_TYPE:
        raise ReviewError(400, f"contentType={content_type}, expected {JSON_CONTENT_TYPE}")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(400, f"couldn't decode AdmissionReview: {exc}") from exc
    if not isinstance(review, dict):
        raise ReviewError(400, "couldn't decode AdmissionReview: not a JSON object")
    api_version = review.get("apiVersion")
    version = api_version if api_version in REVIEW_VERSIONS else V1
    if review.get("kind") != "AdmissionReview" or api_version not in REVIEW_VERSIONS:
        raise ReviewError(400, f"unsupported kind {review.get('kind')!r} of apiVersion {api_version!r}", version)
    return _request(review.get("request"), str(version))


def _request(raw: Any, api_version: str) -> AdmissionRequest:
    if not isinstance(raw, dict):
        raise ReviewError(400, "got an empty AdmissionRequest", api_version)
    uid = raw.get("uid")
    if not isinstance(uid, str) or not uid:
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
    if value is None or isinstance(value, dict):
        return value
    raise ValueError(f"{key} is not an object")
