module llmaz.local/bench/go-load

go 1.25.0
