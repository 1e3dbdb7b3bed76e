"""Deleting a Playground takes everything it caused with it, through owner references and the garbage collector."""

from __future__ import annotations

from .support import Environment, ModelNames, eventually, open_model, playground, wait_playground_ready

ELASTIC = {
    "minReplicas": 1,
    "maxReplicas": 3,
    "scaleTrigger": {
        "hpa": {
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ]
        }
    },
}


def test_deleting_a_playground_removes_its_service_lws_pods_lb_service_and_hpa(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("opt")
    e2e.apply([open_model(model), playground("doomed", model, replicas=2, elastic=ELASTIC)], namespace)
    wait_playground_ready(e2e, namespace, "doomed", replicas=2)
    assert e2e.get("hpas", "doomed", namespace) is not None
    assert e2e.get("services", "doomed-lb", namespace) is not None

    e2e.kubectl("delete", "playground", "doomed", "-n", namespace, "--wait=false")

    def all_gone() -> bool:
        left = {
            "Service": e2e.get("services.inference", "doomed", namespace),
            "LeaderWorkerSet": e2e.get("leaderworkersets", "doomed", namespace),
            "StatefulSets": e2e.items("statefulsets", namespace),
            "pods": e2e.items("pods", namespace),
            "-lb Service": e2e.get("services", "doomed-lb", namespace),
            "HPA": e2e.get("hpas", "doomed", namespace),
        }
        remaining = [kind for kind, found in left.items() if found]
        assert not remaining, remaining
        return True

    eventually(all_gone, what="everything the Playground owned to be collected")
