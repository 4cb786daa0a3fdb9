package objects

import (
	"context"
	"errors"
	"testing"
	"time"

	"strata.local/volcano/internal/avrolog"
	"strata.local/volcano/internal/cachelog"
)

func str(s string) *string { return &s }

func watch(op, apiVersion, kind, ns, name, rv, object string) avrolog.Record {
	w := &avrolog.WatchEvent{Op: op, APIVersion: apiVersion, Kind: kind, Name: name, Object: []byte(object)}
	if ns != "" {
		w.Namespace = str(ns)
	}
	if rv != "" {
		w.ResourceVersion = str(rv)
	}
	return avrolog.Record{Watch: w}
}

func synced(kind string) avrolog.Record { return avrolog.Record{Synced: &avrolog.Synced{Kind: kind}} }

func TestApply(t *testing.T) {
	bind := avrolog.Record{} // a record whose body this program does not read (BIND_GROUP, ...)
	tests := []struct {
		name      string
		records   []avrolog.Record
		bad       int // index of a record that did not decode (-1: none)
		wantPods  []string
		wantNodes []string
		wantRaw   map[string]string // pod key -> raw
		wantReady string
	}{
		{
			name: "objects by kind and key; other records only take their place",
			records: []avrolog.Record{
				watch("ADDED", "v1", "Node", "", "n2", "1", `{"n":2}`),
				watch("ADDED", "v1", "Node", "", "n1", "2", `{"n":1}`),
				watch("ADDED", "v1", "Pod", "ns", "p", "3", `{"p":1}`),
				bind,
				watch("MODIFIED", "v1", "Pod", "ns", "p", "4", `{"p":2}`),
			},
			bad:       -1,
			wantPods:  []string{"ns/p"},
			wantNodes: []string{"n2", "n1"},
			wantRaw:   map[string]string{"ns/p": `{"p":2}`},
			wantReady: "waiting for Node, Pod to be SYNCED",
		},
		{
			name: "deletes; unknown kinds and api versions are ignored; an update that repeats the resourceVersion too",
			records: []avrolog.Record{
				watch("ADDED", "v1", "Node", "", "n1", "1", `{}`),
				watch("ADDED", "v1", "Node", "", "n2", "2", `{}`),
				watch("DELETED", "v1", "Node", "", "n1", "3", `{}`),
				watch("ADDED", "v2", "Pod", "ns", "x", "4", `{}`),
				watch("ADDED", "v1", "ConfigMap", "ns", "y", "5", `{}`),
				watch("ADDED", "v1", "Pod", "ns", "p", "6", `{"v":6}`),
				watch("MODIFIED", "v1", "Pod", "ns", "p", "6", `{"v":"again"}`),
				synced("Pod"), synced("Node"),
			},
			bad:       -1,
			wantPods:  []string{"ns/p"},
			wantNodes: []string{"n2"},
			wantRaw:   map[string]string{"ns/p": `{"v":6}`},
		},
		{
			name:      "a message that does not decode keeps its place",
			records:   []avrolog.Record{bind, watch("ADDED", "v1", "Pod", "ns", "p", "1", `{}`), synced("Pod"), synced("Node")},
			bad:       0,
			wantPods:  []string{"ns/p"},
			wantNodes: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New([]string{"Pod", "Node"}, int64(len(tt.records)))
			for i, r := range tt.records {
				var decodeErr error
				if i == tt.bad {
					decodeErr = avrolog.ErrNotSingleObject
				}
				if err := s.applyAt(int64(i), r, decodeErr); err != nil {
					t.Fatal(err)
				}
			}
			if s.Version() != int64(len(tt.records)) {
				t.Errorf("version %d, want %d", s.Version(), len(tt.records))
			}
			err := s.Read(context.Background(), s.Version(), func(v View) error {
				if got := len(v.Objects[Pod]); got != len(tt.wantPods) {
					t.Errorf("%d pods, want %v", got, tt.wantPods)
				}
				for _, k := range tt.wantPods {
					if v.Objects[Pod][k] == nil {
						t.Errorf("pod %s missing", k)
					}
				}
				if len(v.NodeOrder) != len(tt.wantNodes) {
					t.Errorf("node order %v, want %v", v.NodeOrder, tt.wantNodes)
				}
				for i, n := range tt.wantNodes {
					if i < len(v.NodeOrder) && v.NodeOrder[i] != n {
						t.Errorf("node order %v, want %v", v.NodeOrder, tt.wantNodes)
					}
				}
				for k, raw := range tt.wantRaw {
					if got := string(v.Objects[Pod][k].Raw); got != raw {
						t.Errorf("pod %s is %s, want %s", k, got, raw)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.NotReadyReason(); got != tt.wantReady {
				t.Errorf("not ready because %q, want %q", got, tt.wantReady)
			}
		})
	}
}

func TestGap(t *testing.T) {
	s := New(nil, 0)
	if err := s.applyAt(1, synced("Pod"), nil); !errors.Is(err, cachelog.ErrGap) {
		t.Fatalf("offset 1 first: %v, want a gap", err)
	}
}

// Read waits for the follower to reach the version asked for, and refuses one it has passed.
func TestRead(t *testing.T) {
	s := New(nil, 0)
	done := make(chan int64)
	go func() {
		_ = s.Read(context.Background(), 2, func(v View) error {
			done <- v.Version
			return nil
		})
	}()
	s.mu.Lock()
	_ = s.applyAt(0, synced("Pod"), nil)
	s.mu.Unlock()
	select {
	case v := <-done:
		t.Fatalf("read at version %d before the store got there", v)
	case <-time.After(50 * time.Millisecond):
	}
	s.mu.Lock()
	_ = s.applyAt(1, synced("Node"), nil)
	s.mu.Unlock()
	if v := <-done; v != 2 {
		t.Fatalf("read at version %d, want 2", v)
	}
	if err := s.Read(context.Background(), 1, func(View) error { return nil }); !errors.Is(err, ErrBehind) {
		t.Fatalf("a passed version: %v, want ErrBehind", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Read(ctx, 5, func(View) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a version never reached: %v, want the deadline", err)
	}
}

// A read's view names the keys stored or deleted since the last read that returned, by kind;
// a read whose function fails leaves them for the next.
func TestDirty(t *testing.T) {
	s := New(nil, 0)
	apply := func(recs ...avrolog.Record) {
		for _, r := range recs {
			if err := s.applyAt(s.Version(), r, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	dirty := func(fail bool) map[Kind][]string {
		out := map[Kind][]string{}
		err := s.Read(context.Background(), s.Version(), func(v View) error {
			for k, keys := range v.Dirty {
				for key := range keys {
					out[k] = append(out[k], key)
				}
			}
			if fail {
				return errors.New("the build failed")
			}
			return nil
		})
		if (err != nil) != fail {
			t.Fatal(err)
		}
		return out
	}
	apply(watch("ADDED", "v1", "Node", "", "n1", "1", `{}`), watch("ADDED", "v1", "Pod", "ns", "p", "2", `{}`),
		synced("Pod"))
	if got := dirty(true); len(got[Node]) != 1 || len(got[Pod]) != 1 {
		t.Fatalf("dirty after two objects stored: %v", got)
	}
	if got := dirty(false); len(got[Node]) != 1 || len(got[Pod]) != 1 {
		t.Fatalf("a failed read consumed the dirty keys: %v", got)
	}
	if got := dirty(false); len(got[Node])+len(got[Pod]) != 0 {
		t.Fatalf("dirty keys left after a read: %v", got)
	}
	apply(watch("MODIFIED", "v1", "Pod", "ns", "p", "2", `{}`)) // repeats the stored resourceVersion
	if got := dirty(false); len(got[Pod]) != 0 {
		t.Fatalf("an update that changed nothing made %v dirty", got)
	}
	apply(watch("DELETED", "v1", "Node", "", "n1", "3", `{}`))
	if got := dirty(false); len(got[Node]) != 1 || got[Node][0] != "n1" {
		t.Fatalf("a delete is a change: %v", got)
	}
}
