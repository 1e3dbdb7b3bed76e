"""What the controllers say in a Playground's or Service's status about why it is not ready, for whoever reads it.

While a Playground or Service is in progress, its `Progressing=True` condition carries llmaz's normal message for
the reason; when its pods are not ready for a known cause (a `PodFinding` of the controllers), the finding follows
that message after `: `, and starts with one of the finding reasons below. The Playground mirrors its Service's
finding. `progressing_finding` reads a finding back; the controllers record it once as a Warning Event, and
llmaz-gateway answers requests for a model whose replicas cannot become ready with it.
"""

from __future__ import annotations

from typing import Any, Final

from llmaz.apis import constants as c

FINDING_SEPARATOR: Final = ": "
# The Progressing reasons that mean "in progress", with their normal message: only these carry a finding.
SERVICE_PROGRESSING: Final = {c.REASON_SERVICE_IN_PROGRESS: c.MESSAGE_SERVICE_IN_PROGRESS}
PLAYGROUND_PROGRESSING: Final = {
    c.REASON_PENDING: c.MESSAGE_WAITING_FOR_SERVICE_READY,
    c.REASON_PLAYGROUND_IN_PROGRESS: c.MESSAGE_WAITING_FOR_SERVICE_PROGRESSING,
}

# Why pods are not ready: the reason a finding starts with (also the reason of its Warning Event).
REASON_MODEL_LOADER_FAILED: Final = "ModelLoaderFailed"
REASON_CONTAINER_CRASH_LOOPING: Final = "ContainerCrashLooping"
REASON_IMAGE_PULL_FAILED: Final = "ImagePullFailed"
REASON_CONTAINER_CREATE_FAILED: Final = "ContainerCreateFailed"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_PODS_NOT_READY: Final = "PodsNotReady"
FINDING_REASONS: Final = frozenset(
    {
        REASON_MODEL_LOADER_FAILED,
        REASON_CONTAINER_CRASH_LOOPING,
        REASON_IMAGE_PULL_FAILED,
        REASON_CONTAINER_CREATE_FAILED,
        REASON_UNSCHEDULABLE,
    }
)


def find_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((condition for condition in conditions or () if condition.get("type") == type_), None)


def progressing_finding(status: dict[str, Any] | None) -> str | None:
    """The finding a Playground's or Service's in-progress `Progressing` message carries, or None."""
    condition = find_condition((status or {}).get("conditions"), c.CONDITION_PROGRESSING)
    if condition is None or condition.get("status") != "True":
        return None
    normal = {**SERVICE_PROGRESSING, **PLAYGROUND_PROGRESSING}.get(condition.get("reason") or "")
    if normal is None:
        return None
    prefix = f"{normal}{FINDING_SEPARATOR}"
    message = str(condition.get("message") or "")
    return message[len(prefix) :] or None if message.startswith(prefix) else None


def finding_reason(message: str) -> str:
    """The reason a finding starts with (`PodsNotReady` for any other text)."""
    reason, separator, _ = message.partition(FINDING_SEPARATOR)
    return reason if separator and reason in FINDING_REASONS else REASON_PODS_NOT_READY
