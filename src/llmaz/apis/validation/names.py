"""The DNS-1123 label check llmaz applies to object names on create, with apimachinery's exact texts."""

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
