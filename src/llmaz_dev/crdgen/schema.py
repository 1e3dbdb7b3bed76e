"""Turn pydantic API models into structural OpenAPI v3 schemas, as controller-gen does for Go types.

The walk is driven by Python type hints plus `llmaz.apis.markers.Crd` facts. Output is plain dicts with keys in a
stable order, so the generated YAML is deterministic.
"""

from __future__ import annotations

import inspect
import types
import typing
from datetime import datetime
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from llmaz.apis.markers import Crd
from llmaz.apis.quantity import QUANTITY_PATTERN

UpstreamResolver = typing.Callable[[str], dict[str, Any]]


class SchemaError(TypeError):
    pass


def model_schema(
    model: type[BaseModel], upstream: UpstreamResolver, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The object schema of a model: its fields as properties and its required fields.

    `skip` names JSON fields left out (a root object's apiVersion, kind and metadata have fixed schemas).
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        json_name = field.serialization_alias or field.alias or name
        if json_name in skip:
            continue
        properties[json_name] = field_schema(field, upstream)
        if _is_required(field):
            required.append(json_name)
    schema: dict[str, Any] = {"type": "object", "properties": dict(sorted(properties.items()))}
    if required:
        schema["required"] = sorted(required)
    return schema


def field_schema(field: FieldInfo, upstream: UpstreamResolver) -> dict[str, Any]:
    markers = [m for m in field.metadata if isinstance(m, Crd)]
    schema = {} if any(m.upstream or m.opaque for m in markers) else type_schema(field.annotation, upstream)
    for marker in markers:
        schema = _apply_marker(schema, marker, upstream)
    if field.description:
        schema = {**schema, "description": field.description}
    return schema


def type_schema(annotation: Any, upstream: UpstreamResolver) -> dict[str, Any]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        base, *extras = get_args(annotation)
        markers = [extra for extra in extras if isinstance(extra, Crd)]
        # An upstream schema replaces the Python type's, which may be a free-form mapping.
        schema = {} if any(m.upstream or m.opaque for m in markers) else type_schema(base, upstream)
        for marker in markers:
            schema = _apply_marker(schema, marker, upstream)
        return schema
    if origin in (Union, types.UnionType):
        return _union_schema(annotation, upstream)
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(annotation))}
    if origin is list:
        (item,) = get_args(annotation)
        return {"type": "array", "items": type_schema(item, upstream)}
    if origin is dict:
        _, value = get_args(annotation)
        if value is Any:
            raise SchemaError("a free-form mapping needs an upstream schema marker")
        return {"type": "object", "additionalProperties": type_schema(value, upstream)}
    return _scalar_or_model(annotation, upstream)


def _union_schema(annotation: Any, upstream: UpstreamResolver) -> dict[str, Any]:
    members = [arg for arg in get_args(annotation) if arg is not type(None)]
    if len(members) == 1:
        return type_schema(members[0], upstream)
    if set(members) == {int, str}:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    raise SchemaError(f"unsupported union {annotation!r}")


def _scalar_or_model(annotation: Any, upstream: UpstreamResolver) -> dict[str, Any]:
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is datetime:
        return {"type": "string", "format": "date-time"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        schema = model_schema(annotation, upstream)
        return {"description": inspect.cleandoc(annotation.__doc__), **schema} if annotation.__doc__ else schema
    raise SchemaError(f"unsupported type {annotation!r}")


def _apply_marker(schema: dict[str, Any], marker: Crd, upstream: UpstreamResolver) -> dict[str, Any]:
    if marker.upstream is not None:
        schema = dict(upstream(marker.upstream))
        schema.pop("description", None)  # the field's own description says what it is here
    if marker.quantity:
        schema = {**schema, "pattern": QUANTITY_PATTERN}
    extra = {
        "default": marker.default,
        "format": marker.format,
        "minimum": marker.minimum,
        "maximum": marker.maximum,
        "maxItems": marker.max_items,
        "minItems": marker.min_items,
    }
    if marker.opaque:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if marker.rules:
        extra["x-kubernetes-validations"] = [{"message": message, "rule": rule} for rule, message in marker.rules]
    return {**schema, **{key: value for key, value in extra.items() if value is not None}}


def _is_required(field: FieldInfo) -> bool:
    if any(isinstance(m, Crd) and m.required for m in field.metadata):
        return True
    return field.is_required()
