"""API timestamps: MicroTime written as the API server writes it, and every form of `Time` and `MicroTime` read back
as an aware datetime; anything else is None, never an exception."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from llmaz.runtime.timestamp import micro_time, parse_timestamp


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    assert micro_time(datetime(2024, 5, 6, 7, 8, 9, 12, tzinfo=UTC)) == "2024-05-06T07:08:09.000012Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-06T07:08:09Z", datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)),
        ("2024-05-06T07:08:09.000012Z", datetime(2024, 5, 6, 7, 8, 9, 12, tzinfo=UTC)),
        ("2024-05-06T09:08:09+02:00", datetime(2024, 5, 6, 9, 8, 9, tzinfo=timezone(timedelta(hours=2)))),
        ("2024-05-06T07:08:09", datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)),
    ],
)
def test_an_api_timestamp_reads_as_an_aware_datetime(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is not None


def test_micro_time_reads_back_to_the_same_instant() -> None:
    now = datetime(2026, 11, 28, 13, 22, 5, 123456, tzinfo=UTC)
    assert parse_timestamp(micro_time(now)) == now


@pytest.mark.parametrize("value", [None, "", "yesterday", "2024-13-01T00:00:00Z", 1700000000, b"2024-05-06T07:08:09Z"])
def test_anything_else_is_none(value: object) -> None:
    assert parse_timestamp(value) is None
