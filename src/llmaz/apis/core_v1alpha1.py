"""`llmaz.io/v1alpha1`: OpenModel and the model types the inference API reuses."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from llmaz.apis import constants as c
from llmaz.apis.base import ApiModel, Condition, DateTime, ObjectMeta, ResourceList
from llmaz.apis.markers import Crd

ModelHubName = Literal["Huggingface", "ModelScope"]
ModelRole = Literal["main", "draft"]


class ModelHub(ApiModel):
    """A model hub repository holding the weights."""

    name: Annotated[ModelHubName | None, Crd(default=c.HUGGING_FACE)] = Field(
        default=None, description="Name of the model hub, Huggingface or ModelScope. Defaults to Huggingface."
    )
    model_id: str | None = Field(
        default=None,
        alias="modelID",
        description="ID of the model in the hub, for example meta-llama/Meta-Llama-3-8B.",
    )
    filename: str | None = Field(
        default=None,
        description=(
            "A single file to load instead of the whole repository, for example a GGUF file.\n"
            "Only Huggingface supports it, and it excludes allowPatterns and ignorePatterns."
        ),
    )
    revision: Annotated[str | None, Crd(default=c.DEFAULT_REVISION)] = Field(
        default=None, description="Branch, tag or commit of the repository. Defaults to main."
    )
    allow_patterns: list[str] | None = Field(
        default=None, description="Only files matching at least one of these glob patterns are loaded."
    )
    ignore_patterns: list[str] | None = Field(
        default=None, description="Files matching any of these glob patterns are not loaded."
    )


class ModelSource(ApiModel):
    """Where the weights come from: a model hub or a URI. At least one must be set; modelHub wins over uri."""

    model_hub: ModelHub | None = Field(default=None, description="A model hub repository.")
    uri: str | None = Field(
        default=None,
        description=(
            "A URI of the weights, one of oss://<bucket>.<endpoint>/<path>, s3://<bucket>/<path>,\n"
            "gcs://<bucket>/<path>, ollama://<model tag> or host://<absolute path>."
        ),
    )


class Flavor(ApiModel):
    """An accelerator choice for a model; the order of flavors is their priority."""

    name: str = Field(description="Name of the flavor, referenced by inferenceFlavors in claims.")
    limits: ResourceList | None = Field(
        default=None,
        description=(
            "Accelerators one replica needs, for example nvidia.com/gpu: 8. They are set as both requests\n"
            "and limits of the model-runner container."
        ),
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels of this flavor, for schedulers that understand flavors."
    )
    params: dict[str, str] | None = Field(
        default=None, description="Free-form parameters of this flavor, for example TP, PP or INSTANCE-TYPE."
    )


class InferenceConfig(ApiModel):
    """How the model is served."""

    flavors: Annotated[list[Flavor] | None, Crd(max_items=8)] = Field(
        default=None, description="Accelerator flavors, in order of preference. At most 8."
    )


class ModelClaim(ApiModel):
    """A single model used by a Playground."""

    model_name: str | None = Field(default=None, description="Name of the OpenModel.")
    inference_flavors: list[str] | None = Field(
        default=None, description="Flavors to use, in order of preference. Defaults to the model's flavors."
    )


class ModelRef(ApiModel):
    """A reference to an OpenModel and its role."""

    name: str = Field(description="Name of the OpenModel.")
    role: Annotated[ModelRole | None, Crd(default=c.MAIN_ROLE)] = Field(
        default=None,
        description="Role of the model: main, or draft for speculative decoding. Defaults to main.",
    )


class ModelClaims(ApiModel):
    """Several models used together, for example a main and a draft model."""

    models: Annotated[list[ModelRef] | None, Crd(min_items=1)] = Field(
        default=None, description="The models; the main model drives labels and flavors."
    )
    inference_flavors: list[str] | None = Field(
        default=None,
        description="Flavors to use, in order of preference. Defaults to the main model's flavors.",
    )


class Adapter(ApiModel):
    """A LoRA adapter of the model: loaded beside the weights and served as a model of its own name."""

    name: str = Field(
        description=(
            "Name the adapter is served under (the request's model field), a DNS-1123 label unique among the\n"
            "model's adapters."
        )
    )
    source: ModelSource = Field(description="Where the adapter's weights come from, as for the model's own source.")
    scale: float | None = Field(
        default=None, description="How strongly the adapter applies to a request that names it. Defaults to 1."
    )


class ModelSpec(ApiModel):
    """The desired state of an OpenModel."""

    family_name: str = Field(description="Family of the model, for example llama3.")
    source: ModelSource = Field(description="Where the weights come from.")
    inference_config: InferenceConfig | None = Field(default=None, description="How the model is served.")
    adapters: Annotated[list[Adapter] | None, Crd(max_items=16)] = Field(
        default=None,
        description=(
            "LoRA adapters of the model, loaded with it by the model loader and served under their own names.\n"
            "An addition of this project: llmaz's manifests, without it, apply unchanged."
        ),
    )
    owned_by: Annotated[str | None, Crd(default=c.DEFAULT_OWNED_BY)] = Field(
        default=None, description="Owner of the model, reported by engines as owned_by. Defaults to llmaz."
    )
    created_at: DateTime | None = Field(
        default=None, description="Creation time of the model, reported by engines as created."
    )


class ModelStatus(ApiModel):
    """The observed state of an OpenModel."""

    conditions: list[Condition] | None = Field(default=None, description="Conditions of the model.")


class OpenModel(ApiModel):
    """OpenModel describes a model: where its weights come from and which accelerators can serve it."""

    GROUP: ClassVar[str] = c.CORE_GROUP
    KIND: ClassVar[str] = "OpenModel"

    api_version: str = c.CORE_API_VERSION
    kind: str = "OpenModel"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ModelSpec
    status: ModelStatus | None = None
