// Package sidecar asks the replica's sidecar (strata volcano-sidecar: Strata's Python fold, a
// LogCache on the same cache log) what only the fold knows: its version, the overlays it lays
// over tasks at that version, and the verdict on each of this replica's records by offset.
package sidecar

import (
	"context"
	"encoding/json"
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

func waitFor(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return time.Until(deadline)
	}
	return 60 * time.Second
}

// State is the fold once it has applied at least minVersion records.
func (c *Client) State(ctx context.Context, minVersion int64) (State, error) {
	var st State
	q := url.Values{
		"min_version": {strconv.FormatInt(minVersion, 10)},
		"timeout":     {fmt.Sprintf("%.3f", waitFor(ctx).Seconds())},
	}
	err := c.get(ctx, "/v1/state", q, &st)
	return st, err
}

// Outcomes are the fold's verdicts on this replica's records at offsets (each asked once).
func (c *Client) Outcomes(ctx context.Context, offsets []int64) (map[int64]Outcome, error) {
	parts := make([]string, len(offsets))
	for i, o := range offsets {
		parts[i] = strconv.FormatInt(o, 10)
	}
	q := url.Values{
		"offsets": {strings.Join(parts, ",")},
		"timeout": {fmt.Sprintf("%.3f", waitFor(ctx).Seconds())},
	}
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
