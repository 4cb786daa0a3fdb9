// Package objects keeps the full Kubernetes objects of the cache log, as the log's watch events
// carry them (redacted JSON), at one version: the count of records applied. It decodes nothing:
// a snapshot decodes what changed (package clusterinfo). The verdicts on BINDs and EVICTs are the
// sidecar's fold's; here they only take their place (their version).
package objects

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"strata.local/volcano/internal/avrolog"
	"strata.local/volcano/internal/cachelog"
)

// Kind is an (apiVersion, kind) pair the cache reads.
type Kind struct{ APIVersion, Kind string }

// The seven kinds of the cache log (projector/fold/kinds.py).
var (
	Pod           = Kind{"v1", "Pod"}
	Node          = Kind{"v1", "Node"}
	PodGroup      = Kind{"scheduling.volcano.sh/v1beta1", "PodGroup"}
	Queue         = Kind{"scheduling.volcano.sh/v1beta1", "Queue"}
	PriorityClass = Kind{"scheduling.k8s.io/v1", "PriorityClass"}
	CSINode       = Kind{"storage.k8s.io/v1", "CSINode"}
	HyperNode     = Kind{"topology.volcano.sh/v1alpha1", "HyperNode"}
	Kinds         = []Kind{Pod, Node, PodGroup, Queue, PriorityClass, CSINode, HyperNode}
)

// KindNames are the kinds' names, as SYNCED records name them.
func KindNames() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Kind
	}
	return names
}

// Entry is one stored object: its JSON and the version at which it was stored. A new watch
// event stores a new Entry, so a pointer identifies one object version. The snapshot builder
// decodes Raw once and then drops it (while it holds the store): it keeps the decoded object.
type Entry struct {
	Raw             []byte
	ResourceVersion string
	Version         int64
}

// View is the store at one version; valid only inside Store.Read.
type View struct {
	Version   int64
	Objects   map[Kind]map[string]*Entry // key: namespace/name, or name for cluster objects
	NodeOrder []string                   // node names in the order they were first stored
	// Dirty holds, by kind, the keys stored or deleted since the last Read that returned
	// without error: what a build must look at again. Nil: look at everything.
	Dirty map[Kind]map[string]bool
}

// Store is the objects of the log, applied by Follow and read at an agreed version by Read.
type Store struct {
	mu        sync.Mutex
	changed   *sync.Cond
	view      View
	synced    map[string]bool
	holdAt    int64 // the follower applies nothing past this version; -1: free
	failure   error
	undecoded int64

	version    atomic.Int64 // mirrors view.Version for lock-free readers (metrics, probes)
	endAtStart atomic.Int64
	wanted     []string
	// notReady mirrors notReadyLocked() after every change: probes read it without the lock,
	// which Read holds for a whole build (seconds at scale).
	notReady atomic.Pointer[string]
	failed   atomic.Pointer[error]
}

// New is an empty store that will be ready once every kind of wanted is SYNCED and it has
// applied the log's end as of start (endAtStart).
func New(wanted []string, endAtStart int64) *Store {
	s := &Store{
		view:   View{Objects: map[Kind]map[string]*Entry{}, Dirty: map[Kind]map[string]bool{}},
		synced: map[string]bool{},
		holdAt: -1,
		wanted: wanted,
	}
	for _, k := range Kinds {
		s.view.Objects[k] = map[string]*Entry{}
		s.view.Dirty[k] = map[string]bool{}
	}
	s.changed = sync.NewCond(&s.mu)
	s.endAtStart.Store(endAtStart)
	s.publishLocked()
	return s
}

// publishLocked mirrors the readiness for lock-free readers (lock held, or before sharing).
func (s *Store) publishLocked() {
	reason := s.notReadyLocked()
	s.notReady.Store(&reason)
}

// Version is the count of records applied.
func (s *Store) Version() int64 { return s.version.Load() }

// Undecoded counts messages that were no record this program knows (they keep their place).
func (s *Store) Undecoded() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.undecoded
}

// NotReadyReason says why the store may not be scheduled from yet ("" once it may): caught up
// with the log's end as of start, and every wanted kind SYNCED. It never waits for the lock.
func (s *Store) NotReadyReason() string { return *s.notReady.Load() }

func (s *Store) notReadyLocked() string {
	if s.failure != nil {
		return "the cache stopped following the log: " + s.failure.Error()
	}
	if end := s.endAtStart.Load(); s.view.Version < end {
		return fmt.Sprintf("catching up: version %d of the log's end %d at start", s.view.Version, end)
	}
	var missing []string
	for _, k := range s.wanted {
		if !s.synced[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return "waiting for " + strings.Join(missing, ", ") + " to be SYNCED"
	}
	return ""
}

// Failure is why Follow stopped, or nil. It never waits for the lock.
func (s *Store) Failure() error {
	if f := s.failed.Load(); f != nil {
		return *f
	}
	return nil
}

// Follow applies the reader's entries until ctx ends or the log breaks its contract.
func (s *Store) Follow(ctx context.Context, reader *cachelog.Reader, catalog *avrolog.Catalog) error {
	err := s.follow(ctx, reader, catalog)
	if err != nil && ctx.Err() == nil {
		s.mu.Lock()
		s.failure = err
		s.failed.Store(&err)
		s.publishLocked()
		s.changed.Broadcast()
		s.mu.Unlock()
	}
	return err
}

func (s *Store) follow(ctx context.Context, reader *cachelog.Reader, catalog *avrolog.Catalog) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	for ctx.Err() == nil {
		entries, err := reader.Poll(ctx)
		if err != nil {
			return err
		}
		for _, e := range entries {
			rec, decodeErr := catalog.Decode(e.Value)
			s.mu.Lock()
			for s.holdAt >= 0 && s.view.Version >= s.holdAt && ctx.Err() == nil {
				s.changed.Wait()
			}
			if ctx.Err() != nil {
				s.mu.Unlock()
				return nil
			}
			err := s.applyAt(e.Offset, rec, decodeErr)
			s.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// applyAt applies the record read at offset: it must be the next one (lock held).
func (s *Store) applyAt(offset int64, rec avrolog.Record, decodeErr error) error {
	if offset != s.view.Version {
		return fmt.Errorf("%w: the record at offset %d follows %d records", cachelog.ErrGap, offset, s.view.Version)
	}
	if decodeErr != nil {
		s.undecoded++ // a bad message takes its place in the order, as in the fold
	} else {
		s.apply(rec)
	}
	s.view.Version++
	s.version.Store(s.view.Version)
	if *s.notReady.Load() != "" {
		s.publishLocked()
	}
	s.changed.Broadcast()
	return nil
}

// apply stores or deletes the object of a watch event, or marks a kind SYNCED (lock held).
func (s *Store) apply(rec avrolog.Record) {
	if rec.Synced != nil {
		s.synced[rec.Synced.Kind] = true
		return
	}
	w := rec.Watch
	if w == nil {
		return
	}
	kind := Kind{w.APIVersion, w.Kind}
	objects, known := s.view.Objects[kind]
	if !known {
		return
	}
	key := w.Name
	if w.Namespace != nil && *w.Namespace != "" {
		key = *w.Namespace + "/" + w.Name
	}
	switch w.Op {
	case "ADDED", "MODIFIED":
		rv := ""
		if w.ResourceVersion != nil {
			rv = *w.ResourceVersion
		}
		if old, ok := objects[key]; ok && rv != "" && old.ResourceVersion == rv {
			return // an update that repeats the stored resourceVersion (Volcano's update handlers)
		}
		if _, ok := objects[key]; !ok && kind == Node {
			s.view.NodeOrder = append(s.view.NodeOrder, w.Name)
		}
		objects[key] = &Entry{Raw: w.Object, ResourceVersion: rv, Version: s.view.Version + 1}
		s.view.Dirty[kind][key] = true
	case "DELETED":
		if _, ok := objects[key]; !ok {
			return
		}
		delete(objects, key)
		s.view.Dirty[kind][key] = true
		if kind == Node {
			for i, name := range s.view.NodeOrder {
				if name == w.Name {
					s.view.NodeOrder = append(s.view.NodeOrder[:i:i], s.view.NodeOrder[i+1:]...)
					break
				}
			}
		}
	}
}

// ErrBehind is returned when a version the store has passed is asked for.
var ErrBehind = errors.New("the store has passed that version")

// Read holds the follower, lets it apply records up to exactly version (at least the version
// it holds now), and calls f with the objects at that version. Nothing is applied while f runs.
func (s *Store) Read(ctx context.Context, version int64, f func(View) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.view.Version > version {
		return fmt.Errorf("%w: asked for version %d at version %d", ErrBehind, version, s.view.Version)
	}
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.holdAt = version
	s.changed.Broadcast()
	defer func() {
		s.holdAt = -1
		s.changed.Broadcast()
	}()
	for s.view.Version < version {
		if s.failure != nil {
			return s.failure
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for version %d at version %d: %w", version, s.view.Version, err)
		}
		s.changed.Wait()
	}
	if err := f(s.view); err != nil {
		return err
	}
	for _, keys := range s.view.Dirty {
		clear(keys)
	}
	return nil
}

// Hold stops the follower at the version it has now and returns that version; Read (or
// Release) lets it go on.
func (s *Store) Hold() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdAt = s.view.Version
	return s.view.Version
}

// Release lets the follower run free again.
func (s *Store) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdAt = -1
	s.changed.Broadcast()
}

// WaitReady blocks until NotReadyReason is "" (or ctx ends, or the follower fails).
func (s *Store) WaitReady(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		reason := s.notReadyLocked()
		if reason == "" {
			return nil
		}
		if s.failure != nil {
			return s.failure
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", reason, err)
		}
		s.changed.Wait()
	}
}
