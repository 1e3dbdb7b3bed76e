"""llm-d's Endpoint Picker (EPP) as the peer llmaz's routing is measured against: its files and its command.

llm-d-router's EPP runs without Kubernetes with its file-discovery plugin: it reads the engines' addresses from a
YAML (or JSON) file, scrapes each engine's `/metrics` every `--refresh-metrics-interval` (50 ms, its default), and
answers an Envoy in front of it over ext_proc, naming the engine in `x-gateway-destination-endpoint`, which Envoy's
ORIGINAL_DST cluster connects to. `hack/llm-d/build.sh` (`make llm-d LLMD_SRC=... GIE_SRC=...`) builds it into the
cache; none of it enters this repository.

What this module decides, all pure (the bench runs the processes):
- which binary, if any (`llmd_binary`): `BENCH_LLMD_BINARY`, else the one `make llm-d` built for the refs
  `BENCH_LLMD_REF` (v0.10.0) and `BENCH_GIE_REF` (v1.5.0) when `BENCH_LLMD_SRC` is set; neither set: the strategy
  is not run;
- the discovery file (`discovery`): one entry per engine pod, labelled with the engine type llm-d reads the metrics
  of;
- the EPP's configuration (`epp_config`): its own default scheduling profile (queue-scorer 2, kv-cache-utilization-
  scorer 2, prefix-cache-scorer 3, max-score picker), with file discovery and a metrics mapping for llama.cpp,
  which llm-d has none of built in (vLLM, SGLang, trtllm-serve, Triton): `llamacpp:requests_deferred` is its
  queue, `llamacpp:requests_processing` its running requests; llama.cpp exports no KV-cache usage, so that scorer
  sees none;
- Envoy's bootstrap (`envoy_bootstrap`): llmaz's own (`llmaz.gateway.envoy`), with the processing mode of llm-d's
  reference Envoy configuration (request and response headers and trailers sent, both bodies streamed full duplex),
  since its EPP follows each response (its in-flight load and prefix index);
- the EPP's command line (`epp_command`): plaintext ext_proc (it serves a self-signed TLS certificate by default,
  which the bootstrap's cluster does not speak) and metrics without Kubernetes authentication.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmaz.gateway import envoy

STRATEGY = "llm-d EPP"
LLMD_REF = "v0.10.0"
GIE_REF = "v1.5.0"
ENGINE_TYPE = "llamacpp"
ENGINE_LABEL = "llm-d.ai/engine-type"
REFRESH_METRICS_INTERVAL = "50ms"
# llm-d's own default scheduling profile (its config loader's, when no configuration is given): scorer -> weight.
DEFAULT_SCORERS = {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 2.0, "prefix-cache-scorer": 3.0}
AFFINITY_FILTER = "prefix-cache-affinity-filter"
# What llama.cpp's server exports, as llm-d's core-metrics-extractor reads an engine's metrics.
LLAMACPP_METRICS = {
    "name": ENGINE_TYPE,
    "queuedRequestsSpec": "llamacpp:requests_deferred",
    "runningRequestsSpec": "llamacpp:requests_processing",
}
# llm-d's reference Envoy configuration (its deploy/environments/dev/e2e-infra/envoy.yaml).
PROCESSING_MODE = {
    "request_header_mode": "SEND",
    "response_header_mode": "SEND",
    "request_body_mode": "FULL_DUPLEX_STREAMED",
    "response_body_mode": "FULL_DUPLEX_STREAMED",
    "request_trailer_mode": "SEND",
    "response_trailer_mode": "SEND",
}


@dataclass(frozen=True)
class Engine:
    """One engine the EPP may pick: a pod's name, IPv4 address and port."""

    name: str
    address: str
    port: int


@dataclass(frozen=True)
class Ports:
    """The EPP's ports: ext_proc (Envoy calls it), gRPC health, its Prometheus metrics."""

    grpc: int = 9002
    health: int = 9003
    metrics: int = 9090


def version_name(llmd_ref: str = LLMD_REF, gie_ref: str = GIE_REF) -> str:
    """The cache directory name hack/llm-d/build.sh gives a build of the two refs."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{llmd_ref}-gie-{gie_ref}")
    return name[1:] if name[:1] in (".", "-") else name


def llmd_binary(env: Mapping[str, str], cache: Path) -> Path | None:
    """The EPP binary the bench runs, or None when the strategy is not asked for (ValueError naming the variable
    when it is asked for and there is no binary)."""
    given = env.get("BENCH_LLMD_BINARY", "")
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ValueError(f"BENCH_LLMD_BINARY={given} is not an executable file: give llm-d's built epp binary")
        return path
    if not env.get("BENCH_LLMD_SRC", ""):
        return None
    llmd_ref = env.get("BENCH_LLMD_REF", "") or LLMD_REF
    gie_ref = env.get("BENCH_GIE_REF", "") or GIE_REF
    path = cache / "llm-d" / version_name(llmd_ref, gie_ref) / "epp"
    if not path.is_file():
        raise ValueError(
            f"BENCH_LLMD_SRC is set but {path} is not built: run `make llm-d LLMD_SRC=$BENCH_LLMD_SRC "
            f"GIE_SRC=<gateway-api-inference-extension checkout> LLMD_REF={llmd_ref} GIE_REF={gie_ref}`"
        )
    return path


def discovery(engines: Sequence[Engine], engine_type: str | None = ENGINE_TYPE) -> dict[str, Any]:
    """The file-discovery plugin's endpoints file, each engine labelled `engine_type` (None: unlabelled, so llm-d
    reads them as its default engine's) (ValueError naming the engine whose address or port llm-d would refuse:
    IPv4 only, ports 1-65535, names unique)."""
    if not engines:
        raise ValueError("engines: none given; the EPP needs at least one engine to pick")
    seen: set[str] = set()
    entries = []
    for engine in engines:
        try:
            ipaddress.IPv4Address(engine.address)
        except ValueError:
            raise ValueError(
                f"engines[{engine.name}].address: {engine.address!r} is not an IPv4 address (llm-d's file "
                "discovery takes IPv4 only)"
            ) from None
        if not 1 <= engine.port <= 65535:
            raise ValueError(f"engines[{engine.name}].port: {engine.port} is not a port (1-65535)")
        if engine.name in seen:
            raise ValueError(f"engines[{engine.name}].name: given twice; every engine needs its own name")
        seen.add(engine.name)
        entry: dict[str, Any] = {"name": engine.name, "address": engine.address, "port": str(engine.port)}
        if engine_type is not None:
            entry["labels"] = {ENGINE_LABEL: engine_type}
        entries.append(entry)
    return {"endpoints": entries}


def epp_config(
    discovery_path: Path,
    scorers: Mapping[str, float] = DEFAULT_SCORERS,
    llamacpp_metrics: bool = True,
    affinity: Mapping[str, float | str] | None = None,
) -> dict[str, Any]:
    """The EPP's EndpointPickerConfig: file discovery of `discovery_path`, llama.cpp's metrics (`llamacpp_metrics`
    False: llm-d's stock mappings alone, which have none), and `scorers` (llm-d's default profile unless told) in
    one profile with the max-score picker. `affinity`: put llm-d's prefix-cache-affinity-filter first, with these
    parameters (empty: its own defaults), the "sticky until saturated" gate: only engines holding the prompt's
    prefix are candidates until their estimated TTFT (in-flight tokens / peakPrefillThroughput) exceeds the
    others' by maxTTFTPenaltyMs."""
    extractor: dict[str, Any] = {}
    if llamacpp_metrics:
        extractor["parameters"] = {"defaultEngine": ENGINE_TYPE, "engineConfigs": [dict(LLAMACPP_METRICS)]}
    plugins: list[dict[str, Any]] = [
        {"name": "engines", "type": "file-discovery", "parameters": {"path": str(discovery_path), "watchFile": True}},
        {"name": "metrics-data-source", "type": "metrics-data-source"},
        {"name": "core-metrics-extractor", "type": "core-metrics-extractor", **extractor},
        *(
            [{"name": AFFINITY_FILTER, "type": AFFINITY_FILTER, "parameters": dict(affinity)}]
            if affinity is not None
            else []
        ),
        *({"name": name, "type": name} for name in scorers),
        {"name": "max-score-picker", "type": "max-score-picker"},
    ]
    profile: list[dict[str, Any]] = [{"pluginRef": AFFINITY_FILTER}] if affinity is not None else []
    profile += [{"pluginRef": name, "weight": weight} for name, weight in scorers.items()]
    profile.append({"pluginRef": "max-score-picker"})
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": profile}],
        "dataLayer": {
            "discovery": {"pluginRef": "engines"},
            "sources": [{"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]}],
        },
    }


def envoy_bootstrap(api_port: int, admin_port: int, epp_port: int, api_host: str = "127.0.0.1") -> dict[str, Any]:
    """Envoy in front of the EPP: llmaz's bootstrap on `api_host` (127.0.0.1, or 0.0.0.0 for clients elsewhere),
    the EPP on loopback, with llm-d's reference processing mode."""
    addresses = envoy.loopback(api_port, admin_port, epp_port)
    addresses = envoy.Addresses(envoy.Address(api_host, api_port), addresses.admin, addresses.epp)
    config = envoy.bootstrap(addresses, body_mode="FULL_DUPLEX_STREAMED")
    for listener in config["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                for http_filter in network_filter["typed_config"].get("http_filters", []):
                    if http_filter["name"] == "envoy.filters.http.ext_proc":
                        http_filter["typed_config"]["processing_mode"] = dict(PROCESSING_MODE)
    return config


def epp_command(binary: Path, config_path: Path, ports: Ports = Ports(), verbosity: int = 2) -> list[str]:
    """The EPP's command line: the configuration file, its ports, plaintext ext_proc, metrics without Kubernetes
    authentication, metrics scraped every REFRESH_METRICS_INTERVAL."""
    return [
        str(binary),
        "--pool-name=bench",
        "--pool-namespace=bench",
        f"--config-file={config_path}",
        f"--grpc-port={ports.grpc}",
        f"--grpc-health-port={ports.health}",
        f"--metrics-port={ports.metrics}",
        "--secure-serving=false",
        "--metrics-endpoint-auth=false",
        "--tracing=false",
        f"--refresh-metrics-interval={REFRESH_METRICS_INTERVAL}",
        f"--v={verbosity}",
    ]
