"""llmaz's serving features really served on the real node, with the engine's own figures as the evidence."""

from __future__ import annotations

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import BUCKET, KEY, counter, credentials, gateway_completion, routable, served, tiny_llama
from .support import LWS_NAME_LABEL, Environment, ModelNames, http_request, wait_playground_ready

pytestmark = pytest.mark.tier("node")


def test_a_speculative_playground_answers_and_llama_cpp_accepts_the_drafts_of_its_draft_model(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    # The tiny model drafts for itself: at temperature 0 a draft is the main model's own next tokens, so llama.cpp
    # accepts them, which its counters show; the path is what is proven (both models loaded, -md served).
    main, draft = models.new("main"), models.new("draft")
    uri = f"s3://{BUCKET}/{KEY}"
    speculative = served("speculative", main, object_store)
    del speculative["spec"]["modelClaim"]
    speculative["spec"]["modelClaims"] = {"models": [{"name": main, "role": "main"}, {"name": draft, "role": "draft"}]}
    speculative["spec"]["backendRuntimeConfig"]["configName"] = "speculative-decoding"
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(main, uri), tiny_llama(draft, uri), speculative], namespace)
    wait_playground_ready(e2e, namespace, "speculative", replicas=1)
    (pod,) = e2e.items("pods", namespace, f"{LWS_NAME_LABEL}=speculative")
    (engine,) = [c for c in pod["spec"]["containers"] if "-md" in (c.get("args") or [])]
    args = engine["args"]
    assert args[args.index("--spec-type") + 1] == "draft-simple", args

    routable(e2e, main)
    # Greedy (temperature 0): the main model's choice is the draft's, so every draft can be accepted.
    request = {"model": main, "messages": [{"role": "user", "content": "Tell me a story about the sea"}],
               "max_tokens": 32, "temperature": 0}  # fmt: skip
    for _ in range(3):
        gateway_completion(e2e, request)
    status, page = http_request(f"http://{pod['status']['podIP']}:8080/metrics")
    assert status == 200
    metrics = page.decode()
    drafted = counter(metrics, "llamacpp:spec_decode_num_draft_tokens_total")
    accepted = counter(metrics, "llamacpp:spec_decode_num_accepted_tokens_total")
    print(f"\nllama.cpp drafted {drafted:.0f} tokens and accepted {accepted:.0f}")
    assert drafted > 0
    assert accepted > 0
