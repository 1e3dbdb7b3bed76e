"""The API resources llmaz reads and writes: the controllers and the gateway name them from here alone."""

from __future__ import annotations

from llmaz.apis import constants as c
from llmaz.runtime.resource import Resource

OPEN_MODELS = Resource(c.CORE_GROUP, c.VERSION, "openmodels", "OpenModel", namespaced=False)
BACKEND_RUNTIMES = Resource(c.INFERENCE_GROUP, c.VERSION, "backendruntimes", "BackendRuntime", namespaced=False)
PLAYGROUNDS = Resource(c.INFERENCE_GROUP, c.VERSION, "playgrounds", "Playground", namespaced=True)
INFERENCE_SERVICES = Resource(c.INFERENCE_GROUP, c.VERSION, "services", "Service", namespaced=True)
LEADER_WORKER_SETS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", namespaced=True)
INFERENCE_POOLS = Resource(c.GIE_GROUP, c.GIE_VERSION, "inferencepools", "InferencePool", namespaced=True)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", namespaced=True)
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
HORIZONTAL_POD_AUTOSCALERS = Resource(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", namespaced=True
)
