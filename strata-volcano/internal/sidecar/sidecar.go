// Package sidecar asks the replica's sidecar (strata volcano-sidecar: Strata's Python fold, a
// LogCache on the same cache log) what only the fold knows: its version, the overlays it lays
// over tasks at that version, and the verdict on each of this replica's records by offset; and
// watches it (Watchdog): a sidecar that stopped answering, or whose fold stopped while the log
// went on, is dead, and so is the replica.
package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Overlay is a task the fold has in Binding or Releasing on a node.
type Overlay struct {
	Pod    string `json:"pod"`
	Status string `json:"status"`
	Node   string `json:"node"`
}

// State is the fold at one version, read atomically.
type State struct {
	Version  int64     `json:"version"`
	Reason   *string   `json:"reason"` // why the fold is not ready yet, or null
	Overlays []Overlay `json:"overlays"`
}

// Outcome is the fold's verdict on one record: applied, rejected, ignored or bad, and why.
type Outcome struct {
	Result string `json:"result"`
	Reason string `json:"reason"`
}

// Client talks to one sidecar.
type Client struct {
	base string
	http *http.Client
}

// New is a client of the sidecar at base (http://127.0.0.1:PORT).
func New(base string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), http: &http.Client{}}
}

func (c *Client) get(ctx context.Context, path string, query url.Values, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+query.Encode(), nil)
	if err != nil {
		return fmt.Errorf("asking the sidecar: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("asking the sidecar %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the sidecar's answer to %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the sidecar answered %s to %s: %s", resp.Status, path, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("decoding the sidecar's answer to %s: %w", path, err)
	}
	return nil
}

// waitFor is how long the sidecar may wait for the fold: until the context's deadline (never
// negative), or a minute without one.
func waitFor(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(time.Until(deadline), 0)
	}
	return 60 * time.Second
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// State is the fold once it has applied at least minVersion records; the sidecar waits for it
// until ctx's deadline.
func (c *Client) State(ctx context.Context, minVersion int64) (State, error) {
	return c.state(ctx, minVersion, waitFor(ctx))
}

func (c *Client) state(ctx context.Context, minVersion int64, wait time.Duration) (State, error) {
	var answer struct {
		Version *int64 `json:"version"`
		State
	}
	q := url.Values{"min_version": {strconv.FormatInt(minVersion, 10)}, "timeout": {seconds(wait)}}
	if err := c.get(ctx, "/v1/state", q, &answer); err != nil {
		return State{}, err
	}
	if answer.Version == nil {
		return State{}, errors.New("the sidecar's state names no version")
	}
	answer.State.Version = *answer.Version
	return answer.State, nil
}

// Health is nil while the sidecar's /healthz answers 200; else why not (its 503 says its fold
// stopped following the log). The sidecar answers it without the fold's lock.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("asking the sidecar: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("asking the sidecar /healthz: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fmt.Errorf("reading the sidecar's answer to /healthz: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the sidecar answered %s to /healthz: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Current is the fold's state as it is now: the sidecar waits for no version (it answers 503
// until it has restored its fold).
func (c *Client) Current(ctx context.Context) (State, error) { return c.state(ctx, 0, 0) }

// Outcomes are the fold's verdicts on this replica's records at offsets (each asked once).
func (c *Client) Outcomes(ctx context.Context, offsets []int64) (map[int64]Outcome, error) {
	parts := make([]string, len(offsets))
	for i, o := range offsets {
		parts[i] = strconv.FormatInt(o, 10)
	}
	q := url.Values{"offsets": {strings.Join(parts, ",")}, "timeout": {seconds(waitFor(ctx))}}
	var answer struct {
		Outcomes map[string]Outcome `json:"outcomes"`
	}
	if err := c.get(ctx, "/v1/outcomes", q, &answer); err != nil {
		return nil, err
	}
	out := make(map[int64]Outcome, len(answer.Outcomes))
	for k, v := range answer.Outcomes {
		o, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the sidecar named offset %q: %w", k, err)
		}
		out[o] = v
	}
	for _, o := range offsets {
		if _, ok := out[o]; !ok {
			return nil, fmt.Errorf("the sidecar has no verdict on offset %d (not this replica's record?)", o)
		}
	}
	return out, nil
}
