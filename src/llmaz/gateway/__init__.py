"""llmaz-gateway: one OpenAI-compatible endpoint for every model llmaz serves.

A request travels:

    client --POST /v1/chat/completions {"model": "m", ...}-->  server.Gateway (aiohttp)
      --> auth.ApiKeys          Bearer key, when keys are configured (401)
      --> body                  size and time bounds, JSON object, the model name (400/408/413)
      --> catalog.Catalog       model -> `-lb` Services -> ready endpoints, from shared informers (404/503)
      --> balancer              the endpoint with the fewest requests in flight
      --> proxy.Proxy           forward, retry elsewhere before the first byte, relay chunk by chunk (502/504)
      --> metrics, usage        counts, latencies and token usage, per model

A model with no ready endpoint whose Playground opted in to scale to zero is woken first (`waker`, rules in
`scaletozero`). Clients that call a sleeping Playground's own `<name>-lb` Service reach the same server on the
activator port, through an EndpointSlice the `activator` loop adds to that Service (rules in `activation`).

`routes` holds the routing rules as pure functions of cached objects; `errors` makes OpenAI error objects.
The gateway reads only llmaz's API objects and EndpointSlices: it never calls into the controllers.
"""
