module llmaz.local/bench/go-enginesim

go 1.25.0
