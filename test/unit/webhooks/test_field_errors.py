"""Field errors and their aggregate render exactly as apimachinery renders them."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis.validation.field import aggregate, forbidden, go_quote, invalid, required
from llmaz.apis.validation.names import LABEL_FORMAT_MESSAGE, MAX_LENGTH_MESSAGE, dns1123_label_messages, validate_name


def test_forbidden_renders_path_type_and_detail() -> None:
    assert (
        str(forbidden("spec.source", "Source can't be all null")) == "spec.source: Forbidden: Source can't be all null"
    )


def test_required_renders_required_value() -> None:
    assert str(required("spec.a", "needed")) == "spec.a: Required value: needed"


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("qwen", '"qwen"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("line\nbreak\t", '"line\\nbreak\\t"'),
        ("\x01", '"\\x01"'),
        ("日本", '"日本"'),
        (3, "3"),
        (True, "true"),
        (None, "null"),
        (["*.gguf", "a"], '[]string{"*.gguf", "a"}'),
        ([], "[]string{}"),
        ({"b": 1, "a": [2]}, '{"a":[2],"b":1}'),
    ],
)
def test_invalid_renders_the_value_like_apimachinery(value: Any, rendered: str) -> None:
    assert str(invalid("p", value, "d")) == f"p: Invalid value: {rendered}: d"


def test_go_quote_escapes_like_strconv_quote() -> None:
    assert go_quote("a\u200bb") == '"a\\u200bb"'


def test_one_error_aggregates_to_itself_without_brackets() -> None:
    assert aggregate([forbidden("spec", "x")]) == "spec: Forbidden: x"


def test_several_errors_aggregate_in_brackets_in_order() -> None:
    text = aggregate([forbidden("spec", "x"), invalid("metadata.name", "N", "y")])
    assert text == '[spec: Forbidden: x, metadata.name: Invalid value: "N": y]'


def test_repeated_messages_are_shown_once() -> None:
    assert aggregate([forbidden("a", "x"), forbidden("a", "x")]) == "a: Forbidden: x"
    assert aggregate([forbidden("a", "x"), forbidden("b", "y"), forbidden("a", "x")]) == (
        "[a: Forbidden: x, b: Forbidden: y]"
    )


def test_no_errors_aggregate_to_empty_text() -> None:
    assert aggregate([]) == ""


def test_the_label_format_message_is_apimachinerys_with_its_double_space() -> None:
    assert LABEL_FORMAT_MESSAGE == (
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
        "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    )
    assert MAX_LENGTH_MESSAGE == "must be no more than 63 characters"


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("qwen2-0-5b", []),
        ("a", []),
        ("0", []),
        ("a" * 63, []),
        ("a" * 64, [MAX_LENGTH_MESSAGE]),
        ("A" * 64, [MAX_LENGTH_MESSAGE, LABEL_FORMAT_MESSAGE]),
        ("qwen-2-0.5b", [LABEL_FORMAT_MESSAGE]),
        ("Qwen", [LABEL_FORMAT_MESSAGE]),
        ("-a", [LABEL_FORMAT_MESSAGE]),
        ("a-", [LABEL_FORMAT_MESSAGE]),
        ("", [LABEL_FORMAT_MESSAGE]),
        ("a\n", [LABEL_FORMAT_MESSAGE]),
    ],
)
def test_dns1123_label_messages(name: str, messages: list[str]) -> None:
    assert dns1123_label_messages(name) == messages


def test_a_bad_name_is_reported_on_metadata_name_with_its_value() -> None:
    [error] = validate_name({"name": "qwen-2-0.5b"})
    assert str(error) == f'metadata.name: Invalid value: "qwen-2-0.5b": {LABEL_FORMAT_MESSAGE}'


def test_a_generate_name_prefix_is_checked_as_the_name_it_will_become() -> None:
    assert validate_name({"generateName": "model-"}) == []
    assert validate_name({"generateName": "x" * 80}) == []  # cut to fit by the API server
    [error] = validate_name({"generateName": "Model-"})
    assert error.path == "metadata.generateName"
