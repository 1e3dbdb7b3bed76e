"""CRD generation from the API models (`make manifests`)."""
