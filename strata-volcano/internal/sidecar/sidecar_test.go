package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is a canned reply of a fake sidecar.
type answer struct {
	status int
	body   string
}

// fake serves canned answers by path and records each request's query.
type fake struct {
	mu      sync.Mutex
	answers map[string]answer
	queries map[string][]string // path -> raw queries
}

func newFake(t *testing.T, answers map[string]answer) (*fake, *Client) {
	f := &fake{answers: answers, queries: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries[r.URL.Path] = append(f.queries[r.URL.Path], r.URL.RawQuery)
		a, ok := f.answers[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	return f, New(srv.URL + "/")
}

func (f *fake) set(path string, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[path] = a
}

func (f *fake) query(t *testing.T, path string) map[string]string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	qs := f.queries[path]
	if len(qs) == 0 {
		t.Fatalf("%s was not asked", path)
	}
	out := map[string]string{}
	for _, kv := range strings.Split(qs[len(qs)-1], "&") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = strings.ReplaceAll(v, "%2C", ",")
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestState(t *testing.T) {
	tests := []struct {
		name    string
		reply   answer
		want    State
		wantErr string // a part of the error ("": none)
	}{
		{
			name:  "ready, with overlays",
			reply: answer{200, `{"version": 42, "reason": null, "overlays": [{"pod": "u1", "status": "Binding", "node": "n1"}, {"pod": "u2", "status": "Releasing", "node": "n2"}]}`},
			want:  State{Version: 42, Overlays: []Overlay{{"u1", "Binding", "n1"}, {"u2", "Releasing", "n2"}}},
		},
		{
			name:  "not ready",
			reply: answer{200, `{"version": 0, "reason": "waiting for Pod to be SYNCED", "overlays": []}`},
			want:  State{Version: 0, Reason: ptr("waiting for Pod to be SYNCED"), Overlays: []Overlay{}},
		},
		{name: "no version", reply: answer{200, `{"reason": null, "overlays": []}`}, wantErr: "names no version"},
		{name: "bad JSON", reply: answer{200, `{"version": 4`}, wantErr: "decoding the sidecar's answer to /v1/state"},
		{name: "wrong type", reply: answer{200, `{"version": "4"}`}, wantErr: "decoding"},
		{
			name:    "503 carries the body",
			reply:   answer{503, "replica r1: the cache log did not get there in time\n"},
			wantErr: "503 Service Unavailable to /v1/state: replica r1: the cache log did not get there in time",
		},
		{name: "400 carries the body", reply: answer{400, "timeout is negative"}, wantErr: "400 Bad Request to /v1/state: timeout is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newFake(t, map[string]answer{"/v1/state": tt.reply})
			got, err := c.State(context.Background(), 7)
			if q := f.query(t, "/v1/state"); q["min_version"] != "7" {
				t.Errorf("min_version=%q, want 7", q["min_version"])
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("state %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The sidecar waits as long as the caller will: the timeout it is sent is what is left of the
// context's deadline, never negative, a minute without a deadline, and zero for Current.
func TestTimeoutFollowsTheDeadline(t *testing.T) {
	ok := answer{200, `{"version": 1, "reason": null, "overlays": [], "outcomes": {"3": {"result": "applied", "reason": ""}}}`}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	tests := []struct {
		name     string
		ask      func(context.Context, *Client) error
		path     string
		deadline time.Duration // 0: none
		min, max float64       // the timeout sent, in seconds
	}{
		{"State, 5 s left", func(ctx context.Context, c *Client) error { _, err := c.State(ctx, 0); return err }, "/v1/state", 5 * time.Second, 4, 5},
		{"State, no deadline", func(ctx context.Context, c *Client) error { _, err := c.State(ctx, 0); return err }, "/v1/state", 0, 60, 60},
		{"Outcomes, 3 s left", func(ctx context.Context, c *Client) error { _, err := c.Outcomes(ctx, []int64{3}); return err }, "/v1/outcomes", 3 * time.Second, 2, 3},
		{"Outcomes, no deadline", func(ctx context.Context, c *Client) error { _, err := c.Outcomes(ctx, []int64{3}); return err }, "/v1/outcomes", 0, 60, 60},
		{"Current waits for nothing", func(ctx context.Context, c *Client) error { _, err := c.Current(ctx); return err }, "/v1/state", 5 * time.Second, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newFake(t, map[string]answer{"/v1/state": ok, "/v1/outcomes": ok})
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			if err := tt.ask(ctx, c); err != nil {
				t.Fatal(err)
			}
			sent, err := strconv.ParseFloat(f.query(t, tt.path)["timeout"], 64)
			if err != nil || sent < tt.min || sent > tt.max {
				t.Errorf("timeout=%v (%v), want within [%v, %v]", sent, err, tt.min, tt.max)
			}
		})
	}
	if got := waitFor(expired); got != 0 {
		t.Errorf("a passed deadline gives the sidecar %v, want 0", got)
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		offsets []int64
		reply   answer
		want    map[int64]Outcome
		wantErr string
	}{
		{
			name:    "every offset",
			offsets: []int64{10, 12},
			reply:   answer{200, `{"outcomes": {"10": {"result": "applied", "reason": ""}, "12": {"result": "rejected", "reason": "node n1 is full"}}}`},
			want:    map[int64]Outcome{10: {"applied", ""}, 12: {"rejected", "node n1 is full"}},
		},
		{
			name:    "a missing offset is an error",
			offsets: []int64{10, 12},
			reply:   answer{200, `{"outcomes": {"10": {"result": "applied", "reason": ""}}}`},
			wantErr: "no verdict on offset 12",
		},
		{
			name:    "an offset that is no number",
			offsets: []int64{10},
			reply:   answer{200, `{"outcomes": {"10": {"result": "applied"}, "x": {"result": "applied"}}}`},
			wantErr: `named offset "x"`,
		},
		{
			name:    "404 carries the body",
			offsets: []int64{10},
			reply:   answer{404, "no record of replica r1 awaits a verdict at [10]"},
			wantErr: "404 Not Found to /v1/outcomes: no record of replica r1 awaits a verdict at [10]",
		},
		{name: "bad JSON", offsets: []int64{10}, reply: answer{200, `{"outcomes": [`}, wantErr: "decoding the sidecar's answer to /v1/outcomes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newFake(t, map[string]answer{"/v1/outcomes": tt.reply})
			got, err := c.Outcomes(context.Background(), tt.offsets)
			if q := f.query(t, "/v1/outcomes"); q["offsets"] != joined(tt.offsets) {
				t.Errorf("offsets=%q, want %v", q["offsets"], tt.offsets)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("outcomes %+v, want %+v", got, tt.want)
			}
		})
	}
}

func joined(offsets []int64) string {
	parts := make([]string, len(offsets))
	for i, o := range offsets {
		parts[i] = strconv.FormatInt(o, 10)
	}
	return strings.Join(parts, ",")
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name    string
		reply   answer
		wantErr string
	}{
		{"ok", answer{200, "ok"}, ""},
		{"the fold stopped", answer{503, "the fold stopped following the log: boom\n"}, "503 Service Unavailable to /healthz: the fold stopped following the log: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newFake(t, map[string]answer{"/healthz": tt.reply})
			err := c.Health(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	if err := New(srv.URL).Health(context.Background()); err == nil {
		t.Error("a sidecar that is gone answered healthy")
	}
}
