"""Where a request goes: the served models and their ready endpoints, requests in flight, and the endpoint picker."""
