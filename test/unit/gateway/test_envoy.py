"""The Envoy data plane's bootstrap (llmaz.gateway.envoy): modes, addresses and timeouts, and the install variant
config/gateway-envoy built as config/default's comment says, agreeing with it and with llmaz-gateway's flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmaz.gateway import envoy
from llmaz.gateway.__main__ import epp_options, gateway_options, parse_args
from llmaz.gateway.epp.processor import DESTINATION_HEADER
from llmaz.gateway.proxy.body import DEFAULT_MAX_BODY_BYTES
from llmaz.gateway.proxy.forwarding import ProxyOptions
from llmaz_dev.testing.kustomize import default_with_component

REPO = Path(__file__).resolve().parents[3]
COMPONENT = REPO / "config" / "gateway-envoy"


def _api_manager(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = [item for item in config["static_resources"]["listeners"] if item["name"] == "gateway"]
    manager: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return manager


def _ext_proc(config: dict[str, Any]) -> dict[str, Any]:
    (found,) = [f for f in _api_manager(config)["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    typed: dict[str, Any] = found["typed_config"]
    return typed


def _socket(address: dict[str, Any]) -> tuple[str, int]:
    return address["socket_address"]["address"], address["socket_address"]["port_value"]


def _listeners(config: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {item["name"]: _socket(item["address"]) for item in config["static_resources"]["listeners"]}


def _cluster(config: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in config["static_resources"]["clusters"] if c["name"] == name]
    cluster: dict[str, Any] = found
    return cluster


@pytest.mark.parametrize(
    ("body_mode", "failure_mode", "trailers", "allow"),
    [
        ("BUFFERED", "FailClose", "SKIP", False),
        ("BUFFERED", "FailOpen", "SKIP", True),
        ("FULL_DUPLEX_STREAMED", "FailClose", "SEND", False),
        ("FULL_DUPLEX_STREAMED", "FailOpen", "SEND", True),
    ],
)
def test_the_picker_sees_the_request_in_the_body_mode_and_its_failure_follows_the_failure_mode(
    body_mode: str, failure_mode: str, trailers: str, allow: bool
) -> None:
    ext_proc = _ext_proc(envoy.bootstrap(envoy.POD, body_mode=body_mode, failure_mode=failure_mode))
    mode = ext_proc["processing_mode"]
    assert (mode["request_header_mode"], mode["request_body_mode"], mode["request_trailer_mode"]) == (
        "SEND",
        body_mode,
        trailers,
    )
    assert (mode["response_header_mode"], mode["response_body_mode"], mode["response_trailer_mode"]) == (
        "SKIP",
        "NONE",
        "SKIP",
    )
    assert ext_proc["failure_mode_allow"] is allow
    assert ext_proc["grpc_service"]["envoy_grpc"]["cluster_name"] == "epp"


def test_the_defaults_are_buffered_and_fail_close_as_gie_s_failure_mode() -> None:
    ext_proc = _ext_proc(envoy.bootstrap(envoy.POD))
    assert (ext_proc["processing_mode"]["request_body_mode"], ext_proc["failure_mode_allow"]) == ("BUFFERED", False)


@pytest.mark.parametrize(("field", "value"), [("body_mode", "STREAMED"), ("failure_mode", "FailSometimes")])
def test_an_unknown_mode_is_refused_naming_the_field_and_the_choices(field: str, value: str) -> None:
    modes: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=f"{field}: '{value}' is not one of"):
        envoy.bootstrap(envoy.POD, **modes)


def test_in_the_pod_the_api_and_readiness_listen_on_every_address_admin_and_the_picker_on_loopback() -> None:
    config = envoy.bootstrap(envoy.POD)
    assert _listeners(config) == {"gateway": ("0.0.0.0", 8000), "ready": ("0.0.0.0", envoy.READY_PORT)}
    assert _socket(config["admin"]["address"]) == ("127.0.0.1", envoy.ADMIN_PORT)
    epp = _cluster(config, "epp")["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert _socket(epp) == ("127.0.0.1", 9002)
    # The readiness listener forwards /ready alone to the admin port: nothing else of admin leaves the pod.
    ready = next(item for item in config["static_resources"]["listeners"] if item["name"] == "ready")
    routes = ready["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    assert routes == [{"match": {"path": "/ready"}, "route": {"cluster": "admin"}}]
    admin = _cluster(config, "admin")["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert _socket(admin) == ("127.0.0.1", envoy.ADMIN_PORT)


def test_on_loopback_every_address_is_127_0_0_1_and_readiness_is_optional() -> None:
    config = envoy.bootstrap(envoy.loopback(18000, 19901, 19002))
    assert _listeners(config) == {"gateway": ("127.0.0.1", 18000)}
    assert [c["name"] for c in config["static_resources"]["clusters"]] == ["engines", "epp"]
    with_ready = envoy.bootstrap(envoy.loopback(18000, 19901, 19002, 19903))
    assert _listeners(with_ready)["ready"] == ("127.0.0.1", 19903)


def test_engines_are_reached_at_the_pickers_header_and_no_timeout_cuts_a_live_stream() -> None:
    config = envoy.bootstrap(envoy.POD)
    engines = _cluster(config, "engines")
    assert (engines["type"], engines["lb_policy"]) == ("ORIGINAL_DST", "CLUSTER_PROVIDED")
    assert engines["original_dst_lb_config"]["http_header_name"] == DESTINATION_HEADER
    manager = _api_manager(config)
    (route,) = manager["route_config"]["virtual_hosts"][0]["routes"]
    assert route["route"] == {
        "cluster": "engines",
        "timeout": "0s",
        "retry_policy": {"retry_on": "reset", "num_retries": 1},  # a kept-alive connection the engine closed
    }
    # A stalled engine is cut after as long as the Python proxy waits for an engine read.
    assert manager["stream_idle_timeout"] == f"{ProxyOptions().read_timeout:.0f}s"
    assert parse_args([]).upstream_timeout == envoy.STREAM_IDLE_SECONDS


def _seconds(duration: str) -> float:
    assert duration.endswith("s"), duration
    return float(duration[:-1])


def test_envoy_awaits_the_pickers_answer_longer_than_the_picker_holds_a_request_for_a_model_waking_from_zero() -> None:
    ext_proc = _ext_proc(envoy.bootstrap(envoy.POD))
    defaults = parse_args([])
    assert (defaults.wake_timeout, defaults.hold_timeout) == (envoy.WAKE_SECONDS, envoy.HOLD_SECONDS)
    longest_hold = max(defaults.wake_timeout, defaults.hold_timeout)
    # The picker answers a held request when the hold ends (its 504 or 503); Envoy must still be waiting then.
    assert _seconds(ext_proc["message_timeout"]) > longest_hold
    assert _seconds(ext_proc["grpc_service"]["timeout"]) == _seconds(ext_proc["message_timeout"])
    # Bounded all the same: a hung picker does not keep a client waiting much past the longest hold.
    assert _seconds(ext_proc["message_timeout"]) <= longest_hold + 30


def test_a_gateway_run_with_longer_holds_gets_a_bootstrap_with_a_longer_picker_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert envoy.main(["--picker-timeout", "910"]) == 0
    printed = _ext_proc(json.loads(capsys.readouterr().out))
    assert (printed["message_timeout"], printed["grpc_service"]["timeout"]) == ("910s", "910s")


@pytest.mark.parametrize("value", [0, -5, 2.5, True])
def test_a_picker_timeout_that_is_not_a_positive_whole_number_of_seconds_is_refused_naming_the_field(
    value: object,
) -> None:
    with pytest.raises(ValueError, match=r"picker_timeout: .* is not a positive whole number of seconds"):
        envoy.bootstrap(envoy.POD, picker_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["0", "-1", "ten"])
def test_the_command_refuses_a_picker_timeout_that_is_not_a_positive_number_of_seconds(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        envoy.main(["--picker-timeout", text])
    assert "--picker-timeout" in capsys.readouterr().err


def test_a_buffered_body_may_be_as_large_as_the_python_proxy_accepts() -> None:
    config = envoy.bootstrap(envoy.POD)
    assert envoy.MAX_BODY_BYTES == DEFAULT_MAX_BODY_BYTES == parse_args([]).max_request_bytes
    (listener,) = [item for item in config["static_resources"]["listeners"] if item["name"] == "gateway"]
    assert listener["per_connection_buffer_limit_bytes"] == envoy.MAX_BODY_BYTES


def test_the_command_prints_the_pods_bootstrap_with_the_modes_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert envoy.main(["--body-mode", "FULL_DUPLEX_STREAMED", "--failure-mode", "FailOpen"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == envoy.bootstrap(envoy.POD, body_mode="FULL_DUPLEX_STREAMED", failure_mode="FailOpen")


def test_the_components_bootstrap_is_the_generated_one() -> None:
    assert (COMPONENT / "envoy.json").read_text() == envoy.bootstrap_json(envoy.POD), (
        "config/gateway-envoy/envoy.json is stale: run `make manifests`"
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object of `kustomize build config/default` with `components: [../gateway-envoy]`."""
    return default_with_component(tmp_path_factory.mktemp("config"), "gateway-envoy", "gateway-envoy")


def _containers(installed: dict[tuple[str, str], Any]) -> dict[str, dict[str, Any]]:
    pod = installed["Deployment", "llmaz-gateway"]["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def test_the_services_api_port_reaches_envoy_alone(installed: dict[tuple[str, str], Any]) -> None:
    (port,) = installed["Service", "llmaz-gateway"]["spec"]["ports"]
    serving = {
        name: p["containerPort"]
        for name, c in _containers(installed).items()
        for p in c.get("ports", [])
        if p["name"] == port["targetPort"]
    }
    assert serving == {"envoy": envoy.API_PORT}


def test_the_python_proxy_moves_to_loopback_and_keeps_the_picker_envoy_calls(
    installed: dict[tuple[str, str], Any],
) -> None:
    gateway = _containers(installed)["gateway"]
    args = parse_args(gateway["args"])
    assert gateway_options(args).bind_address.startswith("127.0.0.1:")
    assert args.epp_port == envoy.EPP_PORT
    assert epp_options(args).host == ""  # the Service llmaz-gateway-epp still reaches it, for GIE gateways
    assert gateway_options(args).activator_address == f":{args.activator_port}"
    assert all(p["containerPort"] != envoy.API_PORT for p in gateway["ports"])


def test_the_installed_envoy_awaits_the_picker_longer_than_the_installed_gateway_holds_a_request(
    installed: dict[tuple[str, str], Any],
) -> None:
    args = parse_args(_containers(installed)["gateway"]["args"])
    (config_map,) = [obj for (kind, _), obj in installed.items() if kind == "ConfigMap" and "envoy.json" in obj["data"]]
    timeout = _seconds(_ext_proc(json.loads(config_map["data"]["envoy.json"]))["message_timeout"])
    assert timeout > max(args.wake_timeout, args.hold_timeout)


def test_envoy_runs_the_generated_bootstrap_as_non_root_and_is_probed_at_ready(
    installed: dict[tuple[str, str], Any],
) -> None:
    container = _containers(installed)["envoy"]
    assert container["image"] == "envoy:latest"  # an overlay's `images:` sets it, as `controller` for the manager
    args = container["args"]
    assert not [a for a in args if a.startswith("--") and "=" in a], "Envoy takes an option's value apart from it"
    path = Path(args[args.index("--config-path") + 1])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    pod = installed["Deployment", "llmaz-gateway"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = installed["ConfigMap", volume["configMap"]["name"]]
    assert config_map["data"][path.name] == envoy.bootstrap_json(envoy.POD)
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"] == {"path": envoy.READY_PATH, "port": "envoy-ready"}
    assert ports["envoy-ready"] == envoy.READY_PORT


def test_envoy_serves_on_while_the_gateway_drains_within_the_grace_period(
    installed: dict[tuple[str, str], Any],
) -> None:
    containers = _containers(installed)
    gateway, sidecar = containers["gateway"], containers["envoy"]
    drained = gateway["lifecycle"]["preStop"]["sleep"]["seconds"] + parse_args(gateway["args"]).drain_timeout
    assert sidecar["lifecycle"]["preStop"]["sleep"]["seconds"] == drained
    grace = installed["Deployment", "llmaz-gateway"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert drained < grace
