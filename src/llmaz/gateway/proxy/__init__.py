"""The data path: the HTTP server, what it checks in a request, and how it forwards it and relays the answer."""
