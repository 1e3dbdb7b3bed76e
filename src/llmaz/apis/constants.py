"""Well-known names shared with llmaz: labels, annotations, conditions, secrets, paths and defaults.

Every string here is part of the observable contract: manifests, dashboards and tooling written for llmaz rely on
them, so they are exact and must not change.
"""

from __future__ import annotations

from typing import Final

CORE_GROUP: Final = "llmaz.io"
INFERENCE_GROUP: Final = "inference.llmaz.io"
VERSION: Final = "v1alpha1"
CORE_API_VERSION: Final = f"{CORE_GROUP}/{VERSION}"
INFERENCE_API_VERSION: Final = f"{INFERENCE_GROUP}/{VERSION}"
# The Gateway API Inference Extension's API (InferencePool), which llmaz writes but does not define.
GIE_GROUP: Final = "inference.networking.k8s.io"
GIE_VERSION: Final = "v1"
GIE_API_VERSION: Final = f"{GIE_GROUP}/{GIE_VERSION}"

# Labels and annotations.
MODEL_FAMILY_NAME_LABEL: Final = "llmaz.io/model-family-name"
MODEL_NAME_LABEL: Final = "llmaz.io/model-name"
MODEL_PREHEAT_ANNOTATION: Final = "llmaz.io/model-preheat"
SKIP_MODEL_LOADER_ANNOTATION: Final = "llmaz.io/skip-model-loader"
INFERENCE_SERVICE_FLAVORS_ANNOTATION: Final = "llmaz.io/inference-service-flavors"
ACTIVATOR_MODEL_NAME_ANNOTATION: Final = "activator.llmaz.io/model-name"
ACTIVATOR_CACHED_STATE_ANNOTATION: Final = "activator.llmaz.io/cached-state"
# On every object the controllers create (LeaderWorkerSets, core Services, HPAs, inference Services): the manager
# caches only the core Services, HPAs and LeaderWorkerSets that carry it (llmaz itself set no such label).
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "llmaz"
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
# The LeaderWorkerSet release llmaz runs against (its CRD schema is vendored from it; the install hint names it).
LWS_VERSION: Final = "v0.6.2"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
# Scale to zero through llmaz-gateway (llmaz had none): a Playground opts in with its idle time, and the gateway's
# replicas share the time of the last request they saw on the Playground (RFC 3339, UTC).
SCALE_TO_ZERO_AFTER_ANNOTATION: Final = "llmaz.io/scale-to-zero-after"
LAST_REQUEST_TIME_ANNOTATION: Final = "llmaz.io/last-request-time"
# How llmaz-gateway picks an endpoint for a Playground's model (llmaz had no gateway): the strategy, and the
# weights of its scorers (`llmaz.apis.routing`).
ROUTING_STRATEGY_ANNOTATION: Final = "llmaz.io/routing-strategy"
ROUTING_WEIGHTS_ANNOTATION: Final = "llmaz.io/routing-weights"
# Namespaces are tenants (docs/tenancy.md): a model name is routed to one namespace, the one that serves it first,
# unless its (cluster-scoped) OpenModel carries this annotation set to "true".
SERVE_ACROSS_NAMESPACES_ANNOTATION: Final = "llmaz.io/serve-across-namespaces"
# A Playground asks for an InferencePool of the Gateway API Inference Extension (llmaz had none) with "true", and
# says what a gateway does while the endpoint picker does not answer (`llmaz.apis.pools`).
INFERENCE_POOL_ANNOTATION: Final = "llmaz.io/inference-pool"
INFERENCE_POOL_FAILURE_MODE_ANNOTATION: Final = "llmaz.io/inference-pool-failure-mode"
# A Playground or inference Service asks that its engines be reachable only from llmaz-gateway and its own namespace
# (a NetworkPolicy named like it) with "gateway-only" (`llmaz.apis.networkpolicy`; llmaz had none).
NETWORK_POLICY_ANNOTATION: Final = "llmaz.io/network-policy"
# The label llmaz-gateway's pods carry (config/gateway, the chart), which a gateway-only NetworkPolicy admits.
GATEWAY_COMPONENT_LABEL: Final = "app.kubernetes.io/component"
GATEWAY_COMPONENT: Final = "gateway"
# The endpoint picker's Service every llmaz InferencePool names, in the pool's namespace, and its ports; the
# gateway's own Service of it in the gateway's namespace, which the pool namespaces' Services mirror.
EPP_SERVICE_NAME: Final = "llmaz-epp"
EPP_PORT: Final = 9002
EPP_HEALTH_PORT: Final = 9003
GATEWAY_EPP_SERVICE_NAME: Final = "llmaz-gateway-epp"

# Defaults of a Playground's `elasticConfig.scaleTrigger.requests` (llmaz-gateway's autoscaler; llmaz had none).
AUTOSCALE_STABLE_WINDOW: Final = "60s"
AUTOSCALE_PANIC_WINDOW: Final = "6s"
AUTOSCALE_PANIC_THRESHOLD: Final = 2.0
AUTOSCALE_SCALE_DOWN_DELAY: Final = "5m"

# Model hubs, roles, presets and defaults.
HUGGING_FACE: Final = "Huggingface"
MODEL_SCOPE: Final = "ModelScope"
DEFAULT_OWNED_BY: Final = "llmaz"
# BackendRuntime names of the engines llmaz ships (config/backends); the gateway keys its engine table by them.
LLAMACPP_BACKEND: Final = "llamacpp"
VLLM_BACKEND: Final = "vllm"
SGLANG_BACKEND: Final = "sglang"
TGI_BACKEND: Final = "tgi"
OLLAMA_BACKEND: Final = "ollama"
DEFAULT_BACKEND_NAME: Final = VLLM_BACKEND
DEFAULT_CONFIG_NAME: Final = "default"
SPECULATIVE_DECODING_CONFIG_NAME: Final = "speculative-decoding"
MAIN_ROLE: Final = "main"
DRAFT_ROLE: Final = "draft"
LORA_ROLE: Final = "lora"
DEFAULT_REVISION: Final = "main"

# URI protocols, upper-cased after parsing.
GCS: Final = "GCS"
OSS: Final = "OSS"
S3: Final = "S3"
OLLAMA: Final = "OLLAMA"
HOST: Final = "HOST"
URI_PROTOCOLS: Final = frozenset({GCS, OSS, S3, OLLAMA, HOST})

# Pods.
CONTAINER_MODEL_PATH: Final = "/workspace/models/"
HOST_MODEL_PATH: Final = "/mnt/models/"
HOST_CLUSTER_MODEL_PATH: Final = "/mnt/models/cluster/"
DEFAULT_BACKEND_PORT: Final = 8080
HTTP_PORT_NAME: Final = "http"
MODEL_VOLUME_NAME: Final = "model-volume"
MODEL_RUNNER_CONTAINER_NAME: Final = "model-runner"
MODEL_LOADER_CONTAINER_NAME: Final = "model-loader"
SHM_VOLUME_NAME: Final = "dshm"
SHM_MOUNT_PATH: Final = "/dev/shm"
TERMINATION_GRACE_PERIOD_SECONDS: Final = 130
MODEL_SOURCE_MODELHUB: Final = "modelhub"
MODEL_SOURCE_OBJSTORE: Final = "objstore"

# Secrets read by the loader and the engines.
MODELHUB_SECRET_NAME: Final = "modelhub-secret"
HF_TOKEN_KEY: Final = "HF_TOKEN"
HF_TOKEN_ENV_NAMES: Final = ("HUGGING_FACE_HUB_TOKEN", "HF_TOKEN")
OSS_SECRET_NAME: Final = "oss-access-secret"
OSS_ACCESS_KEY_ID: Final = "OSS_ACCESS_KEY_ID"
OSS_ACCESS_KEY_SECRET: Final = "OSS_ACCESS_KEY_SECRET"
AWS_SECRET_NAME: Final = "aws-access-secret"
AWS_ACCESS_KEY_ID: Final = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY: Final = "AWS_SECRET_ACCESS_KEY"

# Cluster configuration.
GLOBAL_CONFIG_NAME: Final = "llmaz-global-config"
GLOBAL_CONFIG_NAMESPACE: Final = "llmaz-system"
GLOBAL_CONFIG_DATA_KEY: Final = "config.data"
DEFAULT_INIT_CONTAINER_IMAGE: Final = "llmaz-model-loader:v0.1.0"
FIELD_MANAGER: Final = "llmaz"

# Conditions: types.
CONDITION_PROGRESSING: Final = "Progressing"
CONDITION_AVAILABLE: Final = "Available"
CONDITION_READY: Final = "Ready"
CONDITION_PENDING: Final = "Pending"

# Playground condition reasons and messages.
REASON_ABORT_PROCESSING: Final = "AbortProcessing"
REASON_PENDING: Final = "Pending"
REASON_PLAYGROUND_READY: Final = "PlaygroundReady"
REASON_PLAYGROUND_IN_PROGRESS: Final = "PlaygroundInProgress"
REASON_PLAYGROUND_NOT_READY: Final = "PlaygroundNotReady"
MESSAGE_SERVICE_CONFLICT: Final = "Playground owns the same name with an existing Service"
MESSAGE_WAITING_FOR_MODEL: Final = "Waiting for model creation"
MESSAGE_WAITING_FOR_SERVICE_READY: Final = "Waiting for inference Service ready"
MESSAGE_PLAYGROUND_READY: Final = "Playground is ready"
MESSAGE_WAITING_FOR_SERVICE_PROGRESSING: Final = "Waiting for inference Service progressing"

# Service condition reasons and messages.
REASON_SERVICE_READY: Final = "ServiceReady"
REASON_SERVICE_IN_PROGRESS: Final = "ServiceInProgress"
REASON_SERVICE_NOT_READY: Final = "ServiceNotReady"
MESSAGE_SERVICE_READY: Final = "Inference Service is ready"
MESSAGE_SERVICE_IN_PROGRESS: Final = "Inference Service is progressing"
MESSAGE_WAITING_FOR_LWS_READY: Final = "Waiting for leaderWorkerSet ready"

# Model loader environment contract (read by the loader, written by the Service builder).
ENV_MODEL_SOURCE_TYPE: Final = "MODEL_SOURCE_TYPE"
ENV_MODEL_ID: Final = "MODEL_ID"
ENV_MODEL_HUB_NAME: Final = "MODEL_HUB_NAME"
ENV_MODEL_FILENAME: Final = "MODEL_FILENAME"
ENV_REVISION: Final = "REVISION"
ENV_MODEL_ALLOW_PATTERNS: Final = "MODEL_ALLOW_PATTERNS"
ENV_MODEL_IGNORE_PATTERNS: Final = "MODEL_IGNORE_PATTERNS"
ENV_PROVIDER: Final = "PROVIDER"
ENV_ENDPOINT: Final = "ENDPOINT"
ENV_BUCKET: Final = "BUCKET"
ENV_MODEL_PATH: Final = "MODEL_PATH"
# Set only for an adapter's loader: the adapter's name, which decides where it lands and names it in failures.
ENV_ADAPTER_NAME: Final = "ADAPTER_NAME"

# Conditions this project adds where llmaz only returned an error (reason REASON_ABORT_PROCESSING,
# Progressing=False); the placeholders name the missing thing.
MESSAGE_WAITING_FOR_BACKEND_RUNTIME: Final = "Waiting for BackendRuntime {backend} creation"
MESSAGE_RECOMMENDED_CONFIG_NOT_FOUND: Final = "Recommended config {config} not found in BackendRuntime {backend}"
MESSAGE_ARG_RENDER_ERROR: Final = "missing flag or the flag has format error: {arg}"
MESSAGE_INVALID_MODEL_SOURCE: Final = "OpenModel {model} has an invalid source: {detail}"
MESSAGE_NO_MODEL_CLAIMED: Final = "No model is claimed"
MESSAGE_ADAPTERS_UNSUPPORTED: Final = (
    "OpenModel {model} has adapters, which BackendRuntime {backend} cannot load: serve it with one of {supported}, "
    "or remove spec.adapters"
)
# An existing child that the Playground or Service does not control (llmaz took it over with a forced apply).
MESSAGE_CHILD_CONFLICT: Final = "Not taking over objects that this {owner} does not control: {conflicts}"

# Ready condition of OpenModels and BackendRuntimes (llmaz wrote none).
REASON_MODEL_READY: Final = "ModelReady"
REASON_INVALID_MODEL: Final = "InvalidModel"
REASON_BACKEND_READY: Final = "BackendRuntimeReady"
REASON_INVALID_BACKEND: Final = "InvalidBackendRuntime"

# Inference flavors of a Service (llmaz left placement among flavors to its external scheduler plugin).
# `FlavorsResolved` is written only once a claimed flavor was missing from the main model.
CONDITION_FLAVORS_RESOLVED: Final = "FlavorsResolved"
REASON_FLAVOR_NOT_FOUND: Final = "FlavorNotFound"
REASON_FLAVORS_FOUND: Final = "FlavorsFound"
MESSAGE_FLAVOR_NOT_FOUND: Final = "OpenModel {model} defines no inference flavor {flavors}; {using}"
MESSAGE_FLAVORS_FOUND: Final = "Every claimed inference flavor is defined by OpenModel {model}"
CONDITION_ADAPTERS_READY: Final = "AdaptersReady"
REASON_ADAPTER_UNAVAILABLE: Final = "AdapterUnavailable"
REASON_ADAPTERS_AVAILABLE: Final = "AdaptersAvailable"
MESSAGE_ADAPTER_UNAVAILABLE: Final = (
    "adapter {adapter} (spec.adapters[{index}] of OpenModel {model}) is left out, the model serves without it: "
    "{finding}; fix or remove the adapter: a change of its source tries it again"
)
MESSAGE_ADAPTERS_AVAILABLE: Final = "No adapter of OpenModel {model} is left out"
# Whether llmaz-gateway routes a Playground's model to it: `ModelRouted` is written only once another namespace
# owned the model name, then kept up to date. Other namespaces are never named (docs/tenancy.md).
CONDITION_MODEL_ROUTED: Final = "ModelRouted"
REASON_MODEL_NAME_TAKEN: Final = "ModelNameTaken"
REASON_MODEL_NAME_OWNED: Final = "ModelNameOwned"
MESSAGE_MODEL_NAME_TAKEN: Final = (
    "model {model} is served from another namespace, which claimed it first: llmaz-gateway sends no request for it "
    "to this Playground; serve it under another model name, or ask a cluster administrator to annotate OpenModel "
    '{model} with {annotation}: "true" to pool the namespaces serving it'
)
MESSAGE_MODEL_NAME_OWNED: Final = "llmaz-gateway routes requests for model {model} to this Playground"
# The InferencePool of a Playground that asks for one (`llmaz.io/inference-pool: "true"`); the condition is
# removed when it no longer asks.
CONDITION_INFERENCE_POOL: Final = "InferencePool"
REASON_INFERENCE_POOL_APPLIED: Final = "InferencePoolApplied"
REASON_INFERENCE_POOL_CRD_MISSING: Final = "InferencePoolCRDMissing"
REASON_INFERENCE_POOL_CONFLICT: Final = "InferencePoolConflict"
MESSAGE_INFERENCE_POOL_APPLIED: Final = (
    "InferencePool {name} selects the Playground's engines and names endpoint picker Service {epp} port {port}"
)
MESSAGE_INFERENCE_POOL_CRD_MISSING: Final = (
    "the cluster has no InferencePool CRD (inferencepools.inference.networking.k8s.io, v1), so no InferencePool is "
    "created: install the Gateway API Inference Extension, or llmaz's copy of its CRD with `kubectl apply "
    "--server-side -k config/gie` (the chart's crds/ install it too); the pool is created once it is there"
)
MESSAGE_INFERENCE_POOL_CONFLICT: Final = (
    "{conflict}, so it is not this Playground's: llmaz leaves it alone; delete it for llmaz to create the "
    "Playground's, or remove the annotation {annotation}"
)
# Event reason and texts when the active flavor changes or no flavor is left.
EVENT_FLAVOR_FALLBACK: Final = "FlavorFallback"
EVENT_FLAVOR_RETURN: Final = "FlavorReturn"
MESSAGE_FLAVOR_RETURN: Final = (
    "Moved back from flavor {previous} to {active}: its nodes have room for {pods} more pods on {nodes} nodes"
)
MESSAGE_FLAVOR_FALLBACK: Final = (
    "Moved from flavor {previous} to {active}: pod {pod} was unschedulable for {waited}: {why}"
)
MESSAGE_NO_FLAVOR_FITS: Final = "no inference flavor fits (tried {tried}): {why}"
