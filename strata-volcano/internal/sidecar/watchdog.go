package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Health is what the watchdog last learnt of the sidecar.
type Health struct {
	At        time.Time // when it was asked
	Alive     error     // nil while /healthz answers 200, else why not
	State     State     // the fold's state then (when Unknown is nil)
	Unknown   error     // why the state was not had (not asked: /healthz failed; not restored yet; ...)
	Dead      string    // why the sidecar is dead or stalled ("" while it is not); never cleared
	Answered  bool      // it has answered a state at least once
	Ready     string    // why a session may not be opened on its fold yet ("" once it may)
	StoreWas  int64     // the binary's store's version a grace period before At (-1: no sample yet)
	FoldSince time.Time // since when the fold's version has been State.Version
}

var errNotAsked = errors.New("not asked: /healthz did not answer 200")

// Watchdog polls the sidecar every Every, each poll within Timeout, and declares it dead when
// /healthz has not answered 200 for Grace (the process, its fold thread, or its HTTP server is
// gone or hung), or stalled when its fold's version has neither moved for Grace nor reached the
// version the binary's own store had Grace ago (the fold stopped while the log went on). A fold
// that is behind but moving (a catch-up, a burst of records) is not stalled. Stall is judged only
// once the sidecar has answered a state: a fold still restoring keeps the replica unready, not
// dead. Readers (Last, ReadyReason, DeadReason) never wait: they read the last poll's answer.
type Watchdog struct {
	Client  *Client
	Every   time.Duration // between polls (default 2 s)
	Timeout time.Duration // of one poll (default 2 s)
	Grace   time.Duration // how long the sidecar may be silent or stalled (default 20 s)
	Store   func() int64  // the version of the binary's own store (lock-free; nil: no stall is judged)

	mu       sync.Mutex // the judgment's state, only Observe touches it
	started  time.Time
	aliveAt  time.Time // the last 200 from /healthz (or the start)
	movedAt  time.Time // when the fold's version last changed (or was first heard)
	answered bool
	version  int64    // the fold's last version heard
	samples  []sample // the store's versions over the last grace period and one before it
	dead     string

	last atomic.Pointer[Health]
}

type sample struct {
	at      time.Time
	version int64
}

func (w *Watchdog) grace() time.Duration { return or(w.Grace, 20*time.Second) }

func or(d, fallback time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return fallback
}

// Run polls until ctx ends (nil) or the sidecar is dead or stalled (the reason, as an error).
func (w *Watchdog) Run(ctx context.Context) error {
	tick := time.NewTicker(or(w.Every, 2*time.Second))
	defer tick.Stop()
	for {
		h, ok := w.Poll(ctx)
		if ok && h.Dead != "" {
			return errors.New(h.Dead)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Poll asks the sidecar once (/healthz, then its current state) and judges the answer; not ok
// when ctx ended meanwhile (nothing is judged on the way out).
func (w *Watchdog) Poll(ctx context.Context) (Health, bool) {
	store := int64(0)
	if w.Store != nil {
		store = w.Store()
	}
	asked := time.Now()
	pctx, cancel := context.WithTimeout(ctx, or(w.Timeout, 2*time.Second))
	defer cancel()
	alive := w.Client.Health(pctx)
	st, unknown := State{}, errNotAsked
	if alive == nil {
		st, unknown = w.Client.Current(pctx)
	}
	if ctx.Err() != nil {
		return w.Last(), false
	}
	return w.Observe(asked, store, alive, st, unknown), true
}

// Observe judges one answer: at is when it was asked, store the binary's store's version then.
func (w *Watchdog) Observe(at time.Time, store int64, alive error, st State, unknown error) Health {
	w.mu.Lock()
	defer w.mu.Unlock()
	grace := w.grace()
	if w.started.IsZero() {
		w.started, w.aliveAt, w.movedAt = at, at, at
	}
	if alive == nil {
		w.aliveAt = at
	}
	if unknown == nil && (!w.answered || st.Version != w.version) {
		w.answered, w.version, w.movedAt = true, st.Version, at
	}
	// the store's version a grace period ago: the last sample at or before at-grace
	w.samples = append(w.samples, sample{at, store})
	was := int64(-1)
	for len(w.samples) > 1 && !w.samples[1].at.After(at.Add(-grace)) {
		w.samples = w.samples[1:]
	}
	if !w.samples[0].at.After(at.Add(-grace)) {
		was = w.samples[0].version
	}
	if w.dead == "" {
		switch {
		case at.Sub(w.aliveAt) >= grace:
			w.dead = fmt.Sprintf("the sidecar has not answered /healthz for %.0f s: %v", at.Sub(w.aliveAt).Seconds(), alive)
		case w.answered && at.Sub(w.movedAt) >= grace && w.version < was:
			w.dead = fmt.Sprintf("the sidecar's fold is stalled: at version %d for %.0f s, while this replica's store was at %d %.0f s ago",
				w.version, at.Sub(w.movedAt).Seconds(), was, grace.Seconds())
		}
	}
	h := Health{
		At: at, Alive: alive, State: st, Unknown: unknown, Dead: w.dead, Answered: w.answered,
		StoreWas: was, FoldSince: w.movedAt,
	}
	switch {
	case alive != nil:
		h.Ready = alive.Error()
	case unknown != nil:
		h.Ready = "the sidecar's state: " + unknown.Error()
	case st.Reason != nil:
		h.Ready = "sidecar: " + *st.Reason
	}
	w.last.Store(&h)
	return h
}

// Last is the last poll's judgment (zero before the first).
func (w *Watchdog) Last() Health {
	if h := w.last.Load(); h != nil {
		return *h
	}
	return Health{StoreWas: -1}
}

// ReadyReason is "" when the last answer said the fold is ready, else why not.
func (w *Watchdog) ReadyReason() string {
	h := w.last.Load()
	if h == nil {
		return "the sidecar has not been asked yet"
	}
	return h.Ready
}

// DeadReason is why the sidecar is dead or stalled, "" while it is not.
func (w *Watchdog) DeadReason() string {
	if h := w.last.Load(); h != nil {
		return h.Dead
	}
	return ""
}
