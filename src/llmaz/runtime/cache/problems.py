"""Why an informer cannot fill its cache, when retrying alone will not fix it.

Two answers of the API server to a list mean a person has to act, and a reflector's retries only repeat them:

- 404: the resource is not served (its CRD is not installed, or the API group is switched off): `NOT_SERVED`;
- 403: this identity may not list it (a missing RBAC rule): `FORBIDDEN`.

The reflector reports such a failure (and its end, at the next successful list) to its informer, which keeps the
current `SourceProblem`, logs it once when it appears and once when it is gone, and exposes it. The factory
collects every informer's problem for readiness, and waits on an informer with a problem past the cache-sync
deadline instead of failing: the log and /readyz say what to do, and the cache fills once it is done.

The runtime names the resource and the condition; code that knows the resource adds the fix
(`SharedInformerFactory.add_fix_hint`), e.g. the command that installs a missing CRD.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmaz.runtime.client.errors import ApiError, Forbidden, NotFound

NOT_SERVED = "NotServed"
FORBIDDEN = "Forbidden"

_PREDICATES = {
    NOT_SERVED: "is not served by the API server",
    FORBIDDEN: "may not be listed by this identity",
}


def problem_reason(exc: BaseException) -> str | None:
    """`NOT_SERVED` or `FORBIDDEN` for list and watch failures that retrying cannot fix, else None."""
    if isinstance(exc, NotFound):
        return NOT_SERVED
    if isinstance(exc, Forbidden):
        return FORBIDDEN
    return None


@dataclass(frozen=True, slots=True)
class SourceProblem:
    """One informer's current problem: what (`reason`), of which resource ("group/version/plural"), the API
    server's own words (`error`) and, when someone registered it, how to fix it."""

    reason: str
    resource: str
    error: str
    fix: str = ""

    @property
    def summary(self) -> str:
        """The constant log message for the reason ("resource is not served by the API server")."""
        return f"resource {self._predicate}"

    @property
    def _predicate(self) -> str:
        return _PREDICATES.get(self.reason, "cannot be listed")

    def __str__(self) -> str:
        text = f"resource {self.resource} {self._predicate}"
        return f"{text}; fix: {self.fix}" if self.fix else f"{text} ({self.error})"


def error_text(exc: BaseException) -> str:
    return exc.message if isinstance(exc, ApiError) else repr(exc)
