// Command go-gwload is the load generator of the gateway benchmark: closed-loop chat completions against two
// subjects, an engine called directly and the same engine through llmaz-gateway, in alternating blocks, and
// each request's time to first body byte and total time.
//
//	go-gwload -direct http://127.0.0.1:8001 -gateway http://127.0.0.1:8000 -model m -concurrency 50 \
//	    -requests 2000 -blocks 4 -block-seconds 60
//
// A level runs 2 x blocks blocks, the subjects in the order direct, gateway, gateway, direct, direct, ... (ABBA,
// so a drift in the machine's load falls on both alike). In a block, `concurrency` workers send requests back to
// back until the block has sent `requests` or `block-seconds` have passed; request i of a block is a streaming
// chat completion when i is even, a plain one when it is odd. Before a block is timed, every worker sends one
// request of each kind that is not counted, so no timed request opens a connection (the gateway's pooled
// engine connections may have expired while the other subject ran).
//
// Times are taken around the whole exchange: from before the request is written to the first body bytes read
// (TTFB; for a stream, the first event) and to the end of the body. A request counts as an error (and gives no
// sample) when it fails, answers a status other than 200, or its body is not complete: a stream must end with
// the `data: [DONE]` event, a plain answer must be a chat completion.
//
// Output on stdout, one JSON object: {"blocks": [{"subject", "seconds", "errors", "kind": [0 stream | 1 plain],
// "ttfb_us": [...], "total_us": [...]}]}. Progress goes to stderr, one line per block.
//
// With -mode stream, every request is a chat completion stream of -tokens tokens (its max_tokens) from an engine
// that paces its tokens and stamps each chunk with the time it wrote it (go-enginesim -stamp):
//
//	go-gwload -mode stream -direct ... -gateway ... -model m -concurrency 200 -tokens 64 -stagger 2.15s \
//	    -blocks 4 -block-seconds 15
//
// The workers start -stagger / concurrency apart, then each sends streams back to back until -block-seconds have
// passed; the streams in progress then finish and count. With -stagger one stream's duration, streams begin at an
// even rate and their chunks are spread in time, as independent users' are; with no stagger, every round of
// streams begins in the same instant. Per stream: TTFB (to the first
// token's event) and total time; per token chunk, its delay: the time it was read here minus the time the engine
// wrote it ("sent_unix_ns", the same machine's clock). A stream that fails, answers other than 200, lacks a chunk
// or a stamp, or does not end with `data: [DONE]` is an error. Blocks also carry "streams", "chunk_delay_us": [...]
// and "cpu_seconds", this process's own CPU time during the block.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	stream = 0
	plain  = 1
)

type block struct {
	Subject string  `json:"subject"`
	Seconds float64 `json:"seconds"`
	Errors  int     `json:"errors"`
	Kind    []int   `json:"kind"`
	TTFBus  []int64 `json:"ttfb_us"`
	TotalUs []int64 `json:"total_us"`
	// -mode stream only
	Streams      int     `json:"streams,omitempty"`
	ChunkDelayUs []int64 `json:"chunk_delay_us,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
}

type sample struct {
	kind         int
	ttfb, total  time.Duration
	ok, recorded bool
}

type subject struct {
	name string
	url  string
}

func main() {
	direct := flag.String("direct", "", "the engine's base URL")
	gateway := flag.String("gateway", "", "the gateway's base URL")
	model := flag.String("model", "", "the model to name in each request")
	concurrency := flag.Int("concurrency", 1, "requests in flight (workers sending back to back)")
	requests := flag.Int("requests", 1000, "timed requests per block")
	blocks := flag.Int("blocks", 4, "blocks per subject")
	blockSeconds := flag.Float64("block-seconds", 60, "longest a block may run (-mode stream: how long it runs)")
	mode := flag.String("mode", "mixed", "mixed: streams and plain answers from a fast engine; stream: paced streams")
	tokens := flag.Int("tokens", 64, "-mode stream: tokens per stream (its max_tokens)")
	stagger := flag.Duration("stagger", 0, "-mode stream: the workers' starts are spread over this time")
	flag.Parse()
	if *direct == "" || *gateway == "" || *model == "" || *concurrency < 1 || *requests < 1 || *blocks < 1 ||
		*tokens < 1 || *stagger < 0 {
		fail(fmt.Errorf("-direct, -gateway and -model are required; -concurrency, -requests, -blocks, -tokens >= 1"))
	}
	if *mode != "mixed" && *mode != "stream" {
		fail(fmt.Errorf("-mode is mixed or stream, not %q", *mode))
	}

	bodies := [2][]byte{
		mustJSON(map[string]any{"model": *model, "stream": true, "stream_options": map[string]any{"include_usage": true},
			"messages": []any{map[string]any{"role": "user", "content": "Hello!"}}, "max_tokens": 4}),
		mustJSON(map[string]any{"model": *model, "messages": []any{map[string]any{"role": "user", "content": "Hello!"}},
			"max_tokens": 4}),
	}
	client := &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only, whatever the environment names
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: *concurrency + 8, // every worker keeps its connection to each subject
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
	}
	subjects := [2]subject{{"direct", *direct}, {"gateway", *gateway}}
	out := struct {
		Blocks []block `json:"blocks"`
	}{}
	for b := 0; b < 2**blocks; b++ {
		s := subjects[((b+1)/2)%2] // direct, gateway, gateway, direct, direct, gateway, ...
		limit := time.Duration(*blockSeconds * float64(time.Second))
		if *mode == "stream" {
			res := runStreams(client, s.url+"/v1/chat/completions", *model, *tokens, *concurrency, limit, *stagger)
			res.Subject = s.name
			out.Blocks = append(out.Blocks, res)
			fmt.Fprintf(os.Stderr, "[gwload] c=%d block %d/%d %-7s %5d streams in %5.1fs, errors %d, p50 ttfb %.2f ms, "+
				"chunk delay p50 %.2f ms, CPU %.2fs\n", *concurrency, b+1, 2**blocks, s.name, res.Streams, res.Seconds,
				res.Errors, median(res.TTFBus)/1000, median(res.ChunkDelayUs)/1000, res.CPUSeconds)
			continue
		}
		res := run(client, s.url+"/v1/chat/completions", bodies, *concurrency, *requests, limit)
		res.Subject = s.name
		out.Blocks = append(out.Blocks, res)
		fmt.Fprintf(os.Stderr, "[gwload] c=%d block %d/%d %-7s %5d requests in %5.1fs, errors %d, p50 ttfb %.2f ms, total %.2f ms\n",
			*concurrency, b+1, 2**blocks, s.name, len(res.Kind), res.Seconds, res.Errors,
			median(res.TTFBus)/1000, median(res.TotalUs)/1000)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

// run is one block against one subject: warm-up (not timed), then `requests` requests from `workers` workers.
func run(client *http.Client, url string, bodies [2][]byte, workers, requests int, limit time.Duration) block {
	var warm sync.WaitGroup
	for w := 0; w < workers; w++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			send(client, url, bodies[stream], stream)
			send(client, url, bodies[plain], plain)
		}()
	}
	warm.Wait()

	samples := make([]sample, requests)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(limit)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= requests || time.Now().After(deadline) {
					return
				}
				samples[i] = send(client, url, bodies[i%2], i%2)
			}
		}()
	}
	wg.Wait()
	res := block{Seconds: time.Since(start).Seconds()}
	for _, s := range samples {
		if !s.recorded {
			continue // not sent: the block ran out of time
		}
		if !s.ok {
			res.Errors++
			continue
		}
		res.Kind = append(res.Kind, s.kind)
		res.TTFBus = append(res.TTFBus, s.ttfb.Microseconds())
		res.TotalUs = append(res.TotalUs, s.total.Microseconds())
	}
	return res
}

var (
	doneEvent  = []byte("data: [DONE]\n\n")
	completion = []byte(`"chat.completion"`)
)

func send(client *http.Client, url string, body []byte, kind int) sample {
	s := sample{kind: kind, recorded: true}
	began := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	var got bytes.Buffer
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if got.Len() == 0 {
				s.ttfb = time.Since(began)
			}
			got.Write(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return s
		}
	}
	s.total = time.Since(began)
	data := got.Bytes()
	if kind == stream {
		s.ok = resp.StatusCode == http.StatusOK && bytes.HasSuffix(data, doneEvent)
	} else {
		s.ok = resp.StatusCode == http.StatusOK && bytes.Contains(data, completion)
	}
	return s
}

// runStreams is one block of -mode stream against one subject: a warm-up stream per worker (not timed), then
// streams back to back for `limit`.
func runStreams(client *http.Client, url, model string, tokens, workers int, limit, stagger time.Duration) block {
	warmUp := streamBody(model, 1)
	var warm sync.WaitGroup
	for w := 0; w < workers; w++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			sendStream(client, url, warmUp, 1, nil)
		}()
	}
	warm.Wait()

	body := streamBody(model, tokens)
	results := make([]block, workers)
	var wg sync.WaitGroup
	cpu := cpuSeconds()
	start := time.Now()
	deadline := start.Add(limit)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(res *block, offset time.Duration) {
			defer wg.Done()
			time.Sleep(offset)
			for time.Now().Before(deadline) {
				delays := res.ChunkDelayUs
				s := sendStream(client, url, body, tokens, &delays)
				if !s.ok {
					res.Errors++
					continue
				}
				res.ChunkDelayUs = delays
				res.TTFBus = append(res.TTFBus, s.ttfb.Microseconds())
				res.TotalUs = append(res.TotalUs, s.total.Microseconds())
			}
		}(&results[w], stagger*time.Duration(w)/time.Duration(workers))
	}
	wg.Wait()
	res := block{Seconds: time.Since(start).Seconds(), CPUSeconds: cpuSeconds() - cpu}
	for _, r := range results {
		res.Errors += r.Errors
		res.TTFBus = append(res.TTFBus, r.TTFBus...)
		res.TotalUs = append(res.TotalUs, r.TotalUs...)
		res.ChunkDelayUs = append(res.ChunkDelayUs, r.ChunkDelayUs...)
	}
	res.Streams = len(res.TTFBus)
	res.Kind = make([]int, res.Streams) // all streams
	return res
}

func streamBody(model string, tokens int) []byte {
	return mustJSON(map[string]any{"model": model, "stream": true, "max_tokens": tokens,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []any{map[string]any{"role": "user", "content": "Tell me a story."}}})
}

var stampField = []byte(`"sent_unix_ns":`)

// sendStream sends one stream and reads it event by event; each token chunk's delay (read here minus written by
// the engine) is appended to *delays when delays is not nil. The stream is ok with `tokens` stamped chunks and
// `data: [DONE]` at its end.
func sendStream(client *http.Client, url string, body []byte, tokens int, delays *[]int64) sample {
	s := sample{kind: stream, recorded: true}
	began := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	reader := bufio.NewReaderSize(resp.Body, 16*1024)
	chunks, done := 0, false
	for {
		line, err := reader.ReadSlice('\n')
		if len(line) > 0 {
			now := time.Now()
			if bytes.HasPrefix(line, []byte("data: ")) {
				if done { // nothing may follow [DONE]
					return s
				}
				if bytes.Equal(line, []byte("data: [DONE]\n")) {
					done = true
				} else if at := bytes.Index(line, stampField); at >= 0 {
					sent, ok := leadingInt(line[at+len(stampField):])
					if !ok {
						return s
					}
					if chunks == 0 {
						s.ttfb = now.Sub(began)
					}
					chunks++
					if delays != nil {
						*delays = append(*delays, (now.UnixNano()-sent)/1000)
					}
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil { // bufio.ErrBufferFull included: no event of ours is that long
			return s
		}
	}
	s.total = time.Since(began)
	s.ok = resp.StatusCode == http.StatusOK && done && chunks == tokens
	return s
}

func leadingInt(b []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	return n, i > 0
}

// cpuSeconds is this process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func median(values []int64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := append([]int64(nil), values...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return float64(sorted[len(sorted)/2])
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	return data
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-gwload:", err)
	os.Exit(1)
}
