"""The reconciler contract: what a reconciler receives, what it returns, and what its errors mean.

A `Request` carries a key (namespace and name), never an event. By the time a worker picks it up, several
events may have collapsed into it, and the object may have changed again or gone. The reconciler reads the
current state from the cache, compares it with what it wants, and acts. Because of that it must be
idempotent: running it twice on the same state does nothing the second time. Small reconciles that each
touch one object scale better than one reconcile that walks everything.

Outcomes, decided in one place by the controller's worker loop:

- return `Result()`: success; the key's retry backoff is reset.
- return `Result(requeue_after=s)`: reconcile again in `s` seconds (backoff reset). Use this for polling.
- return `Result(requeue=True)`: reconcile again after the rate limiter's backoff.
- raise `TerminalError`: counted as an error and logged, but not retried; a later event retries it.
- raise anything else: counted, logged once with its traceback, retried after the rate limiter's backoff.
- take longer than the controller's `reconcile_timeout` (default 60 s): cancelled at its current `await`, then
  counted as an error and a timeout (`ReconcileTimeoutError`), logged with where it was stuck, and retried after
  the rate limiter's backoff. Cancellation can only interrupt an `await`: a reconciler that blocks the event loop
  or swallows `CancelledError` still holds its worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Request:
    """The key of the object to reconcile. `namespace` is "" for cluster-scoped objects."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        """The cache's key format: "namespace/name", or "name" for cluster-scoped objects."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class Result:
    """What to do after a successful reconcile. `requeue_after` wins over `requeue` when both are set."""

    requeue: bool = False
    requeue_after: float | None = None

    def __post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError(f"requeue_after must be >= 0, got {self.requeue_after}")


class TerminalError(Exception):
    """An error that retrying cannot fix (invalid spec, missing permission the user must grant).

    The controller counts and logs it, then forgets the key; the object's next event reconciles it again.
    Wrap the cause: `raise TerminalError("invalid spec") from err`.
    """


class ReconcileTimeoutError(TimeoutError):
    """A reconcile ran past the controller's `reconcile_timeout` and was cancelled; `stuck_at` says where it was
    waiting (innermost frame first)."""

    def __init__(self, message: str, stuck_at: str = "") -> None:
        super().__init__(message)
        self.stuck_at = stuck_at


class Reconciler(Protocol):
    """Drives the object named by `request` towards its desired state (outcomes: see the module doc)."""

    async def reconcile(self, request: Request) -> Result: ...
