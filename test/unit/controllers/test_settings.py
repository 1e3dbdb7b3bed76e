"""The global ConfigMap: llmaz's error texts, and a bad edit never replaces good settings."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.controllers.settings import GlobalSettings, SettingsError, SettingsHolder, parse_global_config


def _cm(data: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "llmaz-global-config"}, "data": {} if data is None else {"config.data": data}}


def test_a_valid_config_is_parsed() -> None:
    parsed = parse_global_config(_cm("scheduler-name: s\ninit-container-image: img:1\n"))
    assert parsed == GlobalSettings(init_container_image="img:1", scheduler_name="s")


def test_scheduler_name_is_optional() -> None:
    assert parse_global_config(_cm("init-container-image: img:1\n")).scheduler_name == ""


@pytest.mark.parametrize(
    ("config_map", "message"),
    [
        (_cm(None), "config.data not found in ConfigMap"),
        ({"metadata": {}}, "config.data not found in ConfigMap"),
        (_cm("a: [b"), "failed to unmarshal config.data: "),
        (_cm("- a\n- b\n"), "failed to unmarshal config.data: "),
        (_cm("scheduler-name: s\n"), "invalid global config: init-container-image is required"),
        (_cm("init-container-image: ''\n"), "invalid global config: init-container-image is required"),
    ],
)
def test_invalid_configs_are_reported_with_llmaz_texts(config_map: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_global_config(config_map)
    assert str(err.value).startswith(message)


def test_a_bad_edit_keeps_the_last_good_settings() -> None:
    holder = SettingsHolder()
    assert holder.update(_cm("init-container-image: img:1\n"))
    with pytest.raises(SettingsError):
        holder.update(_cm("scheduler-name: s\n"))
    assert holder.current == GlobalSettings(init_container_image="img:1")
    assert holder.last_error == "invalid global config: init-container-image is required"


def test_an_unchanged_config_reports_no_change() -> None:
    holder = SettingsHolder()
    assert holder.update(_cm("init-container-image: img:1\n"))
    assert not holder.update(_cm("init-container-image: img:1\n"))
    assert holder.update(_cm("init-container-image: img:2\n"))


def test_flavor_fallback_defaults_to_sixty_seconds() -> None:
    assert parse_global_config(_cm("init-container-image: img:1\n")).flavor_fallback_after == 60.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("'0'", 0.0),
        ("90", 90.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("2m", 120.0),
        ("1m30s", 90.0),
        ("1h", 3600.0),
    ],
)
def test_flavor_fallback_durations(text: str, seconds: float) -> None:
    parsed = parse_global_config(_cm(f"init-container-image: img:1\nflavor-fallback-after: {text}\n"))
    assert parsed.flavor_fallback_after == seconds


@pytest.mark.parametrize("text", ["-5", "soon", "10x", "s", "1m 30s", "true", "[1]", "-1s"])
def test_a_bad_flavor_fallback_is_named_in_the_error(text: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_global_config(_cm(f"init-container-image: img:1\nflavor-fallback-after: {text}\n"))
    assert str(err.value).startswith("invalid global config: flavor-fallback-after must be a duration such as 60s")


@pytest.mark.parametrize(("text", "value"), [("", False), ("flavor-return-when-fits: true\n", True),
                                             ("flavor-return-when-fits: false\n", False)])  # fmt: skip
def test_returning_to_a_better_flavor_is_off_unless_asked_for(text: str, value: bool) -> None:
    assert parse_global_config(_cm(f"init-container-image: img:1\n{text}")).flavor_return_when_fits is value


@pytest.mark.parametrize("text", ["yes please", "1", "[true]", "'true'"])
def test_a_flavor_return_that_is_not_a_boolean_is_named_in_the_error(text: str) -> None:
    with pytest.raises(SettingsError, match="flavor-return-when-fits must be true or false, got"):
        parse_global_config(_cm(f"init-container-image: img:1\nflavor-return-when-fits: {text}\n"))


def test_a_setting_s_own_key_overrides_config_data_and_keeps_the_rest() -> None:
    config_map = _cm("scheduler-name: s\ninit-container-image: img:1\nflavor-fallback-after: 30s\n")
    config_map["data"]["init-container-image"] = "registry.example:5000/loader:2"
    assert parse_global_config(config_map) == GlobalSettings(
        init_container_image="registry.example:5000/loader:2", scheduler_name="s", flavor_fallback_after=30.0
    )


@pytest.mark.parametrize(
    ("key", "text", "field", "value"),
    [
        ("scheduler-name", "llmaz-scheduler", "scheduler_name", "llmaz-scheduler"),
        ("init-container-image", "img:2", "init_container_image", "img:2"),
        ("flavor-fallback-after", "90", "flavor_fallback_after", 90.0),
        ("flavor-fallback-after", "1m30s", "flavor_fallback_after", 90.0),
        ("flavor-return-when-fits", "true", "flavor_return_when_fits", True),
        ("flavor-return-when-fits", "false", "flavor_return_when_fits", False),
    ],
)
def test_every_setting_s_key_is_read_as_its_text(key: str, text: str, field: str, value: object) -> None:
    config_map = _cm("init-container-image: img:1\nflavor-return-when-fits: true\n")
    config_map["data"][key] = text
    assert getattr(parse_global_config(config_map), field) == value


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("init-container-image", "", "invalid global config: init-container-image is required"),
        ("flavor-fallback-after", "soon", "invalid global config: flavor-fallback-after must be a duration"),
        ("flavor-return-when-fits", "yes", "invalid global config: flavor-return-when-fits must be true or false"),
    ],
)
def test_a_bad_key_is_named_in_the_error(key: str, text: str, message: str) -> None:
    config_map = _cm("init-container-image: img:1\n")
    config_map["data"][key] = text
    with pytest.raises(SettingsError) as err:
        parse_global_config(config_map)
    assert str(err.value).startswith(message)


def test_a_key_alone_does_not_replace_config_data() -> None:
    with pytest.raises(SettingsError, match=r"^config\.data not found in ConfigMap$"):
        parse_global_config({"data": {"init-container-image": "img:1"}})


def test_model_pods_are_restricted_with_no_loader_resources_or_size_limit_by_default() -> None:
    parsed = parse_global_config(_cm("init-container-image: img:1\n"))
    assert (parsed.model_pod_security, parsed.model_loader_resources, parsed.model_volume_size_limit) == (
        "restricted",
        None,
        None,
    )


def test_model_pod_settings_are_read_from_config_data() -> None:
    parsed = parse_global_config(
        _cm(
            "init-container-image: img:1\nmodel-pod-security: none\nmodel-volume-size-limit: 100Gi\n"
            "model-loader-resources:\n  requests: {cpu: 0.5, memory: 256Mi}\n  limits: {memory: 1Gi}\n"
        )
    )
    assert parsed.model_pod_security == "none"
    assert parsed.model_volume_size_limit == "100Gi"
    assert parsed.model_loader_resources == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }


@pytest.mark.parametrize(
    ("key", "text", "field", "value"),
    [
        ("model-pod-security", "none", "model_pod_security", "none"),
        ("model-volume-size-limit", "20Gi", "model_volume_size_limit", "20Gi"),
        ("model-loader-resources", "{limits: {cpu: '2'}}", "model_loader_resources", {"limits": {"cpu": "2"}}),
    ],
)
def test_every_model_pod_setting_s_key_is_read_as_its_text(key: str, text: str, field: str, value: object) -> None:
    config_map = _cm("init-container-image: img:1\n")
    config_map["data"][key] = text
    assert getattr(parse_global_config(config_map), field) == value


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("model-pod-security: baseline", "model-pod-security must be one of restricted, none, got 'baseline'"),
        ("model-volume-size-limit: lots", "model-volume-size-limit must be a positive quantity such as"),
        ("model-volume-size-limit: 0", "model-volume-size-limit must be a positive quantity such as"),
        ("model-loader-resources: 1Gi", "model-loader-resources must be a mapping with requests and limits"),
        ("model-loader-resources: {memory: 1Gi}", "model-loader-resources must be a mapping with requests and limits"),
        ("model-loader-resources: {limits: [1Gi]}", "model-loader-resources.limits must map resource names to"),
        ("model-loader-resources: {limits: {cpu: x}}", "model-loader-resources.limits.cpu must be a positive quantity"),
        (
            "model-loader-resources: {requests: {memory: 2Gi}, limits: {memory: 1Gi}}",
            "model-loader-resources.limits.memory (1Gi) must be at least its request (2Gi)",
        ),
    ],
)
def test_a_bad_model_pod_setting_is_named_in_the_error(setting: str, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_global_config(_cm(f"init-container-image: img:1\n{setting}\n"))
    assert str(err.value).startswith(f"invalid global config: {message}")
