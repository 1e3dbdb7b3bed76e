"""The manager going away, coming back and failing over: the cluster converges and nothing is lost.

These stop or kill the manager, so they run after every other e2e test (marker `disruptive`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .managers import lease_holder
from .support import Environment, ModelNames, eventually, open_model, playground, wait_playground_ready

pytestmark = pytest.mark.disruptive


@pytest.fixture
def one_replica_afterwards(e2e: Environment) -> Iterator[None]:
    yield
    e2e.manager.scale(1)


def test_changes_made_while_the_manager_is_down_are_reconciled_after_it_restarts(
    e2e: Environment, namespace: str, models: ModelNames, one_replica_afterwards: None
) -> None:
    model = models.new("opt")
    e2e.apply([open_model(model), playground("chat", model, replicas=1)], namespace)
    wait_playground_ready(e2e, namespace, "chat", replicas=1)

    e2e.manager.scale(0)
    # Neither change goes through llmaz's webhooks: the scale subresource, and deleting the LWS (which the
    # garbage collector follows by removing its pods).
    e2e.kubectl("scale", "playground", "chat", "-n", namespace, "--replicas=2")
    e2e.kubectl("delete", "leaderworkerset", "chat", "-n", namespace)
    eventually(lambda: not e2e.pods_of(namespace, "chat"), what="pods of the deleted LWS to be collected")
    e2e.manager.scale(1)

    wait_playground_ready(e2e, namespace, "chat", replicas=2)
    assert e2e.must_get("leaderworkersets", "chat", namespace)["spec"]["replicas"] == 2


def test_with_two_replicas_killing_the_leader_hands_over_to_the_other_and_nothing_is_lost(
    e2e: Environment, namespace: str, models: ModelNames, one_replica_afterwards: None
) -> None:
    model = models.new("opt")
    e2e.manager.scale(2)
    e2e.apply([open_model(model), playground("before", model, replicas=1)], namespace)
    wait_playground_ready(e2e, namespace, "before", replicas=1)
    leader = eventually(lambda: lease_holder(e2e.cluster), what="a leader")

    e2e.manager.kill(leader)
    # Admission keeps working through the surviving replica while leadership changes hands.
    e2e.apply([playground("after", model, replicas=1)], namespace)
    e2e.kubectl("scale", "playground", "before", "-n", namespace, "--replicas=2")

    new_leader = eventually(
        lambda: (holder := lease_holder(e2e.cluster)) and holder != leader and holder, within=90, what="a new leader"
    )
    # A replica's identity starts with its hostname (pod name); locally the survivor is the only candidate.
    assert any(new_leader.startswith(replica) for replica in e2e.manager.replica_identities())
    wait_playground_ready(e2e, namespace, "after", replicas=1)
    wait_playground_ready(e2e, namespace, "before", replicas=2)
