package sidecar

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// One poll's answer at a second of a made-up clock.
type poll struct {
	at       int   // seconds since the first poll
	store    int64 // the binary's store's version
	alive    bool  // /healthz answered 200
	version  int64 // the fold's version (-1: no state: not restored yet, or not asked)
	wantDead string
}

func TestWatchdogJudges(t *testing.T) {
	const grace = 20 * time.Second
	// every 2 s from `from` to `to` seconds: the store at store+rate*t, the fold at fold+frate*t
	run := func(from, to int, store, rate, fold, frate int64, alive bool) []poll {
		var ps []poll
		for s := from; s <= to; s += 2 {
			v := fold + frate*int64(s)
			if fold < 0 {
				v = -1
			}
			ps = append(ps, poll{at: s, store: store + rate*int64(s), alive: alive, version: v})
		}
		return ps
	}
	last := func(ps []poll, dead string) []poll { ps[len(ps)-1].wantDead = dead; return ps }
	tests := []struct {
		name  string
		polls []poll
		ready string // a part of the last ReadyReason ("": ready)
	}{
		{"following the log", run(0, 120, 100, 50, 100, 50, true), ""},
		{"quiet and caught up", run(0, 120, 100, 0, 100, 0, true), ""},
		{"behind but moving (a catch-up)", run(0, 120, 100000, 0, 0, 500, true), ""},
		{
			name: "silent for the grace period",
			polls: append(run(0, 10, 100, 0, 100, 0, true),
				last(append(run(12, 28, 100, 0, -1, 0, false), poll{at: 29, store: 100, version: -1}), "")...), // 19 s silent
			ready: "not answering",
		},
		{
			name:  "silent past the grace period",
			polls: last(append(run(0, 10, 100, 0, 100, 0, true), run(12, 30, 100, 0, -1, 0, false)...), "has not answered /healthz for 20 s: not answering"),
			ready: "not answering",
		},
		{
			name:  "never answered",
			polls: last(run(0, 20, 0, 0, -1, 0, false), "has not answered /healthz for 20 s"),
			ready: "not answering",
		},
		{
			name:  "stalled: the log went on, the fold did not",
			polls: last(append(run(0, 10, 100, 0, 100, 0, true), run(12, 32, 110, 0, 100, 0, true)...), "stalled: at version 100 for 32 s, while this replica's store was at 110 20 s ago"),
		},
		{
			// the store moved at 12 s: the fold is stalled at 32 s (above), not at 30
			name:  "stalled only a grace period after the log moved",
			polls: last(append(run(0, 10, 100, 0, 100, 0, true), run(12, 30, 110, 0, 100, 0, true)...), ""),
		},
		{
			name:  "still restoring: unready, not dead",
			polls: run(0, 120, 5000, 0, -1, 0, true),
			ready: "the sidecar's state: not restored",
		},
		{
			name: "dead stays dead",
			polls: append(last(run(0, 20, 0, 0, -1, 0, false), "has not answered"),
				poll{at: 22, store: 0, alive: true, version: 0, wantDead: "has not answered"}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Watchdog{Grace: grace}
			start := time.Unix(1_700_000_000, 0)
			if w.DeadReason() != "" || w.ReadyReason() == "" {
				t.Fatalf("before any poll: dead %q, ready %q", w.DeadReason(), w.ReadyReason())
			}
			for i, p := range tt.polls {
				var alive, unknown error
				if !p.alive {
					alive, unknown = errors.New("not answering"), errNotAsked
				} else if p.version < 0 {
					unknown = errors.New("not restored")
				}
				h := w.Observe(start.Add(time.Duration(p.at)*time.Second), p.store, alive, State{Version: max(p.version, 0)}, unknown)
				want := p.wantDead
				if want == "" && i < len(tt.polls)-1 && h.Dead != "" {
					t.Fatalf("at %d s: dead too early: %s", p.at, h.Dead)
				}
				if i == len(tt.polls)-1 {
					if want == "" && h.Dead != "" || want != "" && !strings.Contains(h.Dead, want) {
						t.Fatalf("at %d s: dead %q, want %q", p.at, h.Dead, want)
					}
					if w.DeadReason() != h.Dead {
						t.Errorf("DeadReason %q, the poll's %q", w.DeadReason(), h.Dead)
					}
				}
			}
			got := w.ReadyReason()
			if tt.ready == "" && got != "" || tt.ready != "" && !strings.Contains(got, tt.ready) {
				t.Errorf("ReadyReason %q, want %q", got, tt.ready)
			}
		})
	}
}

// Run ends with the reason once the sidecar's /healthz has answered 503 for the grace period, and
// the readers say so without asking the sidecar.
func TestWatchdogRun(t *testing.T) {
	f, c := newFake(t, map[string]answer{
		"/healthz":  {200, "ok"},
		"/v1/state": {200, `{"version": 5, "reason": null, "overlays": []}`},
	})
	var store atomic.Int64
	store.Store(5)
	w := &Watchdog{Client: c, Every: 5 * time.Millisecond, Timeout: time.Second, Grace: 100 * time.Millisecond, Store: store.Load}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for w.ReadyReason() != "" {
		if ctx.Err() != nil {
			t.Fatalf("never ready: %s", w.ReadyReason())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if q := f.query(t, "/v1/state"); q["timeout"] != "0.000" {
		t.Errorf("the watchdog asked the sidecar to wait %s s", q["timeout"])
	}
	f.set("/healthz", answer{503, "the fold stopped following the log: boom"})
	began := time.Now()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the fold stopped following the log: boom") {
			t.Fatalf("Run ended with %v", err)
		}
		if took := time.Since(began); took < 80*time.Millisecond {
			t.Errorf("declared dead after %v, before the grace period", took)
		}
		if !strings.Contains(w.DeadReason(), "boom") {
			t.Errorf("DeadReason %q", w.DeadReason())
		}
	case <-ctx.Done():
		t.Fatal("a sidecar answering 503 was never declared dead")
	}

	// a context that ends is no death
	_, c = newFake(t, map[string]answer{"/healthz": {200, "ok"}, "/v1/state": {200, `{"version": 1}`}})
	w = &Watchdog{Client: c, Every: 5 * time.Millisecond}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run ended with %v when its context did", err)
	}
}
