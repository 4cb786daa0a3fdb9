// Package server serves a replica's /healthz, /readyz and /metrics (Volcano's own scheduler
// metrics and strata-volcano's, from the default Prometheus registry).
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Probes answer "" when healthy or ready, else why not. They are called on every probe and
// must not wait: read what another goroutine last learnt (an atomic), never take a lock a
// build holds or ask the sidecar.
type Probes struct {
	Live  func() string
	Ready func() string
}

// Replica is what a replica's probes read, every part lock-free: the store's failure, the
// sidecar watchdog's verdict, the loop's heartbeat, and the reasons not to be ready yet.
type Replica struct {
	Failure  func() error     // why the log reader stopped, or nil
	Dead     func() string    // why the sidecar is dead or stalled, or ""
	LastBeat func() time.Time // the end of the last cycle on a snapshot (zero before the loop)
	Stale    time.Duration    // how long without a beat the replica is dead
	NotReady []func() string  // in order: the first reason not to be ready yet
	Now      func() time.Time // default time.Now

	ready atomic.Bool // readiness only goes up, as Strata's other components'
}

// Live is "" while the replica is alive, else why it is not.
func (r *Replica) Live() string {
	if err := r.Failure(); err != nil {
		return "the cache stopped following the log: " + err.Error()
	}
	if dead := r.Dead(); dead != "" {
		return dead
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if beat := r.LastBeat(); !beat.IsZero() && now().Sub(beat) > r.Stale {
		return fmt.Sprintf("no scheduling cycle on a snapshot for %.0f s", now().Sub(beat).Seconds())
	}
	return ""
}

// Ready is "" once the replica has been ready (it stays so), else why it is not yet.
func (r *Replica) Ready() string {
	if r.ready.Load() {
		return ""
	}
	for _, reason := range r.NotReady {
		if why := reason(); why != "" {
			return why
		}
	}
	r.ready.Store(true)
	return ""
}

// MarkReady makes the replica ready from now on: its own wait for the store and the sidecar
// (a fresh answer) has just ended, sooner than the watchdog's next poll would tell.
func (r *Replica) MarkReady() { r.ready.Store(true) }

// Probes are the replica's.
func (r *Replica) Probes() Probes { return Probes{Live: r.Live, Ready: r.Ready} }

// Handler is the replica's HTTP mux.
func Handler(p Probes) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	answer := func(w http.ResponseWriter, reason string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, reason)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { answer(w, p.Live()) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { answer(w, p.Ready()) })
	return mux
}

// Serve listens on host:port (port 0: any free one) and returns the bound address.
func Serve(ctx context.Context, host string, port int, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return "", fmt.Errorf("listening for /healthz, /readyz, /metrics: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr().String(), nil
}
