"""llmaz-gateway: one OpenAI-compatible endpoint for every model llmaz serves, in three parts.

- `proxy`: the data path. The HTTP server and its request handler (`proxy.server`, read it top to bottom), API
  keys, the request body, OpenAI errors, forwarding to an engine, token usage and metrics.
- `routing`: which models are served and where. The catalog over the shared informers, the pure routing rules,
  the one count of requests in flight (`routing.inflight`), the engines' load, and the one scheduler that chooses
  an endpoint by them (`routing.scheduler`: filters, weighted scorers, a picker), configured per strategy
  (`routing.picker`: least outstanding, or prefix-aware by the request's `routing.prefix` key).
- `scaling`: replicas on demand. Waking a model (`scaling.waker`: it only scales), and two controllers on the
  runtime's controller machinery, keyed per Playground: idle detection and the `-lb` activator for direct
  clients of a sleeping Playground.

Imports point one way: `proxy` uses `routing` and `scaling`, `scaling` uses `routing`, and none of them the
other way (test/unit/test_architecture.py). A request travels:

    client --POST /v1/chat/completions {"model": "m", ...}-->  proxy.server.Gateway (aiohttp)
      --> proxy.auth             Bearer key, when keys are configured (401)
      --> proxy.body             size and time bounds, JSON object, the model name (400/408/413)
      --> routing.catalog        model -> `-lb` Services -> ready endpoints, from shared informers (404);
                                 a LoRA adapter -> its base model's endpoints that hold it (`routing.adapters`)
      --> routing.inflight       counted in flight until the answer ends (metrics, idle detection, balancing)
      --> scaling.waker          no ready endpoint: a replica is asked for, then routing is waited on (503/504)
      --> routing.scheduler      the Playground's strategy (`routing.picker`): fewest in flight, or prefix-aware
      --> proxy.forwarding       forward, retry elsewhere before the first byte, relay chunk by chunk (502/504)
      --> proxy.metrics, usage   counts, latencies and token usage, per model

The gateway reads only llmaz's API objects and EndpointSlices (`llmaz.apis` is its contract with the
controllers): it never calls into the controllers.
"""
