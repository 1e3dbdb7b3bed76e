"""llm-d's EPP as the routing bench's peer: which binary runs, the discovery file, its configuration, Envoy's
bootstrap in front of it and its command line."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from suite.llmd_epp import (
    DEFAULT_SCORERS,
    ENGINE_LABEL,
    PROCESSING_MODE,
    Engine,
    Ports,
    discovery,
    envoy_bootstrap,
    epp_command,
    epp_config,
    llmd_binary,
    version_name,
)
from suite.llmd_peer import REQUEST_HEADER, SERVED_LOG, envoy_binary, served_by, with_served_log
from suite.routing_bench import STRATEGIES, pod_engines, with_peer

from llmaz.gateway.envoy import DESTINATION_HEADER


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _ext_proc(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    (ext_proc,) = [f for f in manager["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    typed: dict[str, Any] = ext_proc["typed_config"]
    return typed


def test_the_strategy_is_not_run_when_neither_a_binary_nor_a_source_is_given(tmp_path: Path) -> None:
    assert llmd_binary({}, tmp_path) is None


def test_a_given_binary_is_run_as_it_is(tmp_path: Path) -> None:
    binary = _executable(tmp_path / "elsewhere" / "epp")
    assert llmd_binary({"BENCH_LLMD_BINARY": str(binary), "BENCH_LLMD_SRC": "/src"}, tmp_path) == binary


def test_a_given_binary_that_is_not_executable_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="BENCH_LLMD_BINARY"):
        llmd_binary({"BENCH_LLMD_BINARY": str(tmp_path / "missing")}, tmp_path)


def test_a_source_selects_the_binary_the_build_script_puts_in_the_cache_for_its_refs(tmp_path: Path) -> None:
    built = _executable(tmp_path / "llm-d" / "v0.9.0-gie-v1.4.0" / "epp")
    env = {"BENCH_LLMD_SRC": "/src", "BENCH_LLMD_REF": "v0.9.0", "BENCH_GIE_REF": "v1.4.0"}
    assert llmd_binary(env, tmp_path) == built


def test_a_source_without_a_build_asks_for_make_llm_d(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"make llm-d LLMD_SRC=\$BENCH_LLMD_SRC .*LLMD_REF=v0\.10\.0 GIE_REF=v1\.5\.0"):
        llmd_binary({"BENCH_LLMD_SRC": "/src"}, tmp_path)


def test_the_version_name_is_the_build_scripts(tmp_path: Path) -> None:
    assert version_name() == "v0.10.0-gie-v1.5.0"
    assert version_name("feature/x", "v1.5.0") == "feature-x-gie-v1.5.0"


def test_the_discovery_file_lists_each_engine_with_its_port_as_text_and_llama_cpp_as_its_engine() -> None:
    found = discovery([Engine("bench-llama-0", "10.0.0.5", 8080), Engine("bench-llama-1", "10.0.0.6", 8080)])
    assert found == {
        "endpoints": [
            {"name": "bench-llama-0", "address": "10.0.0.5", "port": "8080", "labels": {ENGINE_LABEL: "llamacpp"}},
            {"name": "bench-llama-1", "address": "10.0.0.6", "port": "8080", "labels": {ENGINE_LABEL: "llamacpp"}},
        ]
    }


@pytest.mark.parametrize(
    ("engines", "field"),
    [
        ([], "engines: none given"),
        ([Engine("a", "fd00::1", 8080)], r"engines\[a\]\.address"),
        ([Engine("a", "10.0.0.1", 0)], r"engines\[a\]\.port"),
        ([Engine("a", "10.0.0.1", 8080), Engine("a", "10.0.0.2", 8080)], r"engines\[a\]\.name"),
    ],
)
def test_engines_llm_d_would_refuse_are_refused_naming_the_field(engines: list[Engine], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        discovery(engines)


def test_the_config_discovers_from_the_file_and_reads_llama_cpp_metrics(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml")
    plugins = {p["name"]: p for p in config["plugins"]}
    assert config["dataLayer"]["discovery"] == {"pluginRef": "engines"}
    assert plugins["engines"]["parameters"]["path"] == str(tmp_path / "endpoints.yaml")
    extractor = plugins["core-metrics-extractor"]["parameters"]
    assert extractor["defaultEngine"] == "llamacpp"
    assert extractor["engineConfigs"] == [
        {
            "name": "llamacpp",
            "queuedRequestsSpec": "llamacpp:requests_deferred",
            "runningRequestsSpec": "llamacpp:requests_processing",
        }
    ]
    (source,) = config["dataLayer"]["sources"]
    assert source == {"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]}


def test_the_config_scores_with_llm_ds_default_profile_and_picks_the_highest_score(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml")
    (profile,) = config["schedulingProfiles"]
    weights = {p["pluginRef"]: p.get("weight") for p in profile["plugins"]}
    assert weights == {**DEFAULT_SCORERS, "max-score-picker": None}
    assert {p["type"] for p in config["plugins"]} >= {*DEFAULT_SCORERS, "max-score-picker"}


def test_the_config_takes_other_scorers(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml", {"prefix-cache-scorer": 1.0})
    (profile,) = config["schedulingProfiles"]
    assert [p["pluginRef"] for p in profile["plugins"]] == ["prefix-cache-scorer", "max-score-picker"]


def test_envoy_asks_the_epp_on_its_port_with_llm_ds_processing_mode_and_routes_on_its_header() -> None:
    config = envoy_bootstrap(18000, 19000, 9002)
    assert _ext_proc(config)["processing_mode"] == PROCESSING_MODE
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    epp_address = clusters["epp"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert epp_address == {"socket_address": {"address": "127.0.0.1", "port_value": 9002}}
    assert clusters["engines"]["original_dst_lb_config"]["http_header_name"] == DESTINATION_HEADER
    (listener,) = config["static_resources"]["listeners"]
    assert listener["address"] == {"socket_address": {"address": "127.0.0.1", "port_value": 18000}}
    assert config["admin"]["address"] == {"socket_address": {"address": "127.0.0.1", "port_value": 19000}}


def test_envoy_listens_where_told_for_clients_elsewhere() -> None:
    (listener,) = envoy_bootstrap(18000, 19000, 9002, api_host="0.0.0.0")["static_resources"]["listeners"]
    assert listener["address"]["socket_address"]["address"] == "0.0.0.0"


def test_the_epp_serves_plaintext_on_its_ports_and_scrapes_every_50_ms(tmp_path: Path) -> None:
    argv = epp_command(tmp_path / "epp", tmp_path / "config.yaml", Ports(grpc=1, health=2, metrics=3))
    assert argv[0] == str(tmp_path / "epp")
    assert {
        f"--config-file={tmp_path / 'config.yaml'}",
        "--grpc-port=1",
        "--grpc-health-port=2",
        "--metrics-port=3",
        "--secure-serving=false",
        "--metrics-endpoint-auth=false",
        "--refresh-metrics-interval=50ms",
    } <= set(argv)


def test_without_an_engine_type_the_engines_are_unlabelled() -> None:
    (entry,) = discovery([Engine("a", "10.0.0.1", 8080)], engine_type=None)["endpoints"]
    assert "labels" not in entry


def test_without_the_llama_cpp_mapping_the_extractor_keeps_llm_ds_own(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml", llamacpp_metrics=False)
    (extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
    assert "parameters" not in extractor


def _pod(name: str, ip: str | None, ready: bool = True, port_name: str = "http") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip is not None:
        status["podIP"] = ip
    container = {"name": "model-runner", "ports": [{"name": port_name, "containerPort": 8080}]}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}, "status": status}


def test_the_routing_bench_adds_the_peer_only_with_its_binary(tmp_path: Path) -> None:
    assert with_peer(STRATEGIES, None) == STRATEGIES
    assert with_peer(STRATEGIES, tmp_path / "epp") == (*STRATEGIES, "llm-d EPP")


def test_the_peers_engines_are_the_ready_pods_by_ip_and_http_port_in_name_order() -> None:
    pods = [_pod("bench-llama-1", "10.0.0.6"), _pod("bench-llama-0", "10.0.0.5"), _pod("old", "10.0.0.9", False)]
    assert pod_engines(pods) == [Engine("bench-llama-0", "10.0.0.5", 8080), Engine("bench-llama-1", "10.0.0.6", 8080)]


@pytest.mark.parametrize("pod", [_pod("bench-llama-0", None), _pod("bench-llama-0", "10.0.0.5", port_name="metrics")])
def test_a_ready_pod_the_epp_cannot_name_is_an_error_naming_it(pod: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="pod bench-llama-0"):
        pod_engines([pod])


def test_the_sticky_gate_filters_before_the_scorers_with_the_parameters_given(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml", affinity={"maxTTFTPenaltyMs": 2000.0})
    (gate,) = [p for p in config["plugins"] if p["type"] == "prefix-cache-affinity-filter"]
    assert gate["parameters"] == {"maxTTFTPenaltyMs": 2000.0}
    (profile,) = config["schedulingProfiles"]
    assert profile["plugins"][0] == {"pluginRef": "prefix-cache-affinity-filter"}


def test_without_the_sticky_gate_no_filter_is_configured(tmp_path: Path) -> None:
    config = epp_config(tmp_path / "endpoints.yaml")
    assert not [p for p in config["plugins"] if p["type"] == "prefix-cache-affinity-filter"]


def test_envoy_logs_each_requests_engine_by_the_clients_name_for_it(tmp_path: Path) -> None:
    log = tmp_path / SERVED_LOG
    config = with_served_log(envoy_bootstrap(18000, 18001, 18002), log)
    (listener,) = config["static_resources"]["listeners"]
    (access_log,) = listener["filter_chains"][0]["filters"][0]["typed_config"]["access_log"]
    assert access_log["typed_config"]["path"] == str(log)
    line = access_log["typed_config"]["log_format"]["text_format_source"]["inline_string"]
    assert line == f"%REQ({REQUEST_HEADER.upper()})% %UPSTREAM_HOST%\n"
    (tmp_path / "envoy.json").write_text(json.dumps(config))
    validate = [envoy_binary(), "--mode", "validate", "-c", str(tmp_path / "envoy.json"), "--use-dynamic-base-id"]
    checked = subprocess.run(validate, capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # Envoy itself takes the access log


def test_the_served_log_pairs_each_named_request_with_its_engine(tmp_path: Path) -> None:
    assert served_by(tmp_path / "absent.log") == {}  # Envoy never started: nothing is known
    log = tmp_path / SERVED_LOG
    log.write_text("0 10.0.0.7:8080\n1 10.0.0.8:8080\n- 10.0.0.7:8080\n2 -\n")
    # the readiness probe has no name; a request Envoy answered itself (a refusal) went to no engine
    assert served_by(log) == {"0": "10.0.0.7:8080", "1": "10.0.0.8:8080"}
