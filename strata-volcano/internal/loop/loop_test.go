package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"volcano.sh/apis/pkg/apis/scheduling"
	"volcano.sh/apis/pkg/apis/scheduling/scheme"
	vcv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	_ "volcano.sh/volcano/pkg/scheduler/actions" // registers allocate
	"volcano.sh/volcano/pkg/scheduler/api"
	schedcache "volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/capabilities/volumebinding"
	"volcano.sh/volcano/pkg/scheduler/framework"
	_ "volcano.sh/volcano/pkg/scheduler/plugins" // registers gang
	"volcano.sh/volcano/pkg/scheduler/util"

	"strata.local/volcano/internal/logcache"
)

// recorder is a plugin that writes the session's opening and closing into the fake's events.
type recorder struct{ c *fakeCache }

func (r recorder) Name() string                          { return "strata-loop-test" }
func (r recorder) OnSessionOpen(ssn *framework.Session)  { r.c.event("open") }
func (r recorder) OnSessionClose(ssn *framework.Session) { r.c.event("close") }

var current struct {
	sync.Mutex
	c *fakeCache
}

func init() {
	// what main sets from vc-scheduler's flags; the allocate action reads them
	opts := options.NewServerOption()
	opts.MinNodesToFind, opts.MinPercentageOfNodesToFind, opts.PercentageOfNodesToFind = 100, 5, 0
	opts.RegisterOptions()
	framework.RegisterPluginBuilder("strata-loop-test", func(a framework.Arguments) framework.Plugin {
		current.Lock()
		defer current.Unlock()
		return recorder{current.c}
	})
}

// fakeCache is Volcano's cache.Cache over a made-up cluster built with Volcano's own
// constructors (one node of 4 cpu, the default queue, one gang of two 1-cpu pods), and the steps
// of strata-volcano's session, scripted: each Snapshot fails or not, each Flush answers the
// verdicts it is given. It records what was called, in order. A call it does not expect panics
// (the embedded nil interface).
type fakeCache struct {
	schedcache.Cache

	snapshotErrs []error             // the error of each snapshot in turn (past the end: nil)
	verdicts     []logcache.Verdicts // of each flush in turn (past the end: none)
	flushErr     error

	mu        sync.Mutex
	events    []string
	snapshots []time.Time // when each was taken
	last      logcache.SnapshotReport
	flushes   int
}

func (c *fakeCache) event(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf(format, args...))
}

func (c *fakeCache) Events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

func cpu(n string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: resource.MustParse(n), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("110")}
}

func cluster() *api.ClusterInfo {
	ci := &api.ClusterInfo{
		Nodes: map[string]*api.NodeInfo{}, Jobs: map[api.JobID]*api.JobInfo{}, Queues: map[api.QueueID]*api.QueueInfo{},
		NamespaceInfo: map[api.NamespaceName]*api.NamespaceInfo{}, RevocableNodes: map[string]*api.NodeInfo{},
		CSINodesStatus: map[string]*api.CSINodeStatusInfo{},
	}
	node := util.BuildNode("n1", cpu("4"), nil)
	ci.Nodes["n1"], ci.NodeList = api.NewNodeInfo(node), []string{"n1"}
	q := &scheduling.Queue{}
	if err := scheme.Scheme.Convert(util.BuildQueue("default", 1, nil), q, nil); err != nil {
		panic(err)
	}
	ci.Queues["default"] = api.NewQueueInfo(q)
	pg := &scheduling.PodGroup{}
	if err := scheme.Scheme.Convert(util.BuildPodGroup("pg1", "ns", "default", 2, nil, vcv1beta1.PodGroupInqueue), pg, nil); err != nil {
		panic(err)
	}
	job := api.NewJobInfo("ns/pg1")
	for _, name := range []string{"p1", "p2"} {
		pod := util.BuildPod("ns", name, "", v1.PodPending, v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}, "pg1", nil, nil)
		pod.UID = types.UID("uid-" + pod.Name)
		pod.Spec.SchedulerName = "volcano"
		job.AddTaskInfo(api.NewTaskInfo(pod))
	}
	job.SetPodGroup(&api.PodGroup{PodGroup: *pg, Version: api.PodGroupVersionV1Beta1})
	ci.Jobs[job.UID] = job
	return ci
}

func (c *fakeCache) Snapshot() *api.ClusterInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.snapshots)
	c.snapshots = append(c.snapshots, time.Now())
	c.events = append(c.events, "snapshot")
	c.last = logcache.SnapshotReport{Version: int64(n + 1)}
	if n < len(c.snapshotErrs) && c.snapshotErrs[n] != nil {
		c.last.Err = c.snapshotErrs[n]
		return &api.ClusterInfo{Nodes: map[string]*api.NodeInfo{}, Jobs: map[api.JobID]*api.JobInfo{},
			Queues: map[api.QueueID]*api.QueueInfo{}, NamespaceInfo: map[api.NamespaceName]*api.NamespaceInfo{},
			RevocableNodes: map[string]*api.NodeInfo{}, CSINodesStatus: map[string]*api.CSINodeStatusInfo{}}
	}
	return cluster()
}

func (c *fakeCache) BeginSession() { c.event("begin") }

func (c *fakeCache) LastSnapshot() logcache.SnapshotReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *fakeCache) AddBindTask(task *api.TaskInfo) error {
	c.event("bind %s on %s", task.Name, task.NodeName)
	return nil
}

// Flush records the binds the session holds: the actions made them, CloseSession has not run.
func (c *fakeCache) Flush(ctx context.Context, ssn *framework.Session) (logcache.Verdicts, error) {
	bound := 0
	for _, job := range ssn.Jobs {
		bound += len(job.TaskStatusIndex[api.Binding])
	}
	c.event("flush (%d tasks Binding in the session)", bound)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.flushes
	c.flushes++
	if n < len(c.verdicts) {
		return c.verdicts[n], c.flushErr
	}
	return logcache.Verdicts{Reasons: map[string]int{}}, c.flushErr
}

func (c *fakeCache) UpdateJobStatus(job *api.JobInfo, updatePG bool) (*api.JobInfo, error) {
	c.event("status of %s: %s", job.Name, job.PodGroup.Status.Phase)
	return job, nil
}
func (c *fakeCache) RecordJobStatusEvent(job *api.JobInfo, updatePG bool) {}
func (c *fakeCache) UpdateQueueStatus(queue *api.QueueInfo) error         { return nil }
func (c *fakeCache) GetPodVolumes(task *api.TaskInfo, node *v1.Node) (*volumebinding.PodVolumes, error) {
	return nil, nil
}
func (c *fakeCache) AllocateVolumes(*api.TaskInfo, string, *volumebinding.PodVolumes) error {
	return nil
}
func (c *fakeCache) RevertVolumes(*api.TaskInfo, *volumebinding.PodVolumes)   {}
func (c *fakeCache) UpdateSchedulerNumaInfo(map[string]api.ResNumaSets) error { return nil }
func (c *fakeCache) Client() kubernetes.Interface                             { return nil }
func (c *fakeCache) ClientConfig() *rest.Config                               { return nil }
func (c *fakeCache) SharedInformerFactory() informers.SharedInformerFactory   { return nil }
func (c *fakeCache) EventRecorder() record.EventRecorder                      { return record.NewFakeRecorder(100) }

var _ Cache = (*fakeCache)(nil)

// a loop of allocate with the gang and recorder plugins over the fake
func newLoop(t *testing.T, c *fakeCache) *Loop {
	t.Helper()
	current.Lock()
	current.c = c
	current.Unlock()
	path := filepath.Join(t.TempDir(), "scheduler.conf")
	text := "actions: \"allocate\"\ntiers:\n- plugins:\n  - name: gang\n  - name: strata-loop-test\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cf, err := LoadConf(path)
	if err != nil {
		t.Fatal(err)
	}
	return &Loop{Cache: c, Conf: cf, Period: time.Millisecond}
}

// RunOnce is Volcano's cycle with the flush between the actions and CloseSession: the session's
// binds are published while the session holds them Binding, and the statuses CloseSession writes
// come after the verdicts.
func TestRunOnce(t *testing.T) {
	snapshotFailed, flushFailed := errors.New("the sidecar did not answer"), errors.New("not published")
	admitted := logcache.Verdicts{Groups: 1, Admitted: 1, Binds: 2, Reasons: map[string]int{}}
	tests := []struct {
		name     string
		cache    *fakeCache
		events   []string
		verdicts logcache.Verdicts
		err      error
	}{
		{
			name:  "binds published before CloseSession",
			cache: &fakeCache{verdicts: []logcache.Verdicts{admitted}},
			events: []string{"begin", "snapshot", "open", "bind p1 on n1", "bind p2 on n1",
				"flush (2 tasks Binding in the session)", "close", "status of pg1: Running"},
			verdicts: admitted,
		},
		{
			name:     "a failed snapshot decides nothing and is the cycle's error",
			cache:    &fakeCache{snapshotErrs: []error{snapshotFailed}},
			events:   []string{"begin", "snapshot", "open", "flush (0 tasks Binding in the session)", "close"},
			verdicts: logcache.Verdicts{Reasons: map[string]int{}},
			err:      snapshotFailed,
		},
		{
			name:     "a failed flush is the cycle's error",
			cache:    &fakeCache{flushErr: flushFailed},
			events:   []string{"begin", "snapshot", "open", "bind p1 on n1", "bind p2 on n1", "flush (2 tasks Binding in the session)", "close", "status of pg1: Running"},
			verdicts: logcache.Verdicts{Reasons: map[string]int{}},
			err:      flushFailed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLoop(t, tt.cache)
			r := l.RunOnce(context.Background())
			if got := tt.cache.Events(); fmt.Sprint(got) != fmt.Sprint(tt.events) {
				t.Errorf("events\n  %q\nwant\n  %q", got, tt.events)
			}
			if fmt.Sprint(r.Verdicts) != fmt.Sprint(tt.verdicts) || !errors.Is(r.Err, tt.err) || (tt.err == nil) != (r.Err == nil) {
				t.Errorf("report %+v / %v, want %+v / %v", r.Verdicts, r.Err, tt.verdicts, tt.err)
			}
			if r.Snapshot.Version != 1 || !errors.Is(r.Snapshot.Err, tt.cache.last.Err) {
				t.Errorf("the report's snapshot %+v, the cache's %+v", r.Snapshot, tt.cache.last)
			}
		})
	}
}

// cycles runs l until it returns or has run n cycles, and reports each cycle's LastBeat.
func cycles(t *testing.T, l *Loop, n int, within time.Duration) (beats []time.Time, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l.OnCycle = func(Report) {
		beats = append(beats, l.LastBeat())
		if len(beats) == n {
			cancel()
		}
	}
	began := time.Now()
	if err := l.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return beats, time.Since(began)
}

// The heartbeat counts only cycles whose snapshot succeeded: a replica whose snapshots keep
// failing schedules nothing and must go stale.
func TestBeatOnlyOnASuccessfulSnapshot(t *testing.T) {
	failed := errors.New("the sidecar did not answer")
	c := &fakeCache{snapshotErrs: []error{failed, nil, failed, failed}}
	l := newLoop(t, c)
	if !l.LastBeat().IsZero() {
		t.Fatalf("a beat before Run: %v", l.LastBeat())
	}
	began := time.Now()
	beats, _ := cycles(t, l, 4, 10*time.Second)
	if len(beats) != 4 {
		t.Fatalf("%d cycles, want 4", len(beats))
	}
	at := c.snapshots
	// before any good snapshot the beat is Run's start: the staleness window counts from there
	if beats[0].Before(began.Add(-time.Millisecond)) || beats[0].After(at[0]) {
		t.Errorf("after a failed first snapshot the beat is %v; Run began %v, the snapshot was at %v", beats[0], began, at[0])
	}
	if !beats[1].After(at[1]) {
		t.Errorf("after a good snapshot the beat is %v, not after it (%v)", beats[1], at[1])
	}
	if !beats[2].Equal(beats[1]) || !beats[3].Equal(beats[1]) {
		t.Errorf("failed snapshots moved the beat: %v", beats)
	}
}

func TestExitWhenIdle(t *testing.T) {
	bound := logcache.Verdicts{Groups: 1, Admitted: 1, Binds: 2}
	failed := errors.New("the sidecar did not answer")
	tests := []struct {
		name      string
		cache     *fakeCache
		exitAfter int
		want      int // cycles run
	}{
		{"quiet from the start", &fakeCache{}, 3, 3},
		{"a cycle that bound is not idle", &fakeCache{verdicts: []logcache.Verdicts{{}, bound}}, 3, 5},
		{"a failed cycle is not idle", &fakeCache{snapshotErrs: []error{nil, failed}}, 2, 4},
		{"one", &fakeCache{}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLoop(t, tt.cache)
			l.ExitWhenIdle = tt.exitAfter
			beats, _ := cycles(t, l, 100, 10*time.Second)
			if len(beats) != tt.want {
				t.Errorf("%d cycles, want %d", len(beats), tt.want)
			}
		})
	}
}

// A cycle whose group the fold rejected (a race lost) starts the next at once, on the newer
// version; any other waits for the period.
func TestARejectedGroupStartsTheNextCycleAtOnce(t *testing.T) {
	tests := []struct {
		name     string
		first    logcache.Verdicts
		period   time.Duration
		min, max time.Duration // between the two cycles' snapshots
	}{
		{"rejected", logcache.Verdicts{Groups: 1, Rejected: 1, Reasons: map[string]int{"node n1 is full": 1}}, time.Hour, 0, 2 * time.Second},
		{"admitted", logcache.Verdicts{Groups: 1, Admitted: 1, Binds: 2}, 300 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeCache{verdicts: []logcache.Verdicts{tt.first}}
			l := newLoop(t, c)
			l.Period = tt.period
			beats, _ := cycles(t, l, 2, 3*time.Second)
			if len(beats) != 2 {
				t.Fatalf("%d cycles in 3 s, want 2", len(beats))
			}
			if gap := c.snapshots[1].Sub(c.snapshots[0]); gap < tt.min || gap > tt.max {
				t.Errorf("the second cycle began %v after the first, want within [%v, %v]", gap, tt.min, tt.max)
			}
		})
	}
}
