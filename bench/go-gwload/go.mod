module llmaz.local/bench/go-gwload

go 1.25.0
