"""Client-side rate limiting: one token bucket per resource, as controller-runtime has one REST client per kind."""

from __future__ import annotations

import pytest

from llmaz.runtime.client import RestConfig
from llmaz.runtime.client._transport import Transport, limiter_key
from llmaz_dev.testing.clock import FakeClock


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/api/v1/pods", "v1/pods"),
        ("/api/v1/namespaces/default/pods/web-0", "v1/pods"),
        ("/api/v1/namespaces/default/pods/web-0/status", "v1/pods"),
        ("/api/v1/namespaces", "v1/namespaces"),
        ("/api/v1/namespaces/default", "v1/namespaces"),
        (
            "/apis/inference.llmaz.io/v1alpha1/namespaces/ns/playgrounds/pg/status",
            "inference.llmaz.io/v1alpha1/playgrounds",
        ),
        ("/apis/llmaz.io/v1alpha1/openmodels/m", "llmaz.io/v1alpha1/openmodels"),
        ("/apis/inference.llmaz.io/v1alpha1/namespaces/ns/services", "inference.llmaz.io/v1alpha1/services"),
        ("/api/v1/namespaces/ns/services", "v1/services"),
        ("/version", ""),
        ("/apis", ""),
        ("/api/v1", ""),
    ],
)
def test_a_request_is_limited_by_the_bucket_of_the_resource_it_addresses(path: str, key: str) -> None:
    assert limiter_key(path) == key


def test_one_busy_resource_does_not_throttle_another() -> None:
    transport = Transport(RestConfig(host="http://127.0.0.1:1", qps=10, burst=2), FakeClock())
    playgrounds = "/apis/inference.llmaz.io/v1alpha1/namespaces/ns/playgrounds"
    assert [transport.bucket_for(f"{playgrounds}/pg-{i}").reserve() for i in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    assert transport.bucket_for("/api/v1/namespaces/ns/services/pg-lb").reserve() == 0.0
    assert transport.bucket_for(f"{playgrounds}/pg-0/status").reserve() == pytest.approx(0.2)
