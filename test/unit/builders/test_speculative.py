"""Speculative decoding on the default `vllm` and `sglang` BackendRuntimes: a Playground claiming a main and a draft
model renders the engine arguments the release in config/backends accepts, with the draft model's path in them.

Each case names the release its arguments were checked against; the image assertion fails when config/backends moves
to another release, so the expected arguments are checked again then."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmaz.controllers.builders import build_service

from .factories import backend, llama3_2b, llama3_8b, playground

MAIN_PATH = "/workspace/models/models--meta-llama--Meta-Llama-3-8B"
DRAFT_PATH = "/workspace/models/models--meta-llama--Meta-Llama-3-2B"
CLAIMS = {"models": [{"name": "llama3-8b", "role": "main"}, {"name": "llama3-2b", "role": "draft"}]}

# (BackendRuntime, its image in config/backends, the arguments that release accepts for a main and a draft model)
RELEASES: list[tuple[str, str, list[str]]] = [
    (
        "vllm",
        "vllm/vllm-openai:v0.30.0",
        [
            "--model",
            MAIN_PATH,
            "--served-model-name",
            "llama3-8b",
            # --speculative-config since v0.8; v0.8 on refuse v0.7's --speculative_model --num_speculative_tokens.
            "--speculative-config",
            f'{{"model": "{DRAFT_PATH}", "num_speculative_tokens": 5, "method": "draft_model"}}',
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "-tp",
            "1",
        ],
    ),
    (
        "sglang",
        "lmsysorg/sglang:v0.5.19",
        [
            "--model-path",
            MAIN_PATH,
            "--served-model-name",
            "llama3-8b",
            # A separate small draft LLM is the STANDALONE algorithm; with top-k 1, draft tokens are steps + 1.
            "--speculative-algorithm",
            "STANDALONE",
            "--speculative-draft-model-path",
            DRAFT_PATH,
            "--speculative-num-steps",
            "5",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "6",
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
        ],
    ),
]


def speculative_runner(backend_name: str) -> dict[str, Any]:
    pg = playground({"modelClaims": CLAIMS, "backendRuntimeConfig": {"backendName": backend_name}})
    service = build_service(pg, [llama3_8b(), llama3_2b()], backend(backend_name))
    containers = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]["containers"]
    runner: dict[str, Any] = containers[0]
    return runner


@pytest.mark.parametrize(("backend_name", "image", "args"), RELEASES, ids=["vllm-v0.30.0", "sglang-v0.5.19"])
def test_a_main_and_a_draft_model_render_the_speculative_arguments_of_the_release(
    backend_name: str, image: str, args: list[str]
) -> None:
    runner = speculative_runner(backend_name)

    assert runner["image"] == image
    assert runner["args"] == args
    assert runner["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "8", "memory": "16Gi"}}


def test_the_vllm_speculative_config_is_a_json_object_naming_the_draft_model() -> None:
    args = speculative_runner("vllm")["args"]

    config = json.loads(args[args.index("--speculative-config") + 1])

    assert config == {"model": DRAFT_PATH, "num_speculative_tokens": 5, "method": "draft_model"}


@pytest.mark.parametrize("backend_name", ["vllm", "sglang"])
def test_a_single_model_keeps_the_default_config_without_speculative_flags(backend_name: str) -> None:
    pg = playground({"modelClaim": {"modelName": "llama3-8b"}, "backendRuntimeConfig": {"backendName": backend_name}})
    template = build_service(pg, [llama3_8b()], backend(backend_name))["spec"]["workloadTemplate"]["workerTemplate"]

    args = template["spec"]["containers"][0]["args"]

    assert not [arg for arg in args if arg.startswith("--speculative")]
    assert args[1] == MAIN_PATH
