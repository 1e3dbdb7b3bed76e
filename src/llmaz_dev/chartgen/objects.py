"""The built objects the chart makes configurable, found by their names, and the values read from them.

Every lookup fails loudly (`SourceError`) when `config/` no longer has what the chart templates: a renamed
Deployment or a moved flag stops `make chart` instead of producing a chart that silently differs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from llmaz_dev.chartgen.sources import Object, SourceError

NAMESPACE = "llmaz-system"
MANAGER = ("Deployment", "llmaz-controller-manager")
GATEWAY = ("Deployment", "llmaz-gateway")
GATEWAY_SERVICE = ("Service", "llmaz-gateway")
GATEWAY_INGRESS = ("Ingress", "llmaz-gateway")
GATEWAY_ROUTE = ("HTTPRoute", "llmaz-gateway")
# The Envoy data plane (config/gateway-envoy, `gateway.dataPlane: envoy`): its container in the gateway's pod, and
# the key of its ConfigMap holding the bootstrap.
ENVOY_CONTAINER = "envoy"
ENVOY_BOOTSTRAP_KEY = "envoy.json"
# The modes `gateway.envoy` offers: Envoy's ext_proc request body modes the Endpoint Picker serves, and GIE's failure
# modes (the chart's tests render each against llmaz.gateway.envoy's bootstrap).
ENVOY_BODY_MODES = ("BUFFERED", "FULL_DUPLEX_STREAMED")
ENVOY_FAILURE_MODES = ("FailClose", "FailOpen")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
# Where the chart mounts the gateway's API keys Secret (`gateway.apiKeys`), and the file `--api-keys-file` names.
API_KEYS_VOLUME = "api-keys"
API_KEYS_DIR = "/etc/llmaz-gateway/api-keys"
API_KEYS_FILE = "keys"
GLOBAL_CONFIG = ("ConfigMap", "llmaz-global-config")
GLOBAL_CONFIG_KEY = "config.data"
PROMETHEUS_BINDING = ("ClusterRoleBinding", "llmaz-metrics-reader-rolebinding")
NAMESPACE_FLAG = "--namespace="
# The processes' tracing flags (`tracing`); `tracing.otlpEndpoint` is empty, or an http(s) URL with a host (the
# processes check the rest at start-up).
OTLP_ENDPOINT_FLAG = "--otlp-endpoint"
TRACE_SAMPLE_RATIO_FLAG = "--trace-sample-ratio"
OTLP_ENDPOINT_PATTERN = r"^(https?://[^/?#]+.*)?$"


def find(objects: Iterable[Object], kind: str, name: str) -> Object:
    found = [obj for obj in objects if obj["kind"] == kind and obj["metadata"]["name"] == name]
    if len(found) != 1:
        raise SourceError(f"expected one {kind} {name} in the built config, found {len(found)}")
    return found[0]


def only_container(deployment: Object) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    if len(containers) != 1:
        raise SourceError(f"Deployment {deployment['metadata']['name']} must have one container")
    return containers[0]


def pod_spec(deployment: Object) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def pod_metadata(deployment: Object) -> dict[str, Any]:
    metadata: dict[str, Any] = deployment["spec"]["template"]["metadata"]
    return metadata


def volume_names(deployment: Object) -> list[str]:
    return [volume["name"] for volume in pod_spec(deployment).get("volumes", [])]


def service_type(service: Object) -> str:
    """The Service's `spec.type`, which config/ must spell out: the chart's value defaults to it."""
    kind = service["spec"].get("type")
    if kind not in SERVICE_TYPES:
        raise SourceError(
            f"Service {service['metadata']['name']} must set spec.type to one of {', '.join(SERVICE_TYPES)}, "
            f"not {kind!r}: the chart's value defaults to it"
        )
    return str(kind)


def http_port(service: Object) -> dict[str, Any]:
    """The Service's port named `http`: the one an Ingress or an HTTPRoute sends to."""
    ports = [port for port in service["spec"]["ports"] if port.get("name") == "http"]
    if len(ports) != 1:
        raise SourceError(f"Service {service['metadata']['name']} must have one port named http")
    port: dict[str, Any] = ports[0]
    return port


def split_image(image: str) -> tuple[str, str]:
    """`repository:tag` -> (repository, tag); a registry port is part of the repository."""
    repository, sep, tag = image.rpartition(":")
    if not sep or "/" in tag or "@" in image:
        raise SourceError(f"image {image!r}: the chart needs `repository:tag`")
    return repository, tag


def manager_args(container: dict[str, Any]) -> list[str]:
    """The manager's flags after the first, which must be `--namespace=llmaz-system`: the chart sets the release
    namespace there, ahead of its `args` value."""
    args: list[str] = container["args"]
    if not args or args[0] != f"{NAMESPACE_FLAG}{NAMESPACE}":
        raise SourceError(f"the manager's first flag must be {NAMESPACE_FLAG}{NAMESPACE} (config/manager/manager.yaml)")
    if any(arg.startswith(NAMESPACE_FLAG) for arg in args[1:]):
        raise SourceError(f"the manager has {NAMESPACE_FLAG} more than once")
    return args[1:]


def backends(objects: Iterable[Object]) -> list[Object]:
    return [obj for obj in objects if obj["kind"] == "BackendRuntime"]


def backend_key(backend: Object) -> str:
    """The backend's key under `backendRuntime` (llmaz's: `tensorrt-llm` is `tensorrt_llm`)."""
    name: str = backend["metadata"]["name"]
    return name.replace("-", "_")


def global_config_data(objects: Iterable[Object]) -> str:
    data: str = find(objects, *GLOBAL_CONFIG)["data"][GLOBAL_CONFIG_KEY]
    return data


def prometheus_subject(objects: Iterable[Object]) -> dict[str, str]:
    subjects: list[dict[str, str]] = find(objects, *PROMETHEUS_BINDING)["subjects"]
    if len(subjects) != 1 or subjects[0]["kind"] != "ServiceAccount":
        raise SourceError("config/prometheus binds the metrics reader to one ServiceAccount")
    return subjects[0]


def envoy_bootstrap(objects: Iterable[Object]) -> dict[str, Any]:
    """The Envoy bootstrap of the one ConfigMap that holds one."""
    found = [obj for obj in objects if obj["kind"] == "ConfigMap" and ENVOY_BOOTSTRAP_KEY in obj.get("data", {})]
    if len(found) != 1:
        raise SourceError(f"config/gateway-envoy must have one ConfigMap with {ENVOY_BOOTSTRAP_KEY}")
    bootstrap: dict[str, Any] = json.loads(found[0]["data"][ENVOY_BOOTSTRAP_KEY])
    return bootstrap


def envoy_modes(bootstrap: dict[str, Any]) -> tuple[str, str]:
    """(body mode, failure mode) of the bootstrap's ext_proc filter: the chart's defaults."""
    filters = [
        http_filter["typed_config"]
        for listener in bootstrap["static_resources"]["listeners"]
        for chain in listener["filter_chains"]
        for network in chain["filters"]
        for http_filter in network["typed_config"].get("http_filters", [])
        if http_filter["name"] == "envoy.filters.http.ext_proc"
    ]
    if len(filters) != 1:
        raise SourceError("config/gateway-envoy's bootstrap must have one ext_proc filter")
    (ext_proc,) = filters
    return ext_proc["processing_mode"]["request_body_mode"], "FailOpen" if ext_proc[
        "failure_mode_allow"
    ] else "FailClose"
