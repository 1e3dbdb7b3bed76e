"""llmaz controllers: thin reconcilers per kind; all llmaz behaviour lives in the pure `builders` package."""
