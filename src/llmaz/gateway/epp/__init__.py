"""The Endpoint Picker (EPP) of the Gateway API Inference Extension: llmaz's routing behind any GIE gateway.

A gateway such as Envoy calls it over gRPC (Envoy's external processing service, ext_proc) for each request; it
reads the request's body, asks the same scheduler the proxy asks (`llmaz.gateway.routing.scheduler`) and answers
with the endpoint to send the request to, and its fallbacks. `processor` holds one stream's conversation; `server`
serves it, with gRPC health checks (`health`), on the picker's own gRPC transport over HTTP/2 (`http2`). It is a
sibling of the proxy: it shares the proxy's waker, in-flight count and API keys, and answers with the proxy's
refusals (`llmaz.gateway.proxy.errors`, `auth`), never its server.
"""
