"""What `make run` prints once its demo model answers: the pool a GIE gateway routes to, in a route that applies."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import yaml

from llmaz_dev.envtest.devrun import _node_instructions

ANSWER = {"choices": [{"message": {"content": "some  words"}}], "usage": {"completion_tokens": 2}}
CLUSTER = SimpleNamespace(kubeconfig=Path("/tmp/kubeconfig"), kubectl_path=Path("/bin/kubectl"))


def _route(text: str) -> dict[str, object]:
    """The HTTPRoute between the printed heredoc's markers."""
    lines = text.splitlines()
    start = lines.index("  kubectl apply -f - <<'EOF'") + 1
    end = lines.index("  EOF", start)
    route: dict[str, object] = yaml.safe_load(textwrap.dedent("\n".join(lines[start:end])))
    return route


def test_the_printed_route_names_the_demos_inference_pool_and_the_picker_address_is_given() -> None:
    text = _node_instructions(CLUSTER, "http://10.96.0.5:8080", ANSWER, "10.96.0.9:9002")
    route = _route(text)
    assert route["kind"] == "HTTPRoute"
    assert route["metadata"] == {"name": "tiny-llama", "namespace": "default"}
    spec = route["spec"]
    assert isinstance(spec, dict)
    (rule,) = spec["rules"]
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "tiny-llama"}
    assert rule["backendRefs"] == [pool]
    assert "default/llmaz-epp, 10.96.0.9:9002" in text
    assert "its ext_proc filter asks 10.96.0.9:9002" in text
    assert text.rstrip().endswith("restores the host."), "Ctrl-C's line stays the last"


def test_without_a_pool_nothing_about_gie_gateways_is_printed() -> None:
    text = _node_instructions(CLUSTER, "http://10.96.0.5:8080", ANSWER)
    assert "InferencePool" not in text
    assert "HTTPRoute" not in text
