"""Kubernetes resource quantities: parsing for comparison, and the canonical text apimachinery prints.

Only what llmaz needs: exact comparison (`limit >= request`) and rendering a quantity in canonical form for error
messages (`limit (5) for cpu ...`). Values are exact `Decimal`s, never floats.
"""

from __future__ import annotations

import re
from decimal import Decimal

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SPLIT_RE = re.compile(r"^([+-]?[0-9.]+)(.*)$")


class QuantityError(ValueError):
    pass


def is_quantity(text: str) -> bool:
    return _QUANTITY_RE.match(text) is not None


def parse_quantity(value: str | int) -> Decimal:
    """The exact numeric value of a quantity (`"1Gi"` -> 1073741824, `"500m"` -> 0.5)."""
    if isinstance(value, int):
        return Decimal(value)
    text = value.strip()
    if not is_quantity(text):
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    match = _SPLIT_RE.match(text)
    if match is None:  # unreachable after the pattern check; kept for the type checker
        raise QuantityError(f"invalid quantity {value!r}")
    number, suffix = match.groups()
    if suffix in _BINARY:
        return Decimal(number) * _BINARY[suffix]
    if suffix in _DECIMAL:
        return Decimal(number).scaleb(_DECIMAL[suffix])
    return Decimal(number).scaleb(int(suffix[1:]))


def canonical_quantity(value: str | int) -> str:
    """The text apimachinery's Quantity.String() gives, for the formats llmaz users write.

    Binary suffixes stay binary when the value is a whole multiple of 1024 (`2048Mi` -> `2Gi`); everything else is
    rendered with the largest decimal suffix that keeps it whole (`1000` -> `1k`, `0.5` -> `500m`).
    """
    exact = parse_quantity(value)
    if isinstance(value, str) and value.strip()[-2:] in _BINARY and exact == exact.to_integral_value():
        return _canonical_binary(int(exact))
    return _canonical_decimal(exact)


def _canonical_binary(number: int) -> str:
    if number == 0:
        return "0"
    suffix = ""
    for name in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if number % 1024 != 0 or abs(number) < 1024:
            break
        number //= 1024
        suffix = name
    return f"{number}{suffix}"


def _canonical_decimal(exact: Decimal) -> str:
    if exact == 0:
        return "0"
    # Quantities keep at most three fractional digits (milli); smaller values round up as apimachinery does.
    milli = (exact * 1000).to_integral_value(rounding="ROUND_CEILING")
    exponent = -3
    for step_exponent in (0, 3, 6, 9, 12, 15, 18):
        if milli % (10 ** (step_exponent + 3)) != 0:
            break
        exponent = step_exponent
    number = int(milli) // 10 ** (exponent + 3)
    suffix = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}[exponent]
    return f"{number}{suffix}"
