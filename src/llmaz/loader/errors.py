"""Failure classes of the model loader and the process exit code each one maps to.

Invariants:
- Every failure the loader understands is a `LoaderError` whose message names the model, the source and the fix;
  anything else is a bug and exits with `ExitCode.UNEXPECTED`.
- Only `TransientError` is retried; every other class fails fast, so a wrong model ID or a missing secret costs
  seconds, not a backoff schedule.
- The exit codes are part of the loader's contract (documented in docs/model-loader.md) and never change meaning.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes; the pod's init container status shows them as `exitCode`."""

    OK = 0
    UNEXPECTED = 1
    BAD_CONFIGURATION = 2
    NOT_FOUND = 3
    UNAUTHORIZED = 4
    TRANSIENT = 5
    LOCAL_STORAGE = 6


class LoaderError(Exception):
    """A failure with a human-readable explanation; subclasses fix the exit code."""

    exit_code = ExitCode.UNEXPECTED
    reason = "Unexpected"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigurationError(LoaderError):
    """The environment does not describe a loadable model (missing or malformed variables, bad coordinates)."""

    exit_code = ExitCode.BAD_CONFIGURATION
    reason = "BadConfiguration"


class NotFoundError(LoaderError):
    """The source answered that the model, revision, file, bucket or object does not exist."""

    exit_code = ExitCode.NOT_FOUND
    reason = "NotFound"


class UnauthorizedError(LoaderError):
    """The source refused the credentials, or requires credentials that were not provided."""

    exit_code = ExitCode.UNAUTHORIZED
    reason = "Unauthorized"


class TransientError(LoaderError):
    """A failure worth retrying: network errors, timeouts, throttling, 5xx, a source that changed mid-download."""

    exit_code = ExitCode.TRANSIENT
    reason = "Transient"


class SourceChangedError(TransientError):
    """An object changed while it was being downloaded; the load lists the source again instead of retrying."""


class LocalStorageError(LoaderError):
    """Writing to the model volume failed (full disk, read-only volume, permissions)."""

    exit_code = ExitCode.LOCAL_STORAGE
    reason = "LocalStorage"
