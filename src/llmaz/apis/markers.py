"""Schema markers: the facts a CRD needs that Python types cannot say by themselves.

They play the part of kubebuilder's `+kubebuilder:...` comments: attached to a field with `Annotated[...]`, they are
read by `llmaz_dev.crdgen` and ignored by pydantic (validation of the same rules is spelled out in the type where it
matters to Python callers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Crd:
    """Extra OpenAPI facts for one field or type.

    `default` is a CRD (structural) default, applied by the API server while decoding, before any webhook runs.
    `upstream` names a vendored upstream schema (see `llmaz_dev.crdgen.upstream`) that replaces the Python type's
    schema entirely: used for embedded Kubernetes types that Python keeps as plain mappings.
    `rules` are CEL validation rules (`x-kubernetes-validations`) as (rule, message) pairs; `opaque` makes an
    object schema keep whatever fields it is given (`x-kubernetes-preserve-unknown-fields`), for data other
    controllers own.
    """

    default: Any = None
    format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    max_items: int | None = None
    min_items: int | None = None
    upstream: str | None = None
    quantity: bool = False
    required: bool = False
    rules: tuple[tuple[str, str], ...] = ()
    opaque: bool = False
