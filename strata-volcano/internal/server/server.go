// Package server serves a replica's /healthz, /readyz and /metrics (Volcano's own scheduler
// metrics and strata-volcano's, from the default Prometheus registry).
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Probes answer "" when healthy or ready, else why not.
type Probes struct {
	Live  func() string
	Ready func(ctx context.Context) string
}

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
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { answer(w, p.Ready(r.Context())) })
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
