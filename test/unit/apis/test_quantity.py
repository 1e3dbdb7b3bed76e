"""Quantities compare exactly and print in apimachinery's canonical form."""

from __future__ import annotations

from decimal import Decimal

import pytest

from llmaz.apis.quantity import QuantityError, canonical_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        (4, Decimal(4)),
        ("500m", Decimal("0.5")),
        ("1Ki", Decimal(1024)),
        ("1.5Gi", Decimal(1610612736)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("+.5", Decimal("0.5")),
        ("-1M", Decimal(-1_000_000)),
    ],
)
def test_parse_gives_the_exact_value(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "1Gb", "abc", "1 Gi"])
def test_parse_rejects_malformed_text(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("5", "5"),
        ("10", "10"),
        (10, "10"),
        ("1000", "1k"),
        ("0.5", "500m"),
        ("1.5", "1500m"),
        ("8Gi", "8Gi"),
        ("2048Mi", "2Gi"),
        ("1.5Gi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("0", "0"),
        ("100m", "100m"),
    ],
)
def test_canonical_form_matches_apimachinery(text: str | int, canonical: str) -> None:
    assert canonical_quantity(text) == canonical
