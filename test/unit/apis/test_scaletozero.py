"""The scale-to-zero idle time: one duration grammar (`llmaz.apis.duration`), a minimum, and errors that say what
is accepted."""

from __future__ import annotations

import pytest

from llmaz.apis import constants as c
from llmaz.apis.scaletozero import idle_after, parse_idle_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300", 300.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2h", 7200.0),
        ("1m10s", 70.0),
        ("10", 10.0),
        ("1.5m", 90.0),  # Go duration text, as every other duration llmaz reads
        (" 5m ", 300.0),
    ],
)
def test_durations_in_seconds_or_units(text: str, seconds: float) -> None:
    assert parse_idle_time(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not a duration"),
        ("5 minutes", "not a duration"),
        ("-5m", "not a duration"),
        ("nan", "not a duration"),
        ("inf", "not a duration"),
        ("9s", "shorter than the minimum, 10s"),
        ("0", "shorter than the minimum"),
        ("500ms", "shorter than the minimum"),
    ],
)
def test_bad_durations_say_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_idle_time(text)


def test_only_annotated_playgrounds_opt_in_and_a_bad_value_names_the_annotation() -> None:
    def pg(after: str | None) -> dict[str, object]:
        annotations = {} if after is None else {c.SCALE_TO_ZERO_AFTER_ANNOTATION: after}
        return {"metadata": {"name": "p", "annotations": annotations}}

    assert idle_after(pg(None)) is None
    assert idle_after(pg("2m")) == 120.0
    with pytest.raises(ValueError, match=r"annotation llmaz\.io/scale-to-zero-after: 'soon' is not a duration"):
        idle_after(pg("soon"))
