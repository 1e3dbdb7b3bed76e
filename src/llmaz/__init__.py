"""llmaz: Kubernetes controllers and admission webhooks for serving large language models."""

__version__ = "0.1.0"
