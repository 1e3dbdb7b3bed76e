"""`inference.llmaz.io/v1alpha1`: BackendRuntime, Playground and Service."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from llmaz.apis import constants as c
from llmaz.apis.base import (
    ApiModel,
    Condition,
    EnvVar,
    HorizontalPodAutoscalerBehavior,
    Int32,
    LeaderWorkerTemplate,
    Lifecycle,
    MetricSpec,
    ObjectMeta,
    Probe,
    Quantity,
    ResourceRequirements,
    RolloutStrategy,
)
from llmaz.apis.core_v1alpha1 import ModelClaim, ModelClaims, ModelSource
from llmaz.apis.markers import Crd

ROLLOUT_STRATEGY_DEFAULT = {
    "type": "RollingUpdate",
    "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
}


class HPATrigger(ApiModel):
    """Scaling by a HorizontalPodAutoscaler."""

    metrics: list[MetricSpec] | None = Field(
        default=None,
        description="Metrics the HPA scales on, as in autoscaling/v2 HorizontalPodAutoscalerSpec.",
    )
    behavior: HorizontalPodAutoscalerBehavior | None = Field(
        default=None, description="Scaling behavior, as in autoscaling/v2 HorizontalPodAutoscalerSpec."
    )


class ScaleTrigger(ApiModel):
    """What triggers scaling."""

    hpa: HPATrigger | None = Field(default=None, description="Scale with a HorizontalPodAutoscaler.")


class RequestsTrigger(ApiModel):
    """Scaling by llmaz-gateway's autoscaler on the requests the model's engines hold (running plus waiting)."""

    target_per_replica: float = Field(
        description=(
            "Requests (running plus waiting) one replica should carry; the autoscaler keeps\n"
            "ceil(load / targetPerReplica) replicas. Must be greater than 0."
        )
    )
    stable_window: Annotated[str | None, Crd(default=c.AUTOSCALE_STABLE_WINDOW)] = Field(
        default=None,
        description="Duration the load is averaged over for ordinary decisions (e.g. 60s, 2m). Defaults to 60s.",
    )
    panic_window: Annotated[str | None, Crd(default=c.AUTOSCALE_PANIC_WINDOW)] = Field(
        default=None,
        description=("Duration of the short average that detects bursts; shorter than stableWindow. Defaults to 6s."),
    )
    panic_threshold: Annotated[float | None, Crd(default=c.AUTOSCALE_PANIC_THRESHOLD)] = Field(
        default=None,
        description=(
            "Panic when the panicWindow load reaches this multiple of the current replicas' capacity\n"
            "(replicas x targetPerReplica): scale up at once and not down while panicking. Greater than 1;\n"
            "defaults to 2.0."
        ),
    )
    scale_down_delay: Annotated[str | None, Crd(default=c.AUTOSCALE_SCALE_DOWN_DELAY)] = Field(
        default=None,
        description=("Duration fewer replicas must have been enough before one is removed (e.g. 5m). Defaults to 5m."),
    )


class PlaygroundScaleTrigger(ScaleTrigger):
    """What triggers scaling a Playground: an HPA, or llmaz-gateway's autoscaler; at most one."""

    requests: RequestsTrigger | None = Field(
        default=None,
        description=(
            "Scale with llmaz-gateway's autoscaler on the requests the engines hold; no HPA is created.\n"
            "Needs llmaz-gateway with --autoscaler on (the default)."
        ),
    )


class RecommendedConfig(ApiModel):
    """A named preset of arguments, resources and scaling for a backend."""

    name: str = Field(
        description=(
            "Name of the preset, unique within the backend. default and speculative-decoding are chosen\n"
            "automatically when a Playground names no configName."
        )
    )
    args: list[str] | None = Field(
        default=None,
        description=(
            "Arguments of the model-runner container. The placeholders {{ .ModelPath }}, {{ .ModelName }} and\n"
            "{{ .DraftModelPath }} are replaced with the model's values."
        ),
    )
    resources: ResourceRequirements | None = Field(default=None, description="Resources of the model-runner.")
    shared_memory_size: Quantity | None = Field(default=None, description="Size of /dev/shm.")
    scale_trigger: ScaleTrigger | None = Field(
        default=None, description="Default scaling for Playgrounds using this preset."
    )


class BackendRuntimeSpec(ApiModel):
    """The desired state of a BackendRuntime."""

    command: list[str] | None = Field(default=None, description="Command of the model-runner container.")
    image: str = Field(description="Image repository of the inference engine, without a tag.")
    version: str = Field(description="Image tag of the inference engine.")
    envs: list[EnvVar] | None = Field(
        default=None, description="Environment of the model-runner container; Playground envs override them."
    )
    lifecycle: Lifecycle | None = Field(default=None, description="Lifecycle hooks of the model-runner container.")
    liveness_probe: Probe | None = Field(default=None, description="Liveness probe of the model-runner container.")
    readiness_probe: Probe | None = Field(default=None, description="Readiness probe of the model-runner container.")
    startup_probe: Probe | None = Field(default=None, description="Startup probe of the model-runner container.")
    recommended_configs: list[RecommendedConfig] | None = Field(
        default=None, description="Named presets of arguments, resources and scaling."
    )


class BackendRuntimeStatus(ApiModel):
    """The observed state of a BackendRuntime."""

    conditions: list[Condition] | None = Field(default=None, description="Conditions of the backend.")


class BackendRuntime(ApiModel):
    """BackendRuntime describes an inference engine: image, command, probes and recommended configs."""

    GROUP: ClassVar[str] = c.INFERENCE_GROUP
    KIND: ClassVar[str] = "BackendRuntime"

    api_version: str = c.INFERENCE_API_VERSION
    kind: str = "BackendRuntime"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: BackendRuntimeSpec
    status: BackendRuntimeStatus | None = None


class BackendRuntimeConfig(ApiModel):
    """Which backend serves a Playground, and how."""

    backend_name: Annotated[str | None, Crd(default=c.DEFAULT_BACKEND_NAME)] = Field(
        default=None, description="Name of the BackendRuntime. Defaults to vllm."
    )
    version: str | None = Field(default=None, description="Image tag overriding the backend's version.")
    envs: list[EnvVar] | None = Field(
        default=None, description="Environment merged over the backend's envs; the same name wins here."
    )
    config_name: str | None = Field(
        default=None,
        description=(
            "Name of the backend's recommended config to use. Defaults to speculative-decoding when a draft\n"
            "model is claimed, else default."
        ),
    )
    args: list[str] | None = Field(
        default=None, description="Arguments appended after the recommended config's arguments."
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources overriding the recommended config's, key by key."
    )
    shared_memory_size: Quantity | None = Field(
        default=None, description="Size of /dev/shm, overriding the recommended config's."
    )


class ElasticConfig(ApiModel):
    """Autoscaling of a Playground."""

    min_replicas: Annotated[Int32 | None, Crd(default=1)] = Field(
        default=None, description="Lower bound of replicas. Defaults to 1; must be less than maxReplicas."
    )
    max_replicas: Annotated[Int32, Crd(minimum=1)] = Field(description="Upper bound of replicas.")
    scale_trigger: PlaygroundScaleTrigger | None = Field(
        default=None, description="What triggers scaling; overrides the recommended config's scaleTrigger."
    )


class PlaygroundSpec(ApiModel):
    """The desired state of a Playground."""

    replicas: Annotated[Int32 | None, Crd(default=1)] = Field(
        default=None, description="Number of replicas. Defaults to 1."
    )
    model_claim: ModelClaim | None = Field(
        default=None, description="A single model to serve. Exactly one of modelClaim and modelClaims is set."
    )
    model_claims: ModelClaims | None = Field(
        default=None, description="Several models served together, for example for speculative decoding."
    )
    backend_runtime_config: BackendRuntimeConfig | None = Field(
        default=None, description="Which backend serves the models, and how."
    )
    elastic_config: ElasticConfig | None = Field(default=None, description="Autoscaling.")


class PlaygroundStatus(ApiModel):
    """The observed state of a Playground."""

    conditions: list[Condition] | None = Field(default=None, description="Conditions of the Playground.")
    replicas: Annotated[Int32, Crd(required=True)] = Field(
        default=0, description="Number of replicas of the inference Service."
    )
    selector: str | None = Field(default=None, description="Label selector of the pods, for autoscaling.")


class Playground(ApiModel):
    """Playground serves a model with a backend; it owns an inference Service of the same name."""

    GROUP: ClassVar[str] = c.INFERENCE_GROUP
    KIND: ClassVar[str] = "Playground"

    api_version: str = c.INFERENCE_API_VERSION
    kind: str = "Playground"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PlaygroundSpec
    status: PlaygroundStatus | None = None


class ServiceSpec(ApiModel):
    """The desired state of an inference Service."""

    model_claims: ModelClaims | None = Field(default=None, description="The models served.")
    replicas: Annotated[Int32 | None, Crd(default=1)] = Field(
        default=None, description="Number of LeaderWorkerSet groups. Defaults to 1."
    )
    workload_template: LeaderWorkerTemplate = Field(
        description="Leader and worker pod templates of the LeaderWorkerSet."
    )
    rollout_strategy: Annotated[RolloutStrategy | None, Crd(default=ROLLOUT_STRATEGY_DEFAULT)] = Field(
        default=None, description="Rollout strategy of the LeaderWorkerSet."
    )


class UnavailableAdapter(ApiModel):
    """A LoRA adapter of the served model that the engine is started without, and why."""

    name: str = Field(description="The adapter's name in the OpenModel's spec.adapters.")
    source: ModelSource = Field(
        description="The adapter's source when it failed; a change of the source in the OpenModel retries it."
    )
    reason: str = Field(description="Why it cannot be served: ModelLoaderFailed or ContainerCrashLooping.")
    message: str = Field(description="What failed: the pod, the container and its exit, as in Progressing.")


class ServiceStatus(ApiModel):
    """The observed state of an inference Service."""

    conditions: list[Condition] | None = Field(default=None, description="Conditions of the Service.")
    replicas: Annotated[Int32, Crd(required=True)] = Field(
        default=0, description="Number of replicas of the LeaderWorkerSet."
    )
    selector: str | None = Field(default=None, description="Label selector of the pods, for autoscaling.")
    active_flavor: str | None = Field(
        default=None,
        description=(
            "The inference flavor the pods are rendered for: its limits as resources, its nodeSelector as "
            "required node affinity. Starts at the first claimed flavor (else the model's first) and moves to "
            "the next one when pods stay unschedulable for the global flavor-fallback-after period."
        ),
    )
    active_flavor_time: Annotated[str, Crd(format="date-time")] | None = Field(
        default=None, description="When activeFlavor last changed."
    )
    unavailable_adapters: list[UnavailableAdapter] | None = Field(
        default=None,
        description=(
            "Adapters of the main model that failed for good (a loader that found no such adapter, was refused or\n"
            "misconfigured, or an engine that could not apply it): a Playground's engine is started without them,\n"
            "so the base model and the other adapters keep serving, until the adapter's source changes."
        ),
    )


class Service(ApiModel):
    """Service is the low-level inference workload: model claims and a LeaderWorkerSet template."""

    GROUP: ClassVar[str] = c.INFERENCE_GROUP
    KIND: ClassVar[str] = "Service"

    api_version: str = c.INFERENCE_API_VERSION
    kind: str = "Service"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ServiceSpec
    status: ServiceStatus | None = None
