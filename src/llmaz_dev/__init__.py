"""Development tooling for llmaz: nothing here ships.

- `envtest`: real clusters for tests and `make run` (a control plane, a simulated cluster, one real node);
- `testing`: test helpers (a clock a test steps, an in-memory informer, local servers, the tiny model);
- `crdgen`, `rbacgen`, `webhookgen`, `chartgen`: the generators of config/ and chart/ (`make manifests`).

It imports llmaz; llmaz never imports it. The wheel and the images hold `llmaz` alone.
"""
