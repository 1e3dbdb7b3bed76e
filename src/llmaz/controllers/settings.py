"""Cluster-wide llmaz settings from the `llmaz-global-config` ConfigMap (key `config.data`, YAML).

    scheduler-name: default-scheduler            # optional; set on pod templates that name none
    init-container-image: llmaz-model-loader:v0.1.0   # required; the model-loader image
    flavor-fallback-after: 60s                   # optional; how long pods may stay unschedulable on one inference
                                                 # flavor before the Service moves to the next (0 disables)
    flavor-return-when-fits: false               # optional; move back to a higher-priority flavor once its nodes
                                                 # have room for every pod (checked once per fallback period)
    model-pod-security: restricted               # optional; `restricted` (default) or `none`: how model pods are
                                                 # confined (llmaz.controllers.builders.security)
    model-loader-resources:                      # optional (default none); the model-loader containers' resources
      requests: {cpu: 100m, memory: 256Mi}
      limits: {memory: 1Gi}
    model-volume-size-limit: 100Gi               # optional (default none); sizeLimit of the model-volume emptyDir

Durations are a number of seconds (`90`, `1.5`) or Go-style text (`90s`, `2m`, `1m30s`, `1h`, `0`).

Each setting may also be a key of its own beside `config.data` (`init-container-image: <image>`), which overrides
`config.data`'s value: that is how kustomize changes one setting without rewriting the others (`make deploy
LOADER_IMG=...`, config/node and config/scheduler each merge only their key). A key's value is the text of the
setting: an image or a name as is, a duration as above, `true` or `false`, a quantity, and for
`model-loader-resources` its YAML (`{requests: {cpu: 100m}}`).

`parse_global_config` turns a ConfigMap into `GlobalSettings` or raises `SettingsError` with llmaz's texts.
`SettingsHolder` keeps the last good value: a bad edit is reported and ignored, never half-applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from llmaz.apis import constants as c
from llmaz.apis.duration import parse_duration
from llmaz.apis.quantity import QuantityError, canonical_quantity, parse_quantity


class SettingsError(ValueError):
    pass


DEFAULT_FLAVOR_FALLBACK_AFTER = 60.0
POD_SECURITY_MODES = ("restricted", "none")
DEFAULT_POD_SECURITY = "restricted"


def config_duration(key: str, value: object) -> float:
    """Seconds from a number or Go-style duration text (`90s`, `1m30s`, `0`); SettingsError naming `key`."""
    error = SettingsError(
        f"invalid global config: {key} must be a duration such as 60s, 2m or 0 (to disable), got {value!r}"
    )
    if isinstance(value, bool):
        raise error
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = parse_duration(value.strip())
        except ValueError:
            raise error from None
    else:
        raise error
    if not math.isfinite(seconds) or seconds < 0:
        raise error
    return seconds


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    init_container_image: str
    scheduler_name: str = ""
    # Seconds pods may stay unschedulable on one inference flavor before the next one is tried; 0 disables.
    flavor_fallback_after: float = DEFAULT_FLAVOR_FALLBACK_AFTER
    # Whether a Service off its first flavor moves back to a better one once that one has room again.
    flavor_return_when_fits: bool = False
    # How model pods are confined: "restricted" or "none" (llmaz's pods).
    model_pod_security: str = DEFAULT_POD_SECURITY
    # The model-loader containers' resources (`requests`, `limits`: canonical quantities); None leaves them unset.
    model_loader_resources: dict[str, dict[str, str]] | None = None
    # The model-volume emptyDir's sizeLimit (a canonical quantity); None leaves it unbounded.
    model_volume_size_limit: str | None = None


def _quantity(key: str, value: object) -> str:
    """A quantity's canonical text; SettingsError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        value_ok = False
    else:
        try:
            text = canonical_quantity(value if isinstance(value, str) else str(value))
            value_ok = parse_quantity(text) > 0
        except QuantityError:
            value_ok = False
    if not value_ok:
        raise SettingsError(
            f"invalid global config: {key} must be a positive quantity such as 500m, 2Gi or 100Gi, got {value!r}"
        )
    return text


def loader_resources(value: object) -> dict[str, dict[str, str]] | None:
    """`model-loader-resources`: `requests` and `limits`, each a mapping of resource names to quantities, every
    limit at least its request."""
    key = "model-loader-resources"
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= {"requests", "limits"}:
        raise SettingsError(
            f"invalid global config: {key} must be a mapping with requests and limits, e.g. "
            f"{{requests: {{cpu: 100m, memory: 256Mi}}, limits: {{memory: 1Gi}}}}, got {value!r}"
        )
    out: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        amounts = value.get(part)
        if amounts is None:
            continue
        if not isinstance(amounts, dict) or not all(isinstance(name, str) and name for name in amounts):
            raise SettingsError(f"invalid global config: {key}.{part} must map resource names to quantities")
        out[part] = {name: _quantity(f"{key}.{part}.{name}", amount) for name, amount in amounts.items()}
    for name, limit in out.get("limits", {}).items():
        request = out.get("requests", {}).get(name)
        if request is not None and parse_quantity(limit) < parse_quantity(request):
            raise SettingsError(
                f"invalid global config: {key}.limits.{name} ({limit}) must be at least its request ({request})"
            )
    return out or None


def _yaml_text(text: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# The settings a ConfigMap key of the same name overrides, and how that key's text is read.
_OVERRIDES: dict[str, Callable[[str], object]] = {
    "scheduler-name": str,
    "init-container-image": str,
    "flavor-fallback-after": str,
    "flavor-return-when-fits": lambda text: {"true": True, "false": False}.get(text.strip(), text),
    "model-pod-security": str.strip,
    "model-loader-resources": _yaml_text,
    "model-volume-size-limit": str.strip,
}


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
    parsed.update({key: read(str(data[key])) for key, read in _OVERRIDES.items() if key in data})
    image = parsed.get("init-container-image")
    if not isinstance(image, str) or not image:
        raise SettingsError("invalid global config: init-container-image is required")
    scheduler = parsed.get("scheduler-name") or ""
    if not isinstance(scheduler, str):
        raise SettingsError("invalid global config: scheduler-name must be a string")
    fallback = parsed.get("flavor-fallback-after")
    fallback_after = (
        DEFAULT_FLAVOR_FALLBACK_AFTER if fallback is None else config_duration("flavor-fallback-after", fallback)
    )
    flavor_return = parsed.get("flavor-return-when-fits", False)
    if not isinstance(flavor_return, bool):
        raise SettingsError(
            f"invalid global config: flavor-return-when-fits must be true or false, got {flavor_return!r}"
        )
    security = parsed.get("model-pod-security", DEFAULT_POD_SECURITY)
    if security not in POD_SECURITY_MODES:
        raise SettingsError(
            f"invalid global config: model-pod-security must be one of {', '.join(POD_SECURITY_MODES)}, "
            f"got {security!r}"
        )
    size = parsed.get("model-volume-size-limit")
    return GlobalSettings(
        init_container_image=image,
        scheduler_name=scheduler,
        flavor_fallback_after=fallback_after,
        flavor_return_when_fits=flavor_return,
        model_pod_security=security,
        model_loader_resources=loader_resources(parsed.get("model-loader-resources")),
        model_volume_size_limit=None if size is None else _quantity("model-volume-size-limit", size),
    )


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
