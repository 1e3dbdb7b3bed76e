// Command go-load sends admission reviews at a fixed rate (open loop) over HTTPS and prints each request's
// latency. It is the load generator of the admission benchmark: a Go client spends a small fraction of a core
// at 500 requests/s, so the latencies measured are the webhook server's, not the client's own scheduling.
//
//	go-load -url https://127.0.0.1:9443 -requests reviews.json -rate 500 -seconds 10
//
// reviews.json is a JSON array of {"path": "/mutate-...", "body": {...AdmissionReview...}}; request i sends
// element i modulo its length. The output is one JSON object: {"latencies_ms": [...], "errors": n}, where an
// error is a transport failure, a status other than 200, or a review that is not allowed.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

type request struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

type review struct {
	Response struct {
		Allowed bool `json:"allowed"`
	} `json:"response"`
}

type result struct {
	LatenciesMs []float64 `json:"latencies_ms"`
	Errors      int       `json:"errors"`
}

func main() {
	url := flag.String("url", "", "server base URL, e.g. https://127.0.0.1:9443")
	requestsFile := flag.String("requests", "", "JSON array of {path, body}")
	rate := flag.Float64("rate", 100, "requests per second")
	seconds := flag.Float64("seconds", 10, "duration of the load")
	connections := flag.Int("connections", 16, "keep-alive connections at most, as an API server keeps")
	flag.Parse()

	raw, err := os.ReadFile(*requestsFile)
	if err != nil {
		fail(err)
	}
	var requests []request
	if err := json.Unmarshal(raw, &requests); err != nil || len(requests) == 0 {
		fail(fmt.Errorf("%s: want a non-empty JSON array of {path, body}: %v", *requestsFile, err))
	}

	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			// The server's certificate is self-signed; the cost measured is admission, not verification.
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
			MaxIdleConns:        *connections,
			MaxIdleConnsPerHost: *connections,
			MaxConnsPerHost:     *connections,
			ForceAttemptHTTP2:   false,
		},
	}

	total := int(*rate * *seconds)
	latencies := make([]float64, total)
	failed := make([]bool, total)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < total; i++ {
		due := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := requests[i%len(requests)]
			began := time.Now()
			failed[i] = !send(client, *url+req.Path, req.Body)
			latencies[i] = float64(time.Since(began).Microseconds()) / 1000
		}(i)
	}
	wg.Wait()

	out := result{LatenciesMs: latencies}
	for _, f := range failed {
		if f {
			out.Errors++
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func send(client *http.Client, url string, body []byte) bool {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	var answer review
	return json.Unmarshal(data, &answer) == nil && answer.Response.Allowed
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-load:", err)
	os.Exit(1)
}
