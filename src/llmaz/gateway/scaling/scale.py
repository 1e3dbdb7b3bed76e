"""The writes scale to zero makes on a Playground, shared by waking (`waker`) and idle detection (`idle`).

- `touch` records a request (now, or when it was seen) in the shared last request time
  (`llmaz.io/last-request-time`, a merge patch).
- `scale_if` sets the replica count through the scale subresource, as an HPA would, only if it is still what was
  read (and the caller's last check, `proceed`, still holds after the read): the patch names the resourceVersion
  of that read (optimistic concurrency; a JSON patch `test` cannot express it, since the Scale object omits a
  zero count), so of many replicas racing to make one change exactly one succeeds, and only it records the Event.
- `idle_after` reads a Playground's idle time; a value that is not one turns scale to zero off for that
  Playground, with one Warning Event (`InvalidScaleToZero`) per value.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from llmaz.apis.resources import PLAYGROUNDS
from llmaz.apis.scaletozero import idle_after
from llmaz.gateway.scaling import scaletozero
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import ApiError
from llmaz.runtime.events import WARNING, EventRecorder
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow
from llmaz.runtime.resource import object_key

RBAC_RULES = (
    allow(PLAYGROUNDS, "patch"),  # the last request time annotation
    allow(PLAYGROUNDS, "get", "patch", subresource="scale"),
)
# A conditional scale re-reads and retries this often after a concurrent write to the Playground (409).
_SCALE_ATTEMPTS = 5


class PlaygroundScale:
    def __init__(self, client: Client, recorder: EventRecorder, *, wall_clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self.recorder = recorder
        self.now = wall_clock
        self._warned: dict[str, str] = {}
        self._log = get_logger("llmaz.gateway.scaling")

    async def touch(self, playground: Obj, seen: float | None = None) -> None:
        """Record a request seen at `seen` (default: now) as the Playground's last request time."""
        meta = playground["metadata"]
        patch = scaletozero.touch_patch(self.now() if seen is None else seen)
        await self._client.patch(PLAYGROUNDS, meta["name"], patch, meta["namespace"])

    async def scale_if(
        self, playground: Obj, current: int, wanted: int, *, proceed: Callable[[], bool] | None = None
    ) -> bool:
        """Set the replica count to `wanted` if it is `current`; True when this call made the change. `proceed`, when
        given, is asked once more just before each write (after the scale is read): False leaves the count as it is
        (idle detection: a request arrived meanwhile)."""
        meta = playground["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        for _ in range(_SCALE_ATTEMPTS):
            scale = await self._client.get_scale(PLAYGROUNDS, name, namespace)
            if scaletozero.scale_replicas(scale) != current or (proceed is not None and not proceed()):
                return False
            try:
                await self._client.patch(
                    PLAYGROUNDS, name, scaletozero.scale_patch(scale, wanted), namespace, subresource="scale"
                )
            except ApiError as err:
                if err.status != 409:
                    raise
                continue  # the Playground changed since the read: read again
            return True
        return False

    def idle_after(self, playground: Obj) -> float | None:
        """The Playground's idle time, None when it did not opt in or its value is no idle time (warned once)."""
        try:
            return idle_after(playground)
        except ValueError as err:
            key, message = object_key(playground), str(err)
            if self._warned.get(key) != message:
                self._warned[key] = message
                self._log.warning("scale to zero is off for this Playground", playground=key, error=message)
                self.recorder.event(playground, WARNING, "InvalidScaleToZero", f"{message}; scale to zero is off")
            return None
