"""`inference.networking.k8s.io/v1`: the Gateway API Inference Extension's InferencePool, as llmaz writes it.

llmaz does not define this API: the Gateway API Inference Extension (GIE) does, and gateways that implement it read
it. This model is the part of it llmaz creates (one pool per Playground that asks for one) and the source of the
CRD in `config/gie/` (and the chart's `crds/`), for clusters that do not have GIE's own CRD installed. Its fields,
defaults and validation follow GIE v1; `status.parents` belongs to the gateways and is kept opaque.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from llmaz.apis import constants as c
from llmaz.apis.base import ApiModel, ObjectMeta
from llmaz.apis.markers import Crd

FailureMode = Literal["FailOpen", "FailClose"]
AppProtocol = Literal["http", "kubernetes.io/h2c"]
PortNumber = Annotated[int, Field(ge=1, le=65535), Crd(format="int32", minimum=1, maximum=65535)]

MAX_TARGET_PORTS = 8


class LabelSelector(ApiModel):
    """Selects the pods of the pool, in the pool's namespace, by their labels."""

    match_labels: dict[str, str] = Field(
        description="Labels a pod must carry, every one of them, to be an endpoint of the pool."
    )


class Port(ApiModel):
    """A port of the pool's pods."""

    number: PortNumber = Field(description="The port number on the pods.")


class PortReference(ApiModel):
    """A port of the endpoint picker's Service."""

    number: PortNumber = Field(description="The port number of the Service.")


class EndpointPickerRef(ApiModel):
    """The endpoint picker that chooses, for each request, which pod of the pool serves it."""

    group: Annotated[str | None, Crd(default="")] = Field(
        default=None, description="API group of the referent; empty (the default) for the core group."
    )
    kind: Annotated[str | None, Crd(default="Service")] = Field(
        default=None, description="Kind of the referent. Defaults to Service."
    )
    name: str = Field(description="Name of the referent, in the pool's namespace.")
    port: PortReference | None = Field(
        default=None, description="Port of the referent that serves the endpoint picker; required for a Service."
    )
    failure_mode: Annotated[FailureMode | None, Crd(default="FailClose")] = Field(
        default=None,
        description=(
            "What a gateway does while the endpoint picker does not answer: FailClose (the default) fails the\n"
            "request; FailOpen sends it to an endpoint of the gateway's own choice."
        ),
    )


_TARGET_PORTS_RULES = (("self.all(p1, self.exists_one(p2, p1.number == p2.number))", "port numbers must be unique"),)
_PICKER_RULES = (("self.kind != 'Service' || has(self.port)", "port is required when kind is Service"),)


class InferencePoolSpec(ApiModel):
    """The desired state of an InferencePool."""

    selector: LabelSelector = Field(description="The pods of the pool, in its namespace.")
    target_ports: Annotated[
        list[Port],
        Field(min_length=1, max_length=MAX_TARGET_PORTS),
        Crd(min_items=1, max_items=MAX_TARGET_PORTS, rules=_TARGET_PORTS_RULES),
    ] = Field(
        description=(
            "The ports the pool's pods serve on (1 to 8, unique): each port of each pod is an endpoint of\nthe pool."
        ),
    )
    app_protocol: Annotated[AppProtocol | None, Crd(default="http")] = Field(
        default=None, description="Protocol the endpoints speak: http (the default) or kubernetes.io/h2c."
    )
    endpoint_picker_ref: Annotated[EndpointPickerRef, Crd(rules=_PICKER_RULES)] = Field(
        description="The endpoint picker of the pool."
    )


class InferencePoolStatus(ApiModel):
    """The observed state of an InferencePool, written by the gateways that use it."""

    parents: Annotated[list[Annotated[dict[str, Any], Crd(opaque=True)]] | None, Crd(max_items=32)] = Field(
        default=None, description="One entry per gateway (parent) using the pool: its reference and conditions."
    )


class InferencePool(ApiModel):
    """InferencePool is a group of model server pods and the endpoint picker that routes requests among them."""

    GROUP: ClassVar[str] = c.GIE_GROUP
    KIND: ClassVar[str] = "InferencePool"

    api_version: str = c.GIE_API_VERSION
    kind: str = "InferencePool"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: InferencePoolSpec
    status: InferencePoolStatus | None = None
