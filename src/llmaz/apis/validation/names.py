"""The DNS-1123 label check llmaz applies to object names on create, with apimachinery's exact texts; the
stricter check of the names of what serves models (`validate_serving_name`); the label-value check."""

from __future__ import annotations

import re
from typing import Any, Final

from llmaz.apis.validation.field import FieldError, invalid

DNS1123_LABEL_MAX_LENGTH: Final = 63
DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(DNS1123_LABEL_FMT)

MAX_LENGTH_MESSAGE: Final = f"must be no more than {DNS1123_LABEL_MAX_LENGTH} characters"
# The two spaces after 'my-name', are apimachinery's text.
LABEL_FORMAT_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    f"'{DNS1123_LABEL_FMT}')"
)

DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_RE = re.compile(DNS1035_LABEL_FMT)
DNS1035_FORMAT_MESSAGE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
    f"is '{DNS1035_LABEL_FMT}')"
)
LABEL_VALUE_MAX_LENGTH: Final = 63
LABEL_VALUE_FMT: Final = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE_RE = re.compile(LABEL_VALUE_FMT)
LABEL_VALUE_FORMAT_MESSAGE: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    f"validation is '{LABEL_VALUE_FMT}')"
)

# The API server appends this many random characters to a generateName, after cutting it to fit.
_GENERATED_SUFFIX_LENGTH: Final = 5
_GENERATE_NAME_MAX_PREFIX: Final = DNS1123_LABEL_MAX_LENGTH - _GENERATED_SUFFIX_LENGTH


def dns1123_label_messages(value: str) -> list[str]:
    """apimachinery's IsDNS1123Label: the length message, then the format message, each only if violated."""
    messages = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        messages.append(MAX_LENGTH_MESSAGE)
    if not _DNS1123_LABEL_RE.fullmatch(value):
        messages.append(LABEL_FORMAT_MESSAGE)
    return messages


def label_value_messages(value: str) -> list[str]:
    """apimachinery's IsValidLabelValue: the length message, then the format message, each only if violated."""
    messages = []
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        messages.append(f"must be no more than {LABEL_VALUE_MAX_LENGTH} characters")
    if not _LABEL_VALUE_RE.fullmatch(value):
        messages.append(LABEL_VALUE_FORMAT_MESSAGE)
    return messages


def serving_name_too_long(max_length: int) -> str:
    return (
        f"must be no more than {max_length} characters, so that every name made from it fits in 63: the Service "
        "`<name>-lb`, and the label `controller-revision-hash: <StatefulSet name>-<hash>` of its LeaderWorkerSet's "
        "pods"
    )


def validate_serving_name(metadata: dict[str, Any] | None, max_length: int) -> list[FieldError]:
    """`validate_name`, and, for a Playground or inference Service, what the objects made from its name need: a
    DNS-1035 label (the `-lb` and the headless Service names start with a letter) of at most `max_length`
    characters (`llmaz.apis.serving.max_name_length`). Each only when the name is a DNS-1123 label."""
    errors = validate_name(metadata)
    if errors:
        return errors
    meta = metadata or {}
    name = meta.get("name") or ""
    path, value, candidate = "metadata.name", name, name
    if not name and isinstance(meta.get("generateName"), str) and meta["generateName"]:
        prefix = meta["generateName"]
        path, value = "metadata.generateName", prefix
        candidate = prefix[:_GENERATE_NAME_MAX_PREFIX] + "x" * _GENERATED_SUFFIX_LENGTH
    if not isinstance(candidate, str):
        return []
    if candidate and not _DNS1035_LABEL_RE.fullmatch(candidate):
        errors.append(invalid(path, value, DNS1035_FORMAT_MESSAGE))
    if len(candidate) > max_length:
        errors.append(invalid(path, value, serving_name_too_long(max_length)))
    return errors


def validate_name(metadata: dict[str, Any] | None) -> list[FieldError]:
    """Errors on `metadata.name` when it is not a DNS-1123 label.

    A create with only `generateName` is checked on the name the API server will generate (the prefix cut to
    58 characters plus five lowercase alphanumerics), so a valid prefix is not rejected for the empty name.
    """
    meta = metadata or {}
    name = meta.get("name") or ""
    prefix = meta.get("generateName") or ""
    if not name and isinstance(prefix, str) and prefix:
        candidate = prefix[:_GENERATE_NAME_MAX_PREFIX] + "x" * _GENERATED_SUFFIX_LENGTH
        return [invalid("metadata.generateName", prefix, m) for m in dns1123_label_messages(candidate)]
    text = name if isinstance(name, str) else str(name)
    return [invalid("metadata.name", text, message) for message in dns1123_label_messages(text)]
