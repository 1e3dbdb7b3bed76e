"""OpenModel validation: llmaz's source rules, and the rules of the adapters this project adds.

The source rules' order and texts are llmaz's (all errors are collected, none short-circuits another):
source set -> URI format / protocol / address -> ModelScope filename -> filename vs patterns -> name (create).
Each adapter's source is held to the same rules, reported under `spec.adapters[<index>].source`, and cannot be an
ollama:// URI; adapter names are DNS-1123 labels, unique within the model and not the model's own name (the
gateway serves both under their names); a scale is a number in (0, 4]. The family name must be a label value
(the defaulter copies it into the label `llmaz.io/model-family-name`), checked after the source rules; llmaz let
the API server refuse the label, under `metadata.labels`.
"""

from __future__ import annotations

import math
from typing import Final

from llmaz.apis import constants as c
from llmaz.apis.core_v1alpha1 import ModelSource, OpenModel
from llmaz.apis.uri import parse_bucket_path, parse_oss, parse_uri
from llmaz.apis.validation.field import FieldError, forbidden, invalid
from llmaz.apis.validation.names import dns1123_label_messages, label_value_messages, validate_name

SOURCE_NULL: Final = "Source can't be all null"
URI_WRONG_FORMAT: Final = "URI with wrong format"
URI_UNSUPPORTED_PROTOCOL: Final = "URI with unsupported protocol"
URI_WRONG_ADDRESS: Final = "URI with wrong address"
FILENAME_HUGGINGFACE_ONLY: Final = "Filename can only set once modelHub is Huggingface"
ALLOW_PATTERNS_WITH_FILENAME: Final = "Once Filename is set, allowPatterns should be nil"
IGNORE_PATTERNS_WITH_FILENAME: Final = "Once Filename is set, ignorePatterns should be nil"
ADAPTER_NAME_DUPLICATED: Final = "adapter names must be unique within the model: another adapter has this name"
ADAPTER_NAME_IS_MODEL: Final = (
    "an adapter cannot be named like its model: requests name one or the other, so they need names of their own"
)
ADAPTER_OLLAMA: Final = (
    "an adapter cannot come from ollama://: ollama pulls whole models by tag, not adapter weights; use a model hub, "
    "an object store (oss://, s3://, gcs://) or host://"
)
MAX_ADAPTER_SCALE: Final = 4.0
ADAPTER_SCALE_RANGE: Final = (
    f"must be a number greater than 0 and at most {MAX_ADAPTER_SCALE:g} (how strongly the adapter applies; 1 is "
    "as trained)"
)


def validate_openmodel(model: OpenModel, creating: bool) -> list[FieldError]:
    errors = validate_source(model.spec.source, "spec.source")
    family = model.spec.family_name
    errors += [invalid("spec.familyName", family, message) for message in label_value_messages(family)]
    if creating:
        errors += validate_name(model.metadata.to_dict())
    return errors + validate_adapters(model)


def validate_source(source: ModelSource, path: str) -> list[FieldError]:
    """llmaz's rules for a model source at `path` (`spec.source`, or an adapter's)."""
    errors: list[FieldError] = []
    if source.model_hub is None and source.uri is None:
        errors.append(forbidden(path, SOURCE_NULL))
    if source.uri is not None:
        errors += _validate_uri(source.uri, f"{path}.uri")
    hub = source.model_hub
    if hub is not None and hub.filename is not None:
        if hub.name == c.MODEL_SCOPE:
            errors.append(invalid(f"{path}.modelHub.filename", hub.filename, FILENAME_HUGGINGFACE_ONLY))
        if hub.allow_patterns is not None:
            errors.append(invalid(f"{path}.modelHub.allowPatterns", hub.allow_patterns, ALLOW_PATTERNS_WITH_FILENAME))
        if hub.ignore_patterns is not None:
            errors.append(
                invalid(f"{path}.modelHub.ignorePatterns", hub.ignore_patterns, IGNORE_PATTERNS_WITH_FILENAME)
            )
    return errors


def _validate_uri(uri: str, path: str) -> list[FieldError]:
    try:
        protocol, address = parse_uri(uri)
    except ValueError:
        return [invalid(path, uri, URI_WRONG_FORMAT)]
    if protocol not in c.URI_PROTOCOLS:
        return [invalid(path, uri, URI_UNSUPPORTED_PROTOCOL)]
    try:
        if protocol == c.OSS:
            parse_oss(address)
        elif protocol in (c.S3, c.GCS):
            parse_bucket_path(address)
    except ValueError:
        return [invalid(path, uri, URI_WRONG_ADDRESS)]
    return []


def validate_adapters(model: OpenModel) -> list[FieldError]:
    """The rules of `spec.adapters`: names, sources and scales."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, adapter in enumerate(model.spec.adapters or ()):
        path = f"spec.adapters[{index}]"
        errors += [invalid(f"{path}.name", adapter.name, message) for message in dns1123_label_messages(adapter.name)]
        if adapter.name in seen:
            errors.append(invalid(f"{path}.name", adapter.name, ADAPTER_NAME_DUPLICATED))
        elif adapter.name == model.metadata.name:
            errors.append(invalid(f"{path}.name", adapter.name, ADAPTER_NAME_IS_MODEL))
        seen.add(adapter.name)
        source_errors = validate_source(adapter.source, f"{path}.source")
        errors += source_errors
        uri = adapter.source.uri
        if not source_errors and adapter.source.model_hub is None and uri and parse_uri(uri)[0] == c.OLLAMA:
            errors.append(invalid(f"{path}.source.uri", uri, ADAPTER_OLLAMA))
        scale = adapter.scale
        if scale is not None and not (math.isfinite(scale) and 0 < scale <= MAX_ADAPTER_SCALE):
            errors.append(invalid(f"{path}.scale", scale, ADAPTER_SCALE_RANGE))
    return errors
