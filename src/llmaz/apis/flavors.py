"""The order of a model's inference flavors for one workload: shared by the controllers and the scheduler extender."""

from __future__ import annotations

from collections.abc import Sequence

from llmaz.apis import constants as c


def flavor_order(defined: Sequence[str], claimed: Sequence[str] | None) -> list[str]:
    """The flavor names to try, best first: the claimed ones the model defines, in claim order, else all the
    model's (`defined`), each once."""
    if claimed:
        return [name for name in dict.fromkeys(claimed) if name in defined]
    return list(dict.fromkeys(defined))


def claimed_in_annotation(annotations: dict[str, str] | None) -> list[str]:
    """The flavors a pod's Service claimed, from `llmaz.io/inference-service-flavors` (comma-separated)."""
    text = (annotations or {}).get(c.INFERENCE_SERVICE_FLAVORS_ANNOTATION) or ""
    return [name.strip() for name in text.split(",") if name.strip()]
