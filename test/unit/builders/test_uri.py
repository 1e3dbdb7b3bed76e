"""URI parsing: llmaz's lexical rules and exact error texts."""

from __future__ import annotations

import re

import pytest

from llmaz.apis.uri import parse_bucket_path, parse_oss, parse_uri


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("oss://bucket.endpoint/models/qwen", ("OSS", "bucket.endpoint/models/qwen")),
        ("Oss://b.e/p", ("OSS", "b.e/p")),
        ("s3://bucket/path", ("S3", "bucket/path")),
        ("gcs://bucket/a/b.gguf", ("GCS", "bucket/a/b.gguf")),
        ("ollama://qwen2:0.5b", ("OLLAMA", "qwen2:0.5b")),
        ("host:///workspace/Qwen2", ("HOST", "/workspace/Qwen2")),
        ("http://example.com", ("HTTP", "example.com")),
        ("host://", ("HOST", "")),
    ],
)
def test_uri_splits_into_upper_cased_protocol_and_address(uri: str, expected: tuple[str, str]) -> None:
    assert parse_uri(uri) == expected


@pytest.mark.parametrize("uri", ["no-separator", "a://b://c", ""])
def test_uri_without_exactly_one_separator_is_a_format_error(uri: str) -> None:
    with pytest.raises(ValueError, match=r"^uri format error$"):
        parse_uri(uri)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (
            "llmaz.oss-ap-southeast-1-internal.aliyuncs.com/models/Qwen2-7B",
            ("llmaz", "oss-ap-southeast-1-internal.aliyuncs.com", "models/Qwen2-7B"),
        ),
        ("b.e/p/q.gguf", ("b", "e", "p/q.gguf")),
        ("b.e/", ("b", "e", "")),
    ],
)
def test_oss_address_splits_at_first_dot_then_first_slash(address: str, expected: tuple[str, str, str]) -> None:
    assert parse_oss(address) == expected


@pytest.mark.parametrize("address", ["bucket-without-dot/path", "bucket.endpoint-without-path", ""])
def test_oss_address_missing_a_part_is_not_right(address: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape('address not right ' + address)}$"):
        parse_oss(address)


def test_bucket_path_splits_at_first_slash() -> None:
    assert parse_bucket_path("my-models/dir/DeepSeek") == ("my-models", "dir/DeepSeek")


def test_bucket_without_path_is_not_right() -> None:
    with pytest.raises(ValueError, match=r"^address not right my-models$"):
        parse_bucket_path("my-models")
