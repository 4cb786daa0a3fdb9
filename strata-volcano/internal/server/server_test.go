package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var testCounter = promauto.NewCounter(prometheus.CounterOpts{Name: "strata_volcano_server_test", Help: "a test's"})

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestProbes(t *testing.T) {
	tests := []struct {
		name        string
		live, ready string
		path        string
		status      int
		body        string
	}{
		{"healthy", "", "", "/healthz", 200, "ok\n"},
		{"ready", "", "", "/readyz", 200, "ok\n"},
		{"dead, with the reason", "the sidecar has not answered /healthz for 20 s", "", "/healthz", 503, "the sidecar has not answered /healthz for 20 s\n"},
		{"a dead replica may be ready", "no scheduling cycle for 130 s", "", "/readyz", 200, "ok\n"},
		{"unready, with the reason", "", "catching up: version 3 of the log's end 9 at start", "/readyz", 503, "catching up: version 3 of the log's end 9 at start\n"},
		{"an unready replica is alive", "", "sidecar: waiting for Pod to be SYNCED", "/healthz", 200, "ok\n"},
		{"no such path", "", "", "/nope", 404, "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Handler(Probes{Live: func() string { return tt.live }, Ready: func() string { return tt.ready }})
			status, body := get(t, h, tt.path)
			if status != tt.status || body != tt.body {
				t.Errorf("%s: %d %q, want %d %q", tt.path, status, body, tt.status, tt.body)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	testCounter.Add(3)
	h := Handler(Probes{Live: func() string { return "" }, Ready: func() string { return "" }})
	status, body := get(t, h, "/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{"strata_volcano_server_test 3", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// A probe that hangs (it must not, but if it did) holds only its own request: the others
// answer, and Serve stops with its context.
func TestASlowProbeBlocksNoOtherEndpoint(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Serve(ctx, "127.0.0.1", 0, Handler(Probes{
		Live:  func() string { <-release; return "" },
		Ready: func() string { return "" },
	}))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	go func() { _, _ = client.Get("http://" + addr + "/healthz") }()
	time.Sleep(20 * time.Millisecond)
	for _, path := range []string{"/readyz", "/metrics"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s while /healthz hangs: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/readyz"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still serving after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReplicaLive(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	stale := 2*time.Minute + 10*time.Second
	tests := []struct {
		name    string
		failure error
		dead    string
		beat    time.Time
		status  int
		body    string
	}{
		{"before the loop", nil, "", time.Time{}, 200, "ok\n"},
		{"a recent cycle", nil, "", now.Add(-stale), 200, "ok\n"},
		{"no cycle on a snapshot for too long", nil, "", now.Add(-stale - 5*time.Second), 503, "no scheduling cycle on a snapshot for 135 s\n"},
		{"the sidecar is dead", nil, "the sidecar has not answered /healthz for 20 s: refused", now, 503, "the sidecar has not answered /healthz for 20 s: refused\n"},
		{"the log reader stopped", errors.New("a gap at offset 9"), "stalled", now, 503, "the cache stopped following the log: a gap at offset 9\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Replica{
				Failure:  func() error { return tt.failure },
				Dead:     func() string { return tt.dead },
				LastBeat: func() time.Time { return tt.beat },
				Stale:    stale,
				Now:      func() time.Time { return now },
			}
			status, body := get(t, Handler(r.Probes()), "/healthz")
			if status != tt.status || body != tt.body {
				t.Errorf("/healthz: %d %q, want %d %q", status, body, tt.status, tt.body)
			}
		})
	}
}

// /readyz says the first reason not to be ready, until none is left; then it stays ready.
func TestReplicaReady(t *testing.T) {
	store, side := "catching up: version 3 of the log's end 9 at start", "the sidecar has not been asked yet"
	r := &Replica{NotReady: []func() string{func() string { return store }, func() string { return side }}}
	h := Handler(r.Probes())
	for _, step := range []struct {
		store, side string
		status      int
		body        string
	}{
		{store, side, 503, store + "\n"},
		{"", side, 503, side + "\n"},
		{"", "", 200, "ok\n"},
		{"the cache stopped following the log: boom", "sidecar: waiting", 200, "ok\n"},
	} {
		store, side = step.store, step.side
		if status, body := get(t, h, "/readyz"); status != step.status || body != step.body {
			t.Errorf("store %q, sidecar %q: /readyz %d %q, want %d %q", step.store, step.side, status, body, step.status, step.body)
		}
	}
}

// The probes are answered concurrently (one goroutine per request) while the replica changes
// underneath: under -race, any plain shared variable among them is reported.
func TestReplicaProbesConcurrently(t *testing.T) {
	var reason atomic.Pointer[string]
	notYet, none := "catching up", ""
	reason.Store(&notYet)
	r := &Replica{
		Failure:  func() error { return nil },
		Dead:     func() string { return "" },
		LastBeat: time.Now,
		Stale:    time.Minute,
		NotReady: []func() string{func() string { return *reason.Load() }},
	}
	h := Handler(r.Probes())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				for _, path := range []string{"/readyz", "/healthz"} {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				}
			}
		}()
		if i == 4 {
			reason.Store(&none)
		}
	}
	wg.Wait()
	if status, _ := get(t, h, "/readyz"); status != 200 {
		t.Errorf("/readyz %d once nothing is left to wait for", status)
	}
}

// MarkReady (the replica's own wait for the store and the sidecar ended) makes it ready at once,
// whatever the last polled reasons still say.
func TestReplicaMarkReady(t *testing.T) {
	r := &Replica{NotReady: []func() string{func() string { return "sidecar: waiting for Pod to be SYNCED" }}}
	h := Handler(r.Probes())
	if status, _ := get(t, h, "/readyz"); status != 503 {
		t.Fatalf("/readyz %d before", status)
	}
	r.MarkReady()
	if status, body := get(t, h, "/readyz"); status != 200 {
		t.Errorf("/readyz %d %q after MarkReady", status, body)
	}
}
