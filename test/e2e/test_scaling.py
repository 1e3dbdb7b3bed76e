"""Scaling a Playground: by hand through its scale subresource, and by the HPA its elasticConfig creates."""

from __future__ import annotations

from .support import Environment, ModelNames, eventually, open_model, playground, wait_playground_ready


def test_kubectl_scale_playground_changes_the_service_lws_and_pod_counts(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("opt")
    e2e.apply([open_model(model), playground("chat", model, replicas=1)], namespace)
    wait_playground_ready(e2e, namespace, "chat", replicas=1)

    for replicas in (3, 1):
        e2e.kubectl("scale", "playground", "chat", "-n", namespace, f"--replicas={replicas}")

        wait_playground_ready(e2e, namespace, "chat", replicas)
        assert e2e.must_get("services.inference", "chat", namespace)["spec"]["replicas"] == replicas
        assert e2e.must_get("leaderworkersets", "chat", namespace)["spec"]["replicas"] == replicas


def test_elastic_config_creates_an_hpa_on_the_playground_that_enforces_its_minimum(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("qwen")
    elastic = {
        "minReplicas": 2,
        "maxReplicas": 4,
        "scaleTrigger": {
            "hpa": {
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                    }
                ]
            }
        },
    }
    e2e.apply([open_model(model), playground("elastic", model, replicas=1, elastic=elastic)], namespace)

    hpa = eventually(lambda: e2e.get("hpas", "elastic", namespace), what="HPA")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "name": "elastic",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "Playground"
    # No metrics server: the HPA cannot measure CPU, but it still raises the Playground to minReplicas.
    found = wait_playground_ready(e2e, namespace, "elastic", replicas=2)
    assert found["spec"]["replicas"] == 2
