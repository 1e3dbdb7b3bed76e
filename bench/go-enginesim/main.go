// Command go-enginesim simulates an OpenAI-compatible inference engine for the gateway benchmark: answers whose
// tokens come at a fixed pace, as a real engine's do, at a cost small enough that the gateway in front of it is
// what a benchmark measures.
//
//	go-enginesim -listen 127.0.0.1:8001 -model bench-model -tokens-per-second 30 -tokens 64 -ttft 20ms -slots 256
//
// Endpoints:
//   - POST /v1/chat/completions and /v1/completions: with "stream": true, a server-sent event stream of OpenAI
//     chunks (`chat.completion.chunk` or `text_completion`), one per token, the last carrying finish_reason; then a
//     usage chunk (empty choices) when "stream_options": {"include_usage": true}; then `data: [DONE]`. Otherwise
//     one JSON answer with usage, sent when the last token would have been.
//   - GET /v1/models, GET /health, GET /props (`total_slots`), GET /metrics in llama.cpp's format:
//     `llamacpp:requests_processing` and `llamacpp:requests_deferred` are its live counts of requests holding a
//     slot and waiting for one, `llamacpp:prompt_tokens_total` and `llamacpp:tokens_predicted_total` its totals.
//
// An answer has the request's max_tokens (or max_completion_tokens) tokens, else -tokens. It starts when the
// request gets one of -slots slots (until then it is deferred): its first token is written -ttft later, token i
// at ttft + i / tokens-per-second, on a schedule from that start, so a late write does not delay the next ones.
// A prompt counts one token per 4 bytes of its text. With -stamp, every token chunk also carries
// "sent_unix_ns", the wall-clock time of its write, so a client on the same machine can tell how long each chunk
// took to reach it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

type engine struct {
	model      string
	defTokens  int
	interval   time.Duration // between two tokens of one answer; 0: no pacing
	ttft       time.Duration
	slots      chan struct{}
	totalSlots int
	stamp      bool
	nextID     atomic.Uint64

	processing, deferred     atomic.Int64
	promptTokens, predTokens atomic.Int64
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8001", "address to serve on")
	model := flag.String("model", "bench-model", "the model /v1/models lists (answers name the request's model)")
	tps := flag.Float64("tokens-per-second", 30, "tokens per second of each answer; 0 sends them all at once")
	tokens := flag.Int("tokens", 64, "tokens per answer when the request sets no max_tokens")
	ttft := flag.Duration("ttft", 0, "time from a request's start (its slot) to its first token")
	slots := flag.Int("slots", 4, "requests generated at once; more wait for a slot (llamacpp:requests_deferred)")
	stamp := flag.Bool("stamp", false, `every token chunk carries "sent_unix_ns", the time it was written`)
	flag.Parse()
	if *tps < 0 || *tokens < 1 || *ttft < 0 || *slots < 1 {
		fail(errors.New("-tokens-per-second >= 0, -tokens >= 1, -ttft >= 0 and -slots >= 1"))
	}
	e := &engine{model: *model, defTokens: *tokens, ttft: *ttft, slots: make(chan struct{}, *slots),
		totalSlots: *slots, stamp: *stamp}
	if *tps > 0 {
		e.interval = time.Duration(float64(time.Second) / *tps)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.complete(w, r, false) })
	mux.HandleFunc("GET /v1/models", e.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /props", e.props)
	mux.HandleFunc("GET /metrics", e.metrics)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fail(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		srv.Close() // streams in progress end with their connections
	}()
	fmt.Fprintf(os.Stderr, "go-enginesim: serving %s on %s, %g tokens/s, %d slots\n", *model, ln.Addr(), *tps, *slots)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fail(err)
	}
}

// request is what the simulator reads of a completion request.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Messages            []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt json.RawMessage `json:"prompt"`
}

func (e *engine) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not a JSON object: "+err.Error())
		return
	}
	if !chat && req.Messages != nil {
		writeError(w, http.StatusBadRequest, `"messages" belongs to /v1/chat/completions; /v1/completions takes "prompt"`)
		return
	}
	n, finish := e.defTokens, "stop"
	for _, limit := range []*int{req.MaxTokens, req.MaxCompletionTokens} { // the newer field wins
		if limit != nil {
			if *limit < 1 {
				writeError(w, http.StatusBadRequest, "max_tokens must be at least 1")
				return
			}
			n, finish = *limit, "length"
		}
	}
	prompt := promptTokens(req, chat)
	model := req.Model
	if model == "" {
		model = e.model
	}

	e.deferred.Add(1)
	select {
	case e.slots <- struct{}{}:
		e.deferred.Add(-1)
	case <-r.Context().Done():
		e.deferred.Add(-1)
		return
	}
	e.processing.Add(1)
	defer func() {
		e.processing.Add(-1)
		<-e.slots
	}()
	e.promptTokens.Add(int64(prompt))
	a := answer{e: e, chat: chat, start: time.Now(), id: strconv.FormatUint(e.nextID.Add(1), 10),
		created: strconv.FormatInt(time.Now().Unix(), 10), model: mustJSON(model), n: n, finish: finish,
		prompt: prompt}
	if req.Stream {
		a.stream(w, r.Context(), req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		a.whole(w, r.Context())
	}
}

// answer is one request being generated.
type answer struct {
	e           *engine
	chat        bool
	start       time.Time
	id, created string
	model       []byte // JSON string
	n, prompt   int
	finish      string
	timer       *time.Timer
	buf         []byte
}

// wait until token i is due; false when the client went away first.
func (a *answer) wait(ctx context.Context, i int) bool {
	d := time.Until(a.start.Add(a.e.ttft + time.Duration(i)*a.e.interval))
	if d <= 0 {
		return ctx.Err() == nil
	}
	if a.timer == nil {
		a.timer = time.NewTimer(d)
	} else {
		a.timer.Reset(d)
	}
	select {
	case <-a.timer.C:
		return true
	case <-ctx.Done():
		a.timer.Stop()
		return false
	}
}

var words = []string{" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}

func (a *answer) head() {
	a.buf = append(a.buf[:0], `data: {"id":"`...)
	if a.chat {
		a.buf = append(a.buf, `chatcmpl-`...)
	} else {
		a.buf = append(a.buf, `cmpl-`...)
	}
	a.buf = append(a.buf, a.id...)
	if a.chat {
		a.buf = append(a.buf, `","object":"chat.completion.chunk","created":`...)
	} else {
		a.buf = append(a.buf, `","object":"text_completion","created":`...)
	}
	a.buf = append(a.buf, a.created...)
	a.buf = append(a.buf, `,"model":`...)
	a.buf = append(a.buf, a.model...)
	a.buf = append(a.buf, `,"system_fingerprint":"go-enginesim","choices":`...)
}

// chunk builds token i's event into a.buf.
func (a *answer) chunk(i int) {
	a.head()
	if a.chat {
		a.buf = append(a.buf, `[{"index":0,"delta":{`...)
		if i == 0 {
			a.buf = append(a.buf, `"role":"assistant",`...)
		}
		a.buf = append(a.buf, `"content":"`...)
		a.buf = append(a.buf, words[i%len(words)]...)
		a.buf = append(a.buf, `"},"finish_reason":`...)
	} else {
		a.buf = append(a.buf, `[{"index":0,"text":"`...)
		a.buf = append(a.buf, words[i%len(words)]...)
		a.buf = append(a.buf, `","logprobs":null,"finish_reason":`...)
	}
	if i == a.n-1 {
		a.buf = append(append(append(a.buf, '"'), a.finish...), '"')
	} else {
		a.buf = append(a.buf, `null`...)
	}
	a.buf = append(a.buf, `}]`...)
	if a.e.stamp {
		a.buf = append(a.buf, `,"sent_unix_ns":`...)
		a.buf = strconv.AppendInt(a.buf, time.Now().UnixNano(), 10)
	}
	a.buf = append(a.buf, "}\n\n"...)
}

func (a *answer) usage() []byte {
	return fmt.Appendf(nil, `{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, a.prompt, a.n,
		a.prompt+a.n)
}

func (a *answer) stream(w http.ResponseWriter, ctx context.Context, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	for i := 0; i < a.n; i++ {
		if !a.wait(ctx, i) {
			return
		}
		a.chunk(i)
		if i == a.n-1 { // the end goes with the last token, as an engine sends it
			if includeUsage {
				a.buf = append(a.buf, a.usageEvent()...)
			}
			a.buf = append(a.buf, "data: [DONE]\n\n"...)
		}
		if _, err := w.Write(a.buf); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		a.e.predTokens.Add(1)
	}
}

func (a *answer) usageEvent() []byte {
	saved := a.buf
	a.buf = nil
	a.head()
	event := append(a.buf, `[],"usage":`...)
	event = append(event, a.usage()...)
	event = append(event, "}\n\n"...)
	a.buf = saved
	return event
}

func (a *answer) whole(w http.ResponseWriter, ctx context.Context) {
	if !a.wait(ctx, a.n-1) {
		return
	}
	a.e.predTokens.Add(int64(a.n))
	var text bytes.Buffer
	for i := 0; i < a.n; i++ {
		text.WriteString(words[i%len(words)])
	}
	var choice map[string]any
	object, prefix := "text_completion", "cmpl-"
	if a.chat {
		object, prefix = "chat.completion", "chatcmpl-"
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text.String()},
			"finish_reason": a.finish}
	} else {
		choice = map[string]any{"index": 0, "text": text.String(), "logprobs": nil, "finish_reason": a.finish}
	}
	created, _ := strconv.ParseInt(a.created, 10, 64)
	writeJSON(w, http.StatusOK, map[string]any{"id": prefix + a.id, "object": object, "created": created,
		"model": json.RawMessage(a.model), "system_fingerprint": "go-enginesim", "choices": []any{choice},
		"usage": json.RawMessage(a.usage())})
}

// promptTokens is the prompt's size at one token per 4 bytes of text (at least 1).
func promptTokens(req request, chat bool) int {
	size := 0
	if chat {
		for _, m := range req.Messages {
			size += textSize(m.Content)
		}
	} else {
		size = textSize(req.Prompt)
	}
	return max(1, size/4)
}

// textSize is the bytes of text in a content or prompt field: a string, a list of strings, or a list of parts
// with "text"; a list of token ids counts 4 bytes a token.
func textSize(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(s)
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return 0
	}
	size := 0
	for _, item := range items {
		var part struct {
			Text string `json:"text"`
		}
		var id int
		switch {
		case json.Unmarshal(item, &s) == nil:
			size += len(s)
		case json.Unmarshal(item, &id) == nil:
			size += 4
		case json.Unmarshal(item, &part) == nil:
			size += len(part.Text)
		}
	}
	return size
}

func (e *engine) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": e.model, "object": "model", "created": time.Now().Unix(), "owned_by": "llamacpp"}}})
}

func (e *engine) props(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"total_slots": e.totalSlots, "model_alias": e.model,
		"endpoint_slots": false, "endpoint_props": true, "endpoint_metrics": true})
}

func (e *engine) metrics(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	item := func(name, kind, help string, value int64) {
		fmt.Fprintf(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %d\n", name, help, name, kind, name,
			value)
	}
	item("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens",
		e.promptTokens.Load())
	item("tokens_predicted_total", "counter", "Number of generation tokens processed", e.predTokens.Load())
	item("requests_processing", "gauge", "Number of requests processing", e.processing.Load())
	item("requests_deferred", "gauge", "Number of requests deferred", e.deferred.Load())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write(b.Bytes())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(mustJSON(v))
}

func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": message,
		"type": "invalid_request_error"}})
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	return data
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-enginesim:", err)
	os.Exit(1)
}
