"""Cluster-wide llmaz settings from the `llmaz-global-config` ConfigMap (key `config.data`, YAML).

    scheduler-name: default-scheduler            # optional; set on pod templates that name none
    init-container-image: llmaz-model-loader:v0.1.0   # required; the model-loader image

`parse_global_config` turns a ConfigMap into `GlobalSettings` or raises `SettingsError` with llmaz's texts.
`SettingsHolder` keeps the last good value: a bad edit is reported and ignored, never half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from llmaz.apis import constants as c


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    init_container_image: str
    scheduler_name: str = ""


def parse_global_config(config_map: dict[str, Any]) -> GlobalSettings:
    data = config_map.get("data") or {}
    if c.GLOBAL_CONFIG_DATA_KEY not in data:
        raise SettingsError("config.data not found in ConfigMap")
    try:
        parsed = yaml.safe_load(data[c.GLOBAL_CONFIG_DATA_KEY]) or {}
    except yaml.YAMLError as err:
        raise SettingsError(f"failed to unmarshal config.data: {err}") from err
    if not isinstance(parsed, dict):
        raise SettingsError("failed to unmarshal config.data: expected a mapping of settings")
    image = parsed.get("init-container-image")
    if not isinstance(image, str) or not image:
        raise SettingsError("invalid global config: init-container-image is required")
    scheduler = parsed.get("scheduler-name") or ""
    if not isinstance(scheduler, str):
        raise SettingsError("invalid global config: scheduler-name must be a string")
    return GlobalSettings(init_container_image=image, scheduler_name=scheduler)


class SettingsHolder:
    """The current settings; `None` until a valid ConfigMap has been seen."""

    def __init__(self) -> None:
        self.current: GlobalSettings | None = None
        self.last_error: str | None = None

    def update(self, config_map: dict[str, Any]) -> bool:
        """Parse and keep `config_map`; True when the settings changed. Raises SettingsError, keeping the old."""
        try:
            settings = parse_global_config(config_map)
        except SettingsError as err:
            self.last_error = str(err)
            raise
        self.last_error = None
        changed = settings != self.current
        self.current = settings
        return changed

    def forget(self) -> None:
        """The ConfigMap was deleted: keep serving the last good settings, but say so."""
        self.last_error = "ConfigMap llmaz-global-config was deleted; keeping the last settings"
