"""Whether the API server answers this client: one warning when it stops, one info line when it is back.

Every reflector, controller and the leader elector share one client, and each retries on its own schedule; logging
connection trouble at each of them says the same thing a dozen times a minute, at info level. `Connectivity`
follows the transport's outcomes instead, and logs transitions only:

- "lost connection to the API server" (warning), with the server and the error, the first time a request fails to
  reach it after one had reached it (or at start);
- "API server reachable again" (info), with how long it was lost, at the first response after that.

Any HTTP response counts as reached, whatever its status. Failed counts a request that gave up without a response
(connection refused, reset, TLS or DNS failure, timeout). A read retried at once on a stale keep-alive connection
that then succeeds is not a loss: the transport reports only what the request ended with.
"""

from __future__ import annotations

from llmaz.runtime.clock import Clock
from llmaz.runtime.log import get_logger


class Connectivity:
    """The state one transport reports into; `lost` and `describe()` serve readiness checks."""

    def __init__(self, host: str, clock: Clock) -> None:
        self._host = host
        self._clock = clock
        self._lost_at: float | None = None
        self._error = ""
        self._log = get_logger("llmaz.runtime.client").bind(host=host)

    @property
    def lost(self) -> bool:
        return self._lost_at is not None

    def reached(self) -> None:
        """A response came back."""
        if self._lost_at is None:
            return
        down = self._clock.now() - self._lost_at
        self._lost_at = None
        self._log.info("API server reachable again", lost_seconds=round(down, 1))

    def failed(self, error: str) -> None:
        """A request ended without a response."""
        self._error = error
        if self._lost_at is not None:
            return
        self._lost_at = self._clock.now()
        self._log.warning("lost connection to the API server", error=error)

    def describe(self) -> str:
        """Why the API server counts as lost ("" when it does not)."""
        if self._lost_at is None:
            return ""
        down = self._clock.now() - self._lost_at
        return f"API server {self._host} unreachable for {down:.0f}s: {self._error}"
