"""What the node-tier serving tests share: the tiny llama in the node's object store, served by a Playground.

The model is the tiny random-weight llama (`llmaz_dev.tinymodel`): its text is meaningless, every step of the
path to it is real.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from llmaz_dev.envtest.node import NodeCluster
from llmaz_dev.envtest.objectstore import ACCESS_KEY_ID, SECRET_ACCESS_KEY, ObjectStore

from .support import Environment, ModelNames, chat_request, eventually, http_request, playground, wait_playground_ready

GATEWAY = "llmaz-gateway"
GATEWAY_NAMESPACE = "llmaz-system"
BUCKET = "models"
KEY = "tiny-llama/tiny-llama.gguf"
ADAPTER_KEY = "tiny-llama/tiny-lora.gguf"
# A LoRA adapter of the prefill-heavy model: its tensors do not fit the tiny model.
OTHER_MODELS_ADAPTER_KEY = "tiny-llama/other-models-lora.gguf"
R = TypeVar("R")


def node_of(e2e: Environment) -> NodeCluster:
    assert isinstance(e2e.cluster, NodeCluster), "the serving tests need the node tier"
    return e2e.cluster


def tiny_llama(name: str, uri: str) -> dict[str, Any]:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": name},
        "spec": {"familyName": "llama", "source": {"uri": uri}},
    }


def served(name: str, model: str, store: ObjectStore | None, replicas: int = 1) -> dict[str, Any]:
    """A llamacpp Playground for `model`, with the object store's endpoint when the model comes from it."""
    document = playground(name, model, replicas=replicas, backend="llamacpp")
    config = document["spec"]["backendRuntimeConfig"]
    config["args"] = ["--alias", model]
    if store is not None:
        config["envs"] = [{"name": "AWS_ENDPOINT_URL", "value": store.url}]
    return document


def credentials() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "aws-access-secret"},
        "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY},
    }


def serve_chat(e2e: Environment, namespace: str, models: ModelNames, store: ObjectStore) -> str:
    """The tiny model from S3 served by Playground `chat`, Ready with one replica; returns the model's name."""
    model = models.new("tiny")
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), served("chat", model, store)], namespace)
    wait_playground_ready(e2e, namespace, "chat", replicas=1)
    return model


def counter(page: str, name: str) -> float:
    """The value of the unlabelled metric `name` on a Prometheus text page."""
    values = [float(line.split()[-1]) for line in page.splitlines() if line.startswith(f"{name} ")]
    assert len(values) == 1, f"{name} not on the page"
    return values[0]


def lb_url(e2e: Environment, namespace: str, name: str) -> str:
    ip = e2e.must_get("services", f"{name}-lb", namespace)["spec"]["clusterIP"]
    return f"http://{ip}:8080"


def chat(url: str, model: str, *, stream: bool = False) -> tuple[int, bytes]:
    return http_request(
        f"{url}/v1/chat/completions",
        method="POST",
        body=chat_request(model, stream=stream),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )


def first_answer(url: str, model: str) -> dict[str, Any]:
    """The first chat completion after the Playground turned Ready: the Service's EndpointSlice and kube-proxy's
    rules follow the pod's readiness by a moment, so connection refusals are waited out, within a bound."""

    def answered() -> tuple[int, bytes] | None:
        try:
            return chat(url, model)
        except OSError:
            return None

    return assert_completion(*eventually(answered, what=f"a first answer from {url}"), model)


def assert_completion(status: int, body: bytes, model: str) -> dict[str, Any]:
    assert status == 200, body[:500]
    answer: dict[str, Any] = json.loads(body)
    assert answer["object"] == "chat.completion", answer
    assert answer["model"] == model, answer
    assert answer["choices"][0]["message"]["role"] == "assistant", answer
    usage = answer["usage"]
    assert usage["prompt_tokens"] > 0, usage
    assert 0 < usage["completion_tokens"] <= 8, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    return answer


# Through llmaz-gateway (installed by config/node)


def gateway_url(e2e: Environment) -> str:
    """The gateway's OpenAI API base URL, by its Service's ClusterIP."""
    ip = e2e.must_get("services", GATEWAY, GATEWAY_NAMESPACE)["spec"]["clusterIP"]
    return f"http://{ip}/v1"


def api_chat(url: str, model: str, timeout: float, content: str = "Hello") -> tuple[int, bytes]:
    """A short chat request for `model` to the OpenAI API at `url` (ending in /v1): the status and the body."""
    return http_request(
        f"{url}/chat/completions",
        method="POST",
        body=chat_request(model, content),
        headers={"Content-Type": "application/json"},
        timeout=timeout,
    )


def gateway_completion(e2e: Environment, request: dict[str, Any]) -> dict[str, Any]:
    """The gateway's answer to chat completion `request`, which must succeed."""
    status, body = http_request(
        f"{gateway_url(e2e)}/chat/completions",
        method="POST",
        body=json.dumps(request).encode(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert status == 200, body[:300]
    answer: dict[str, Any] = json.loads(body)
    return answer


@contextmanager
def gateway_patched(e2e: Environment, patch: Sequence[Mapping[str, object]]) -> Iterator[None]:
    """The node's gateway Deployment changed by a JSON `patch` and rolled out; rolled back afterwards."""
    rollout = ("rollout", "status", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE, "--timeout=120s")
    e2e.kubectl("patch", "deployment", GATEWAY, "-n", GATEWAY_NAMESPACE, "--type=json", "-p", json.dumps(patch))
    try:
        e2e.kubectl(*rollout)
        yield
    finally:
        e2e.kubectl("rollout", "undo", f"deployment/{GATEWAY}", "-n", GATEWAY_NAMESPACE)
        e2e.kubectl(*rollout)
        # The rollout is done once the patched pods are told to stop; until they are gone, a request may still
        # reach one of them through the Service.
        eventually(lambda: _only_current_gateway_pods(e2e), what="the patched gateway pods gone")


def _only_current_gateway_pods(e2e: Environment) -> bool:
    deployment = e2e.must_get("deployments", GATEWAY, GATEWAY_NAMESPACE)
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    pods = e2e.items("pods", GATEWAY_NAMESPACE, selector)
    return len(pods) == deployment["spec"]["replicas"] and not any(p["metadata"].get("deletionTimestamp") for p in pods)


def gateway_chat(e2e: Environment, model: str) -> tuple[int, bytes]:
    """One short chat completion for `model` through the gateway: the status and the body."""
    return api_chat(gateway_url(e2e), model, timeout=30)


def routable(e2e: Environment, model: str) -> None:
    """Wait until the gateway lists `model` and answers for it (it follows the EndpointSlices by a moment)."""

    def answered() -> bool:
        try:
            status, _ = gateway_chat(e2e, model)
        except OSError:
            return False
        return status == 200

    eventually(answered, what=f"the gateway answering for {model}")


def gateway_events(e2e: Environment, namespace: str, playground: str, reason: str) -> list[dict[str, Any]]:
    """The Events of `reason` on Playground `playground` (the gateway's scaling Events among them)."""
    events = e2e.items("events", namespace)
    return [e for e in events if e.get("reason") == reason and e["involvedObject"].get("name") == playground]


@dataclass
class Stream:
    """A streamed chat read to its end on its own thread: when each part arrived, and how it ended."""

    url: str
    model: str
    max_tokens: int
    first_chunk: threading.Event = field(default_factory=threading.Event)
    chunks: int = 0
    done: bool = False
    completion_tokens: int | None = None
    error: str = ""
    ended: float = 0.0

    def run(self) -> None:
        body = chat_request(self.model, stream=True, max_tokens=self.max_tokens)
        request = urllib.request.Request(
            f"{self.url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=120) as response:
                for line in response:
                    if not line.startswith(b"data:"):
                        continue
                    self.chunks += 1
                    self.first_chunk.set()
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        self.done = True
                        break
                    usage = json.loads(data).get("usage")
                    if usage:
                        self.completion_tokens = usage["completion_tokens"]
        except OSError as err:
            self.error = repr(err)
        finally:
            self.ended = time.monotonic()
            self.first_chunk.set()


@dataclass
class Answer:
    sent: float
    """Seconds after the client started."""
    seconds: float
    status: int
    body: bytes


@dataclass
class PacedClient:
    """Sends one short chat for `model` to `url` every `period` seconds, on its own thread, until stopped."""

    url: str
    model: str
    period: float
    answers: list[Answer] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                status, body = api_chat(self.url, self.model, timeout=60)
            except OSError as err:
                status, body = 0, repr(err).encode()
            self.answers.append(Answer(sent - self.started, time.monotonic() - sent, status, body))
            tick += 1
            self._stop.wait(max(0.0, self.started + tick * self.period - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def timeline(self) -> str:
        return "\n".join(f"  t={a.sent:6.2f}s  {a.status}  {a.seconds * 1000:7.1f} ms" for a in self.answers)


@contextmanager
def paced(url: str, model: str, period: float) -> Iterator[PacedClient]:
    client = PacedClient(url, model, period)
    thread = threading.Thread(target=client.run, name="paced-client", daemon=True)
    thread.start()
    try:
        yield client
    finally:
        client.stop()
        thread.join(timeout=90)
        assert not thread.is_alive(), "the client did not stop"


@dataclass
class Streaming:
    """`clients` threads, each streaming answers of `max_tokens` for `model` through `url` one after the other
    until stopped; every stream it ran, and how many are in flight now."""

    url: str
    model: str
    clients: int
    max_tokens: int
    streams: list[Stream] = field(default_factory=list)
    in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def client(self) -> None:
        while not self._stop.is_set():
            stream = Stream(self.url, self.model, self.max_tokens)
            with self._lock:
                self.streams.append(stream)
                self.in_flight += 1
            try:
                stream.run()
            finally:
                with self._lock:
                    self.in_flight -= 1

    def failed(self) -> list[Stream]:
        return [s for s in self.streams if s.error or not s.done]

    def stop(self) -> None:
        self._stop.set()


@contextmanager
def running(load: Streaming) -> Iterator[Streaming]:
    threads = [threading.Thread(target=load.client, name=f"stream-{i}", daemon=True) for i in range(load.clients)]
    for thread in threads:
        thread.start()
    try:
        yield load
    finally:
        load.stop()
        for thread in threads:
            thread.join(timeout=150)
        assert not any(t.is_alive() for t in threads), "a client did not stop"


@dataclass
class Timeline(Generic[R]):
    """`read(at)` every `every` seconds on a thread (`at`: seconds since the start), keeping what it returns. A
    reading the API server fails (slow under the load, or a field not written yet) is skipped."""

    read: Callable[[float], R]
    every: float = 1.0
    readings: list[R] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            with suppress(OSError, RuntimeError, KeyError):
                self.readings.append(self.read(self.now()))
            ticks += 1
            self._stop.wait(max(0.0, self.started + ticks * self.every - time.monotonic()))

    def now(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> None:
        self._stop.set()


@contextmanager
def sampled(read: Callable[[float], R], every: float = 1.0) -> Iterator[Timeline[R]]:
    """A `Timeline` of `read` running for the block."""
    timeline = Timeline(read, every)
    thread = threading.Thread(target=timeline.run, name="timeline", daemon=True)
    thread.start()
    try:
        yield timeline
    finally:
        timeline.stop()
        thread.join(timeout=30)
