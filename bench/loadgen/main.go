// Command loadgen offers raw HTTP/1.1 requests open loop at a fixed rate over a pool of keep-alive
// connections opened beforehand, and prints every outcome as JSON for bench/store_rate.py to report.
//
// It exists because the Python generator, on the same two cores as the server, cannot offer twice the
// server's saturating rate once that rate is above a few thousand requests a second: it sends its
// requests late or not at all, and the overload under test never happens. Go's standard library is enough:
// the protocol spoken is the small subset the store server answers a probe with (a status line, headers, a
// body of Content-Length bytes), and timing must start at each request's scheduled send, which general
// load tools do not all do.
//
// Input (stdin, JSON): {"addr", "rate", "seconds", "connections", "requests": [raw request, ...], "warmup",
// "honour_retry_after"}.
// Every connection first sends "warmup" (when given) and reads its answer, all before the schedule starts:
// a connection the server has not yet accepted when the load begins would otherwise time its first
// request from the schedule while it waits in the kernel's accept queue.
// Output (stdout, JSON): sent, unsent (every connection busy at the request's time), failures (no answer),
// and per answered request its status and milliseconds from its scheduled send; per sent request how late
// it was sent.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

type config struct {
	Addr        string   `json:"addr"`
	Rate        float64  `json:"rate"`
	Seconds     float64  `json:"seconds"`
	Connections int      `json:"connections"`
	Requests    []string `json:"requests"`
	Warmup      string   `json:"warmup"`
	// HonourRetryAfter: a connection answered 429/503 with Retry-After sends nothing more for that long plus
	// up to half of it again (memsync's store client waits so before it asks again); requests scheduled
	// meanwhile go to the other connections, or are not sent when every one is busy or waiting.
	HonourRetryAfter bool `json:"honour_retry_after"`
}

type result struct {
	Sent      int       `json:"sent"`
	Unsent    int       `json:"unsent"`
	Failures  int       `json:"failures"`
	Statuses  []int     `json:"statuses"`    // per answered request
	Millis    []float64 `json:"millis"`      // per answered request, from its scheduled send
	At        []float64 `json:"at"`          // per answered request: its scheduled send, seconds from the start
	SendLagMs []float64 `json:"send_lag_ms"` // per sent request
	Errors    []string  `json:"errors"`      // the first few failures, for the report
}

type conn struct {
	c net.Conn
	r *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c, bufio.NewReaderSize(c, 16384)}, nil
}

var errClosedBeforeAnswer = errors.New("connection closed before any answer")

// answer is what request reads of one answer.
type answer struct {
	status     int
	closing    bool          // the server closes the connection after it
	retryAfter time.Duration // its Retry-After (whole seconds), 0 without one
}

// request sends raw and reads one whole answer.
func (k *conn) request(raw []byte) (answer, error) {
	var a answer
	if _, err := k.c.Write(raw); err != nil {
		return a, err
	}
	line, err := k.r.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && (err == io.EOF || errors.Is(err, net.ErrClosed)) {
			return a, errClosedBeforeAnswer
		}
		return a, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return a, fmt.Errorf("not an HTTP/1.1 status line: %q", line)
	}
	if a.status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return a, err
	}
	length := 0
	for {
		h, err := k.r.ReadSlice('\n')
		if err != nil {
			return a, err
		}
		if len(h) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(bytes.TrimRight(h, "\r\n"), []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return a, err
			}
		case bytes.EqualFold(name, []byte("connection")):
			a.closing = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("retry-after")):
			if seconds, err := strconv.Atoi(string(value)); err == nil && seconds > 0 {
				a.retryAfter = time.Duration(seconds) * time.Second
			}
		}
	}
	if _, err := k.r.Discard(length); err != nil {
		return a, err
	}
	return a, nil
}

// warm sends raw once on each of the n connections in pool, all at once, and waits for every answer.
func warm(pool chan *conn, n int, raw []byte) error {
	errs := make(chan error, n)
	conns := make([]*conn, n)
	for i := range conns {
		conns[i] = <-pool
		go func(k *conn) {
			a, err := k.request(raw)
			if err == nil && a.closing {
				err = errors.New("the server closed a connection in the warm-up")
			}
			errs <- err
		}(conns[i])
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	for _, k := range conns {
		pool <- k
	}
	return first
}

func main() {
	var cfg config
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: bad input:", err)
		os.Exit(2)
	}
	if cfg.Rate <= 0 || cfg.Seconds <= 0 || cfg.Connections <= 0 || len(cfg.Requests) == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: rate, seconds and connections must be positive, requests not empty")
		os.Exit(2)
	}
	requests := make([][]byte, len(cfg.Requests))
	for i, r := range cfg.Requests {
		requests[i] = []byte(r)
	}
	idle := make(chan *conn, cfg.Connections)
	for i := 0; i < cfg.Connections; i++ {
		k, err := dial(cfg.Addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: connect:", err)
			os.Exit(1)
		}
		idle <- k
	}
	if cfg.Warmup != "" {
		if err := warm(idle, cfg.Connections, []byte(cfg.Warmup)); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: warm-up:", err)
			os.Exit(1)
		}
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	res := result{Statuses: []int{}, Millis: []float64{}, At: []float64{}, SendLagMs: []float64{}, Errors: []string{}}
	var start time.Time
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

	one := func(k *conn, raw []byte, scheduled time.Time) {
		defer wg.Done()
		lag := time.Since(scheduled)
		a, err := k.request(raw)
		if errors.Is(err, errClosedBeforeAnswer) {
			// the server closed a keep-alive connection that sat idle (or said it would): as any HTTP client
			// does, send again on a new one (a request refused this way was never read)
			k.c.Close()
			if k, err = dial(cfg.Addr); err == nil {
				a, err = k.request(raw)
			}
		}
		took := time.Since(scheduled)
		if err != nil || a.closing { // this connection is done: a new one takes its place in the pool
			if k != nil {
				k.c.Close()
			}
			if fresh, derr := dial(cfg.Addr); derr == nil {
				k = fresh
			} else {
				k = nil
			}
		}
		mu.Lock()
		res.SendLagMs = append(res.SendLagMs, ms(lag))
		if err != nil {
			res.Failures++
			if len(res.Errors) < 10 {
				res.Errors = append(res.Errors, err.Error())
			}
		} else {
			res.Statuses = append(res.Statuses, a.status)
			res.Millis = append(res.Millis, ms(took))
			res.At = append(res.At, scheduled.Sub(start).Seconds())
		}
		mu.Unlock()
		switch {
		case k == nil:
		case cfg.HonourRetryAfter && a.retryAfter > 0 && (a.status == 429 || a.status == 503):
			wait := a.retryAfter + time.Duration(rand.Int64N(int64(a.retryAfter/2)+1))
			time.AfterFunc(wait, func() { idle <- k })
		default:
			idle <- k
		}
	}

	total := int(cfg.Rate * cfg.Seconds)
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	start = time.Now()
	for i := 0; i < total; i++ {
		scheduled := start.Add(time.Duration(i) * interval)
		if wait := time.Until(scheduled); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case k := <-idle:
			res.Sent++
			wg.Add(1)
			go one(k, requests[i%len(requests)], scheduled)
		default:
			res.Unsent++ // the generator's own limit: counted, never hidden
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		fmt.Fprintln(os.Stderr, "loadgen: answers still missing after 120 s")
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(&res); err != nil {
		os.Exit(1)
	}
}
