"""Argument rendering: only `{{ .Name }}` is template syntax, and unresolved placeholders are llmaz's error."""

from __future__ import annotations

import pytest

from llmaz.controllers.builders.errors import ArgRenderError
from llmaz.controllers.builders.render import render_arg, render_args

VALUES = {"ModelPath": "/workspace/models/models--a--b", "ModelName": "b"}
SPECULATIVE = {**VALUES, "DraftModelPath": "/workspace/models/models--a--draft"}


@pytest.mark.parametrize(
    ("arg", "rendered"),
    [
        ("{{ .ModelPath }}", "/workspace/models/models--a--b"),
        ("{{.ModelPath}}", "/workspace/models/models--a--b"),
        ("{{   .ModelName\t}}", "b"),
        ("--model={{ .ModelPath }}", "--model=/workspace/models/models--a--b"),
        ("run {{ .ModelPath }};sleep 5", "run /workspace/models/models--a--b;sleep 5"),
        ("{{ .ModelName }}:{{ .ModelPath }}:{{ .ModelName }}", "b:/workspace/models/models--a--b:b"),
        ("{{`{{ .ModelPath }}`}}", "{{`/workspace/models/models--a--b`}}"),
    ],
)
def test_placeholders_are_replaced_wherever_they_appear(arg: str, rendered: str) -> None:
    assert render_arg(arg, VALUES) == rendered


@pytest.mark.parametrize(
    "arg",
    [
        "--host",
        "{{ ModelPath }}",
        "{{ . ModelPath }}",
        "echo ${#var} ${x:-y}",
        "{% if x %}{{ x }}{% endif %}",
        "{# comment #} }} {{",
        "line one\r\nline two\n",
        "",
        "{{ .Model-Path }}",
    ],
)
def test_text_that_is_not_an_llmaz_placeholder_passes_through_unchanged(arg: str) -> None:
    assert render_arg(arg, VALUES) == arg


def test_literal_text_around_placeholders_is_kept_byte_for_byte() -> None:
    arg = "{% raw %} ${#a} {#x#}\r\n {{ .ModelName }} {{ ModelName }} }}"
    assert render_arg(arg, VALUES) == "{% raw %} ${#a} {#x#}\r\n b {{ ModelName }} }}"


@pytest.mark.parametrize(
    ("arg", "values"),
    [
        ("{{ .Unknown }}", VALUES),
        ("--model {{ .ModelPath }} {{ .TP }}", VALUES),
        ("{{ .DraftModelPath }}", VALUES),
        ("{{ .ModelName }}", {**VALUES, "ModelName": ""}),
        ("{{ .items }}", VALUES),
        ("{{ .__class__ }}", VALUES),
        ("{{ .literals }}", VALUES),
    ],
    ids=["unknown", "unknown after known", "draft without draft model", "empty", "dict method", "dunder", "internal"],
)
def test_unknown_or_empty_placeholders_fail_with_the_original_arg(arg: str, values: dict[str, str]) -> None:
    with pytest.raises(ArgRenderError) as caught:
        render_arg(arg, values)
    assert caught.value.message == f"missing flag or the flag has format error: {arg}"
    assert caught.value.arg == arg


def test_draft_model_path_renders_when_a_draft_model_exists() -> None:
    assert render_arg("-md {{ .DraftModelPath }}", SPECULATIVE) == "-md /workspace/models/models--a--draft"


def test_rendering_a_list_keeps_order_and_gives_an_empty_list_for_none() -> None:
    assert render_args(["-m", "{{ .ModelPath }}", "--port", "8080"], VALUES) == [
        "-m",
        "/workspace/models/models--a--b",
        "--port",
        "8080",
    ]
    assert render_args(None, VALUES) == []


def test_the_same_arg_renders_with_different_values_after_caching() -> None:
    assert render_arg("{{ .ModelName }}", {"ModelName": "one"}) == "one"
    assert render_arg("{{ .ModelName }}", {"ModelName": "two"}) == "two"
