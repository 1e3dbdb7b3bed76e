"""OpenModel admission: the family-name label and createdAt defaults, the validation rules
(`llmaz.apis.validation.openmodel`: llmaz's source rules and the adapters'), the opt-in to serving across
namespaces (`validate_openmodel_annotations`), and warnings."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from llmaz.apis import OpenModel
from llmaz.apis import constants as c
from llmaz.apis.validation.field import FieldError, invalid
from llmaz.apis.validation.names import label_value_messages
from llmaz.apis.validation.openmodel import validate_openmodel as validate_openmodel

SERVE_ACROSS_NAMESPACES_RULE: Final = (
    'must be "true" (llmaz-gateway pools every namespace serving the model) or "false" (the namespace that serves it '
    "first owns its name, the default)"
)
HUB_AND_URI_WARNING: Final = "spec.source: both modelHub and uri are set; modelHub is used and uri is ignored"


def default_openmodel(obj: dict[str, Any], now: datetime, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of `obj` with the family-name label set (always overwritten) and createdAt set if missing.

    A family name that is no label value is not copied (the label is removed): the API server would refuse the
    label before the validating webhook could name the field, `spec.familyName`, and say what is wrong with it.

    A missing createdAt is taken from `old` (the stored object, on UPDATE) when it has one, else it is `now`:
    llmaz reset it to the time of every update that omitted it (e.g. an apply from a manifest without it).
    Works on the raw object, because mutating webhooks run before the API server's schema validation. Only
    the maps on the changed paths are copied; the rest is shared with `obj`, which is left unchanged.
    """
    out = dict(obj)
    spec = out.get("spec")
    family = spec.get("familyName") if isinstance(spec, dict) else None
    family = family if isinstance(family, str) else ""
    labels = _copied_labels(out)
    if label_value_messages(family):
        labels.pop(c.MODEL_FAMILY_NAME_LABEL, None)
    else:
        labels[c.MODEL_FAMILY_NAME_LABEL] = family
    if isinstance(spec, dict) and spec.get("createdAt") is None:
        spec = out["spec"] = dict(spec)
        spec["createdAt"] = _stored_created_at(old) or rfc3339_seconds(now)
    return out


def rfc3339_seconds(now: datetime) -> str:
    """`now` in UTC, truncated to seconds: `2025-01-02T03:04:05Z`."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stored_created_at(old: dict[str, Any] | None) -> str | None:
    spec = old.get("spec") if old is not None else None
    value = spec.get("createdAt") if isinstance(spec, dict) else None
    return value if isinstance(value, str) and value else None


def _copied_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj`'s labels, with `metadata` and `labels` replaced by copies (or created) so they can be changed."""
    meta = obj.get("metadata")
    meta = obj["metadata"] = dict(meta) if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    labels = meta["labels"] = dict(labels) if isinstance(labels, dict) else {}
    return labels


_NATIVE_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})


def known_resource(name: str) -> bool:
    """A resource a node can offer: cpu, memory, ephemeral-storage, hugepages-<size>, or an extended resource
    qualified by a domain (`nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`) outside `kubernetes.io`."""
    if name in _NATIVE_RESOURCES or name.startswith("hugepages-"):
        return True
    domain, separator, resource = name.partition("/")
    return bool(separator and resource and "." in domain and not domain.endswith("kubernetes.io"))


def flavor_warnings(model: OpenModel) -> list[str]:
    """Flavors that would not place pods as meant: no limits (nothing requested, so any node fits, and fallback
    never has a reason to move on), or a resource name no node offers (pods stay Pending)."""
    config = model.spec.inference_config
    warnings = []
    for index, flavor in enumerate((config.flavors if config is not None else None) or []):
        path = f"spec.inferenceConfig.flavors[{index}]"
        if not flavor.limits:
            warnings.append(f"{path}: flavor {flavor.name!r} has no limits; its pods request no accelerators")
        for name in flavor.limits or {}:
            if not known_resource(name):
                warnings.append(
                    f"{path}.limits: {name!r} is not a known resource name (cpu, memory, ephemeral-storage, "
                    "hugepages-<size>, or a qualified extended resource such as nvidia.com/gpu); no node offers it"
                )
    return warnings


def openmodel_warnings(model: OpenModel) -> list[str]:
    """Admitted but surprising: a hub and a URI together (the hub wins everywhere, as in llmaz), and flavors
    that cannot place pods as meant (`flavor_warnings`)."""
    source = model.spec.source
    both = [HUB_AND_URI_WARNING] if source.model_hub is not None and source.uri is not None else []
    return both + flavor_warnings(model)


def validate_openmodel_annotations(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """`llmaz.io/serve-across-namespaces`, when set, must be "true" or "false": any other value pools nothing,
    which is refused rather than silently meaning "false". On UPDATE (`old` given) only a changed value is checked,
    so an OpenModel stored with a bad value before this check can still be updated."""
    key = c.SERVE_ACROSS_NAMESPACES_ANNOTATION
    value = _annotations(obj).get(key)
    if value is None or value in ("true", "false") or (old is not None and _annotations(old).get(key) == value):
        return []
    return [invalid(f"metadata.annotations[{key}]", value, SERVE_ACROSS_NAMESPACES_RULE)]


def _annotations(obj: dict[str, Any] | None) -> dict[str, Any]:
    meta = (obj or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}
