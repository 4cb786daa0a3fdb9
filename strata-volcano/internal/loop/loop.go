// Package loop runs Volcano's scheduling cycle over the log cache: Volcano's own runOnce
// (OpenSession, each action's Execute, CloseSession) with one step between the actions and
// CloseSession: the cache publishes the session's BIND_GROUPs and takes back what the fold
// rejected, so the statuses CloseSession writes are the log's.
package loop

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/pkg/scheduler"
	schedcache "volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/metrics"

	"strata.local/volcano/internal/logcache"
)

// Cache is what a cycle needs of the cache: Volcano's cache.Cache (OpenSession takes its
// Snapshot, the actions its AddBindTask and Evict, CloseSession its status writes) and the three
// steps of strata-volcano's session: forget the last session, say what the snapshot did,
// publish the session's binds and take back what the fold rejected.
type Cache interface {
	schedcache.Cache
	BeginSession()
	LastSnapshot() logcache.SnapshotReport
	Flush(ctx context.Context, ssn *framework.Session) (logcache.Verdicts, error)
}

var _ Cache = (*logcache.Cache)(nil)

// Conf is a parsed scheduler configuration.
type Conf struct {
	Actions        []framework.Action
	Tiers          []conf.Tier
	Configurations []conf.Configuration
}

// LoadConf reads a vc-scheduler configuration file; an empty path is Volcano's default.
func LoadConf(path string) (Conf, error) {
	text := scheduler.DefaultSchedulerConf
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Conf{}, fmt.Errorf("reading the scheduler configuration: %w", err)
		}
		text = strings.TrimSpace(string(data))
	}
	actions, tiers, configurations, _, err := scheduler.UnmarshalSchedulerConf(text)
	if err != nil {
		return Conf{}, fmt.Errorf("the scheduler configuration %q: %w", path, err)
	}
	return Conf{Actions: actions, Tiers: tiers, Configurations: configurations}, nil
}

// Names lists the actions and plugins, for the log.
func (c Conf) Names() (actions, plugins []string) {
	for _, a := range c.Actions {
		actions = append(actions, a.Name())
	}
	for _, t := range c.Tiers {
		for _, p := range t.Plugins {
			plugins = append(plugins, p.Name)
		}
	}
	return actions, plugins
}

// clockFree are the actions and plugins whose decisions depend on the session's input alone
// (its objects and overlays), not on the time: a session of these on an unchanged input that
// published and wrote nothing would do so again.
var clockFree = map[string]bool{
	"enqueue": true, "allocate": true, "backfill": true, "preempt": true, "reclaim": true,
	"priority": true, "gang": true, "conformance": true, "overcommit": true, "drf": true,
	"predicates": true, "proportion": true, "nodeorder": true, "binpack": true,
}

// ClockFree says whether every action and plugin of the configuration is clock-free (sla,
// tdm, rescheduling and the like read the time; a session of them is never left out).
func (c Conf) ClockFree() bool {
	actions, plugins := c.Names()
	for _, name := range append(actions, plugins...) {
		if !clockFree[name] {
			return false
		}
	}
	return true
}

// Report is one cycle's outcome and where its time went.
type Report struct {
	Skipped  bool // the session would have repeated the last one: left out
	Verdicts logcache.Verdicts
	Snapshot logcache.SnapshotReport
	Open     time.Duration // OpenSession: the snapshot and the plugins' OnSessionOpen
	Actions  time.Duration
	Flush    time.Duration // publishing the BIND_GROUPs and waiting for the verdicts
	Close    time.Duration // CloseSession: the status writes
	Duration time.Duration
	Err      error
}

// String is the report in one line.
func (r Report) String() string {
	s := r.Snapshot
	if r.Skipped {
		return fmt.Sprintf("cycle at version %d: %.0f ms (snapshot %.0f ms: sidecar %.1f ms, nothing changed); "+
			"the session would repeat the last one: left out", s.Version, ms(r.Duration), ms(s.Took), ms(s.Sidecar))
	}
	st := s.Stats
	return fmt.Sprintf("cycle at version %d: %.0f ms (snapshot %.0f ms: sidecar %.1f ms, %d nodes, %d jobs, %d tasks, "+
		"%d decoded, made anew %d nodes and %d jobs (%d and %d the last session changed), %d tasks moved; "+
		"open %.0f ms, actions %.0f ms, flush %.0f ms, close %.0f ms); %d BIND_GROUPs, %d admitted",
		s.Version, ms(r.Duration), ms(s.Took), ms(s.Sidecar), st.Nodes, st.Jobs, st.Tasks, st.Decoded,
		st.NodesBuilt, st.JobsBuilt, st.NodesTouched, st.JobsTouched, st.TasksMoved,
		ms(r.Open), ms(r.Actions), ms(r.Flush), ms(r.Close), r.Verdicts.Groups, r.Verdicts.Admitted)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Loop schedules every Period until its context ends.
type Loop struct {
	Cache        Cache
	Conf         Conf
	Period       time.Duration
	ExitWhenIdle int          // stop after this many cycles in a row that bound nothing (0: never)
	OnCycle      func(Report) // called after every cycle
	// SkipRepeats leaves out a session that would repeat the last one (a cache that can tell,
	// logcache.Cache.Prepare, and a clock-free configuration); FullEvery still runs one at
	// least this often (Volcano breaks score ties at random: a gang that did not fit one way
	// may fit another)
	SkipRepeats bool
	FullEvery   time.Duration
	lastFull    time.Time
	beat        atomic.Int64 // unix nanos: the end of the last cycle whose snapshot succeeded
}

// LastBeat is when the last cycle whose snapshot succeeded ended, or when Run started if none has
// yet (zero before Run). A cycle on an empty ClusterInfo because the snapshot failed (the
// sidecar did not answer, the store could not reach its version) decided nothing: it is no
// heartbeat, so a replica whose snapshots keep failing goes stale like one that stopped cycling.
func (l *Loop) LastBeat() time.Time {
	n := l.beat.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Run cycles until ctx ends (nil) or, with ExitWhenIdle, the cluster is quiet (nil).
func (l *Loop) Run(ctx context.Context) error {
	idle := 0
	l.beat.CompareAndSwap(0, time.Now().UnixNano())
	for ctx.Err() == nil {
		started := time.Now()
		report := l.RunOnce(ctx)
		if report.Snapshot.Err == nil {
			l.beat.Store(time.Now().UnixNano())
		}
		if l.OnCycle != nil {
			l.OnCycle(report)
		}
		if report.Err != nil || report.Verdicts.Groups > 0 {
			idle = 0
		} else {
			idle++
		}
		if l.ExitWhenIdle > 0 && idle >= l.ExitWhenIdle {
			return nil
		}
		wait := l.Period - time.Since(started)
		if report.Verdicts.Rejected > 0 {
			wait = 0 // lost a race: look again at once, at the newer version
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// preparer is a cache that builds the next ClusterInfo ahead and says whether the session on
// it would repeat the last one (logcache.Cache).
type preparer interface{ Prepare() (again bool) }

var skipped = promauto.NewCounter(prometheus.CounterOpts{
	Name: "strata_volcano_sessions_left_out",
	Help: "cycles whose session would have repeated the last one (nothing changed, nothing done): left out",
})

// RunOnce is Volcano's runOnce plus the flush of the session's binds before CloseSession.
func (l *Loop) RunOnce(ctx context.Context) Report {
	started := time.Now()
	conf.EnabledActionMap = map[string]bool{}
	for _, action := range l.Conf.Actions {
		conf.EnabledActionMap[action.Name()] = true
	}
	var r Report
	if p, ok := l.Cache.(preparer); ok && l.SkipRepeats {
		again := p.Prepare()
		if again && time.Since(l.lastFull) < l.FullEvery {
			r.Skipped = true
			r.Snapshot = l.Cache.LastSnapshot()
			r.Duration = time.Since(started)
			r.Err = r.Snapshot.Err
			skipped.Inc()
			return r
		}
	}
	l.Cache.BeginSession()
	ssn := framework.OpenSession(l.Cache, l.Conf.Tiers, l.Conf.Configurations)
	r.Open = time.Since(started)
	r.Snapshot = l.Cache.LastSnapshot()
	for _, action := range l.Conf.Actions {
		actionStarted := time.Now()
		action.Execute(ssn)
		metrics.UpdateActionDuration(action.Name(), metrics.Duration(actionStarted))
	}
	r.Actions = time.Since(started) - r.Open
	r.Verdicts, r.Err = l.Cache.Flush(ctx, ssn)
	if r.Err != nil {
		klog.Errorf("publishing the session's binds: %v", r.Err)
	}
	r.Flush = time.Since(started) - r.Open - r.Actions
	framework.CloseSession(ssn)
	l.lastFull = time.Now() // FullEvery counts from a session's end: at scale one takes seconds
	r.Duration = time.Since(started)
	r.Close = r.Duration - r.Open - r.Actions - r.Flush
	metrics.UpdateE2eDuration(metrics.Duration(started))
	if r.Err == nil {
		r.Err = r.Snapshot.Err
	}
	return r
}
