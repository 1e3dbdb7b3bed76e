"""Where a request goes: the served models and their ready endpoints, requests in flight, and the scheduler that
picks an endpoint (`scheduler`: filters, scorers and a picker; the strategies in `balancer` and `picker`)."""
