"""OpenModel admission: the family-name label and createdAt defaults, and the source rules of llmaz.

Validation order and texts are llmaz's (all errors are collected, none short-circuits another):
source set -> URI format / protocol / address -> ModelScope filename -> filename vs patterns -> name (create).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, Final

from llmaz.apis import OpenModel
from llmaz.apis import constants as c
from llmaz.apis.uri import parse_bucket_path, parse_oss, parse_uri
from llmaz.webhooks.field import FieldError, forbidden, invalid
from llmaz.webhooks.names import validate_name

SOURCE_NULL: Final = "Source can't be all null"
URI_WRONG_FORMAT: Final = "URI with wrong format"
URI_UNSUPPORTED_PROTOCOL: Final = "URI with unsupported protocol"
URI_WRONG_ADDRESS: Final = "URI with wrong address"
FILENAME_HUGGINGFACE_ONLY: Final = "Filename can only set once modelHub is Huggingface"
ALLOW_PATTERNS_WITH_FILENAME: Final = "Once Filename is set, allowPatterns should be nil"
IGNORE_PATTERNS_WITH_FILENAME: Final = "Once Filename is set, ignorePatterns should be nil"
HUB_AND_URI_WARNING: Final = "spec.source: both modelHub and uri are set; modelHub is used and uri is ignored"


def default_openmodel(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A copy of `obj` with the family-name label set (always overwritten) and createdAt set if missing.

    Works on the raw object, because mutating webhooks run before the API server's schema validation.
    """
    out = copy.deepcopy(obj)
    spec = out.get("spec") if isinstance(out.get("spec"), dict) else None
    family = spec.get("familyName") if spec else None
    _labels(out)[c.MODEL_FAMILY_NAME_LABEL] = family if isinstance(family, str) else ""
    if spec is not None and spec.get("createdAt") is None:
        spec["createdAt"] = rfc3339_seconds(now)
    return out


def rfc3339_seconds(now: datetime) -> str:
    """`now` in UTC, truncated to seconds: `2025-01-02T03:04:05Z`."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    return labels


def validate_openmodel(model: OpenModel, creating: bool) -> list[FieldError]:
    source = model.spec.source
    errors: list[FieldError] = []
    if source.model_hub is None and source.uri is None:
        errors.append(forbidden("spec.source", SOURCE_NULL))
    if source.uri is not None:
        errors += _validate_uri(source.uri)
    hub = source.model_hub
    if hub is not None and hub.filename is not None:
        if hub.name == c.MODEL_SCOPE:
            errors.append(invalid("spec.source.modelHub.filename", hub.filename, FILENAME_HUGGINGFACE_ONLY))
        if hub.allow_patterns is not None:
            errors.append(
                invalid("spec.source.modelHub.allowPatterns", hub.allow_patterns, ALLOW_PATTERNS_WITH_FILENAME)
            )
        if hub.ignore_patterns is not None:
            errors.append(
                invalid("spec.source.modelHub.ignorePatterns", hub.ignore_patterns, IGNORE_PATTERNS_WITH_FILENAME)
            )
    if creating:
        errors += validate_name(model.metadata.to_dict())
    return errors


def _validate_uri(uri: str) -> list[FieldError]:
    try:
        protocol, address = parse_uri(uri)
    except ValueError:
        return [invalid("spec.source.uri", uri, URI_WRONG_FORMAT)]
    if protocol not in c.URI_PROTOCOLS:
        return [invalid("spec.source.uri", uri, URI_UNSUPPORTED_PROTOCOL)]
    try:
        if protocol == c.OSS:
            parse_oss(address)
        elif protocol in (c.S3, c.GCS):
            parse_bucket_path(address)
    except ValueError:
        return [invalid("spec.source.uri", uri, URI_WRONG_ADDRESS)]
    return []


def openmodel_warnings(model: OpenModel) -> list[str]:
    """Admitted but surprising: a hub and a URI together (the hub wins everywhere, as in llmaz)."""
    source = model.spec.source
    return [HUB_AND_URI_WARNING] if source.model_hub is not None and source.uri is not None else []
