"""Replicas on demand: scale from zero for a request, to zero when idle, and the `-lb` activator."""
