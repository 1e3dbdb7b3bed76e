"""The runtime's HTTP serving parts, shared by the manager's and the gateway's servers.

- `address`: `host:port` bind addresses, IPv6 and dual-stack included;
- `listener`: sockets, TLS and the connection limits every server applies;
- `peek`: a connection's first bytes, looked at without being read;
- `authn`: TokenReview and SubjectAccessReview for the metrics endpoint, with cached decisions;
- `healthz`: `/healthz` and `/readyz` from named checks;
- `metrics_server`: `/metrics`, secure or plain.
"""
