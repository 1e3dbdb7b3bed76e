"""Pure rules: whether a ready endpoint is coming for a model that has none, read from its Playgrounds as cached.

- No Playground serves the model (an inference Service alone, say): nothing is coming.
- A sleeping Playground that opted in to scale to zero (0 replicas) is to be woken: `WAKING`.
- A Playground with replicas whose status says they cannot become ready is not coming: its `Progressing`
  condition is False (the controllers aborted: a missing model or backend, a conflict), or carries a finding that
  retrying does not fix by itself (`FAILING_REASONS`: an image that cannot be pulled, a crash loop, a container
  that cannot be created, a model loader that failed). The reason is the condition's text.
- Any other Playground with replicas is coming: `WAKING` when it opted in (it was just woken, or is restarting
  while opted in), else `STARTING` (a restart, a rollout, a scale-up).
- A Playground with 0 replicas that did not opt in is not coming.
When nothing is coming, the reason names each Playground and why.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llmaz.apis import constants as c
from llmaz.apis.conditions import (
    REASON_CONTAINER_CRASH_LOOPING,
    REASON_CONTAINER_CREATE_FAILED,
    REASON_IMAGE_PULL_FAILED,
    REASON_MODEL_LOADER_FAILED,
    find_condition,
    finding_reason,
    progressing_finding,
)
from llmaz.gateway.scaling.scaletozero import replicas
from llmaz.runtime.cache import Obj
from llmaz.runtime.resource import object_key

# Findings that hold until someone changes something (an unschedulable pod may still find a node).
FAILING_REASONS = frozenset(
    {
        REASON_IMAGE_PULL_FAILED,
        REASON_CONTAINER_CRASH_LOOPING,
        REASON_CONTAINER_CREATE_FAILED,
        REASON_MODEL_LOADER_FAILED,
    }
)


class Coming(enum.Enum):
    WAKING = "waking"
    """Scaled from zero (now, or a moment ago): held up to the wake timeout."""
    STARTING = "starting"
    """Replicas wanted but not ready yet: held up to the hold timeout."""


@dataclass(frozen=True, slots=True)
class Outlook:
    coming: Coming | None
    """None: no ready endpoint is coming (`reason` says why)."""
    reason: str = ""
    to_wake: tuple[Obj, ...] = ()
    """Sleeping Playgrounds to scale from zero first."""


def cannot_become_ready(playground: Obj) -> str | None:
    """Why the Playground's replicas cannot become ready, from its status; None when they may."""
    status = playground.get("status")
    status = status if isinstance(status, dict) else {}
    progressing = find_condition(status.get("conditions"), c.CONDITION_PROGRESSING)
    if progressing is not None and progressing.get("status") == "False":
        return f"{progressing.get('reason') or 'Progressing'}: {progressing.get('message') or 'not progressing'}"
    finding = progressing_finding(status)
    return finding if finding is not None and finding_reason(finding) in FAILING_REASONS else None


def outlook(playgrounds: Iterable[Obj], opted_in: Callable[[Obj], bool]) -> Outlook:
    """What a request can expect from the Playgrounds of its model (see the module docstring)."""
    found = sorted(playgrounds, key=object_key)
    if not found:
        return Outlook(None, "no Playground serves it")
    to_wake = tuple(pg for pg in found if replicas(pg) == 0 and opted_in(pg))
    if to_wake:
        return Outlook(Coming.WAKING, to_wake=to_wake)
    coming: set[Coming] = set()
    reasons: list[str] = []
    for playground in found:
        why = "it runs 0 replicas" if replicas(playground) == 0 else cannot_become_ready(playground)
        if why is not None:
            reasons.append(f"Playground {object_key(playground)}: {why}")
        else:
            coming.add(Coming.WAKING if opted_in(playground) else Coming.STARTING)
    if coming:
        return Outlook(Coming.WAKING if Coming.WAKING in coming else Coming.STARTING)
    return Outlook(None, "; ".join(reasons))
