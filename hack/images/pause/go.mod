module llmaz.local/hack/images/pause

go 1.22
