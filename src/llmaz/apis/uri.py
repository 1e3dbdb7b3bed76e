"""Parsing of OpenModel source URIs (`<protocol>://<address>`), shared by the webhooks, builders and model loader.

Invariants:
- Errors are `ValueError`s whose text is llmaz's exact text (`uri format error`, `address not right <address>`).
- Parsing is purely lexical: the protocol is upper-cased but not checked against the supported set (callers do
  that, with `constants.URI_PROTOCOLS`), and empty parts between separators are accepted, as in llmaz.
"""

from __future__ import annotations

URI_SEPARATOR = "://"


def parse_uri(uri: str) -> tuple[str, str]:
    """Split `uri` into (UPPER-CASED protocol, address); the separator `://` must occur exactly once.

    >>> parse_uri("oss://bucket.endpoint/models/qwen")
    ('OSS', 'bucket.endpoint/models/qwen')
    """
    parts = uri.split(URI_SEPARATOR)
    if len(parts) != 2:
        raise ValueError("uri format error")
    return parts[0].upper(), parts[1]


def parse_oss(address: str) -> tuple[str, str, str]:
    """Split an OSS address `<bucket>.<endpoint>/<path>` into (bucket, endpoint, path).

    The bucket ends at the first `.`, the endpoint at the first `/` after it; the path keeps any further `/`.
    """
    bucket, dot, rest = address.partition(".")
    endpoint, slash, path = rest.partition("/")
    if not dot or not slash:
        raise ValueError(f"address not right {address}")
    return bucket, endpoint, path


def parse_bucket_path(address: str) -> tuple[str, str]:
    """Split an S3 or GCS address `<bucket>/<path>` at the first `/` into (bucket, path)."""
    bucket, slash, path = address.partition("/")
    if not slash:
        raise ValueError(f"address not right {address}")
    return bucket, path
