"""Typed errors of the builders, each carrying the condition message a reconciler surfaces.

llmaz returned most of these as bare reconcile errors and set no condition, so users saw nothing happen and no
reason why; here each one knows its `message` (naming the missing thing), so a reconciler can set
`Progressing=False` with reason `AbortProcessing`.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmaz.apis import constants as c
from llmaz.apis.validation import FieldError, aggregate


class BuildError(Exception):
    """A desired object cannot be built from its inputs until a user fixes them; `message` says why."""

    reason: str = c.REASON_ABORT_PROCESSING

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BackendRuntimeNotFoundError(BuildError):
    """The Playground names a BackendRuntime that does not exist."""

    def __init__(self, backend: str) -> None:
        super().__init__(c.MESSAGE_WAITING_FOR_BACKEND_RUNTIME.format(backend=backend))
        self.backend = backend


class RecommendedConfigNotFoundError(BuildError):
    """The effective configName matches no recommended config of the backend."""

    def __init__(self, backend: str, config: str) -> None:
        super().__init__(c.MESSAGE_RECOMMENDED_CONFIG_NOT_FOUND.format(config=config, backend=backend))
        self.backend = backend
        self.config = config


class ArgRenderError(BuildError):
    """An argument holds a placeholder that is unknown or whose value is empty; the text is llmaz's."""

    def __init__(self, arg: str) -> None:
        super().__init__(c.MESSAGE_ARG_RENDER_ERROR.format(arg=arg))
        self.arg = arg


class InvalidModelSourceError(BuildError):
    """An OpenModel's source cannot be turned into a path or a loader (normally rejected at admission)."""

    def __init__(self, model: str, detail: str) -> None:
        super().__init__(c.MESSAGE_INVALID_MODEL_SOURCE.format(model=model, detail=detail))
        self.model = model


class AdaptersUnsupportedError(BuildError):
    """The served model has adapters and the Playground's BackendRuntime is not one that can load them."""

    def __init__(self, model: str, backend: str, supported: Sequence[str]) -> None:
        super().__init__(
            c.MESSAGE_ADAPTERS_UNSUPPORTED.format(model=model, backend=backend, supported=", ".join(supported))
        )
        self.model = model
        self.backend = backend


class NoModelClaimedError(BuildError):
    """The object claims no model, so there is nothing to serve (normally rejected at admission)."""

    def __init__(self) -> None:
        super().__init__(c.MESSAGE_NO_MODEL_CLAIMED)


class InvalidSpecError(BuildError):
    """The object breaks the admission rules: it was stored without admission (before the webhooks were
    installed, or while a `failurePolicy: Ignore` webhook was down). The message is the webhook's denial text."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__(aggregate(errors))
        self.errors = tuple(errors)
