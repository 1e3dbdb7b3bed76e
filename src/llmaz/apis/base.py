"""The base every API model shares, and the Kubernetes types llmaz objects embed.

Round-trip promise: `Model.from_dict(d).to_dict() == d` for any object the API server stores, including fields
this version does not know (a newer client's data is kept, not dropped), and unset optional fields are omitted
rather than sent as `null`.

Embedded Kubernetes types (EnvVar, Probe, pod templates, HPA metrics) are plain mappings in Python; their CRD
schemas come from pinned upstream sources (see `llmaz_dev.crdgen.upstream`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from llmaz.apis.markers import Crd
from llmaz.apis.quantity import QUANTITY_PATTERN, is_quantity


class ApiModel(BaseModel):
    """Base for every API type: camelCase JSON names, unknown fields preserved, unset fields omitted."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not is_quantity(value):
        raise ValueError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    return value


Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1), Crd(format="int32")]
Quantity = Annotated[int | str, AfterValidator(_check_quantity), Crd(quantity=True)]
ResourceList = dict[str, Quantity]
DateTime = Annotated[datetime, Crd(format="date-time")]

# Embedded upstream Kubernetes types, kept as mappings; the names refer to vendored upstream schemas.
EnvVar = Annotated[dict[str, Any], Crd(upstream="EnvVar")]
Lifecycle = Annotated[dict[str, Any], Crd(upstream="Lifecycle")]
Probe = Annotated[dict[str, Any], Crd(upstream="Probe")]
LeaderWorkerTemplate = Annotated[dict[str, Any], Crd(upstream="LeaderWorkerTemplate")]
RolloutStrategy = Annotated[dict[str, Any], Crd(upstream="RolloutStrategy")]
MetricSpec = Annotated[dict[str, Any], Crd(upstream="MetricSpec")]
HorizontalPodAutoscalerBehavior = Annotated[dict[str, Any], Crd(upstream="HorizontalPodAutoscalerBehavior")]
Condition = Annotated[dict[str, Any], Crd(upstream="Condition")]


class ObjectMeta(ApiModel):
    """The metadata fields llmaz reads; everything else the server sends is preserved as extra fields."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None


class ResourceRequirements(ApiModel):
    """Compute resources: `limits` and `requests` by resource name."""

    limits: ResourceList | None = Field(
        default=None, description="Limits describes the maximum amount of compute resources allowed."
    )
    requests: ResourceList | None = Field(
        default=None,
        description=(
            "Requests describes the minimum amount of compute resources required.\n"
            "If Requests is omitted for a container, it defaults to Limits if that is explicitly specified,\n"
            "otherwise to an implementation-defined value. Requests cannot exceed Limits."
        ),
    )
