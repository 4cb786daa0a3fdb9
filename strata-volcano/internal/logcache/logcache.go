// Package logcache implements Volcano's cache.Cache on Strata's cache log.
//
// Snapshot builds the ClusterInfo from the full objects of the log (package objects, package
// clusterinfo) at a version the sidecar's fold has reached too, with the fold's overlays at that
// version. AddBindTask buffers a job's binds; Flush publishes one BIND_GROUP per job when the
// session's actions are done with it and learns each verdict from the fold at that record's
// offset; a rejected group is taken back out of the session before CloseSession writes statuses,
// so UpdateJobStatus never reports a PodGroup Running on binds the log did not admit. Evict
// publishes EVICT and waits for its verdict the same way.
package logcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingscheme "volcano.sh/apis/pkg/apis/scheduling/scheme"
	vcv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"
	vcscheme "volcano.sh/apis/pkg/client/clientset/versioned/scheme"
	"volcano.sh/volcano/pkg/scheduler/api"
	schedcache "volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/capabilities/volumebinding"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"strata.local/volcano/internal/avrolog"
	"strata.local/volcano/internal/cachelog"
	"strata.local/volcano/internal/clusterinfo"
	"strata.local/volcano/internal/objects"
	"strata.local/volcano/internal/sidecar"
)

var (
	groupsPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_volcano_bind_groups", Help: "BIND_GROUPs this replica published, by the fold's verdict",
	}, []string{"outcome"})
	bindsPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_volcano_binds", Help: "binds in this replica's BIND_GROUPs, by the fold's verdict",
	}, []string{"outcome"})
	evictsPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_volcano_evicts", Help: "EVICTs this replica published, by the fold's verdict",
	}, []string{"outcome"})
	snapshotSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "strata_volcano_snapshot_seconds", Help: "building Volcano's ClusterInfo from the log",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	snapshotVersion = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "strata_volcano_snapshot_version", Help: "the version of the last snapshot",
	})
	statusWrites = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_volcano_status_writes", Help: "status patches of PodGroups and Queues sent to the API server, by kind and outcome",
	}, []string{"kind", "outcome"})
	statusSkipped = promauto.NewCounter(prometheus.CounterOpts{
		Name: "strata_volcano_status_writes_skipped",
		Help: "PodGroup status writes left out because they reported binds the log did not admit",
	})
)

// Config of one replica's cache.
type Config struct {
	Context       context.Context // ends the API writes in flight when the replica stops
	Replica       string
	Fold          clusterinfo.Config
	VerdictWithin time.Duration // how long to wait for the fold's verdict on a record
}

// group is one BIND_GROUP: the binds of one job's commit (and of the commits right after it,
// while no other job's bind came between).
type group struct {
	job   api.JobID
	tasks []*api.TaskInfo
	// a primary group is published as soon as the next job's bind seals it, while the actions
	// go on; done closes when the log answered, with offset (or NotAppended) and err
	done   chan struct{}
	offset int64
	err    error
}

// Verdicts of one Flush.
type Verdicts struct {
	Groups, Admitted, Rejected int // BIND_GROUPs in the log, and the fold's verdicts on them
	Unpublished                int // BIND_GROUPs the log did not take (taken back)
	Binds                      int // binds admitted
	Reasons                    map[string]int
}

// Appender appends records to the cache log (cachelog.Writer): an offset per value, or
// cachelog.NotAppended where the log did not take it.
type Appender interface {
	Append(ctx context.Context, values [][]byte) ([]int64, error)
	// AppendAsync appends one value after every value given before, and calls done with its
	// offset (or NotAppended and the error) once the log answered.
	AppendAsync(ctx context.Context, value []byte, done func(offset int64, err error))
}

// Fold is what the sidecar's fold answers (sidecar.Client).
type Fold interface {
	State(ctx context.Context, minVersion int64) (sidecar.State, error)
	Outcomes(ctx context.Context, offsets []int64) (map[int64]sidecar.Outcome, error)
}

var (
	_ Appender = (*cachelog.Writer)(nil)
	_ Fold     = (*sidecar.Client)(nil)
)

// Cache is cache.Cache on the cache log.
type Cache struct {
	cfg      Config
	store    *objects.Store
	builder  *clusterinfo.Builder
	side     Fold
	writer   Appender
	catalog  *avrolog.Catalog
	kube     kubernetes.Interface
	vc       vcclient.Interface
	rest     *rest.Config
	factory  informers.SharedInformerFactory
	recorder record.EventRecorder

	mu         sync.Mutex
	open       *group               // the group binds are added to
	groups     []*group             // sealed primary groups, in the order they were published
	sealed     map[api.JobID]*group // each job's primary group
	extras     []*group             // later commits of a job already sealed: held for its verdict
	extraOf    map[api.JobID]*group
	rejected   map[api.JobID]string // this session's rejected groups, by job
	minVersion int64                // past this replica's own records: the next snapshot sees them
	lastStats  clusterinfo.Stats
	lastErr    error
	lastTook   time.Duration
	lastAsk    time.Duration // of lastTook, asking the sidecar
	lastAt     int64         // the version of the last snapshot
	// each queue's status.allocated as the log has it: Volcano overwrites the session's copy
	// before UpdateQueueStatus, and a resource it no longer allocates must be removed
	loggedAllocated map[api.QueueID]v1.ResourceList
	prepared        *api.ClusterInfo // built by Prepare, handed out by the next Snapshot
	acts            int              // what this session published or wrote (binds, evicts, statuses)
}

var _ schedcache.Cache = (*Cache)(nil)

// New wires a cache; the store must be followed by the caller (objects.Store.Follow).
func New(cfg Config, store *objects.Store, side Fold, writer Appender,
	catalog *avrolog.Catalog, restConfig *rest.Config) (*Cache, error) {
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	vc, err := vcclient.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the Volcano client: %w", err)
	}
	// Never started: the plugins' listers read only what is added to the indexers (CSINodes,
	// from the log); the other kinds (namespaces, services, PVCs, ...) are not in the log.
	factory := informers.NewSharedInformerFactory(kube, 0)
	factory.Core().V1().Namespaces().Informer()
	factory.Core().V1().Services().Informer()
	factory.Core().V1().PersistentVolumeClaims().Informer()
	factory.Core().V1().PersistentVolumes().Informer()
	factory.Storage().V1().StorageClasses().Informer()
	factory.Policy().V1().PodDisruptionBudgets().Informer()
	builder := clusterinfo.NewBuilder(cfg.Fold)
	builder.CSINodeIndexer = factory.Storage().V1().CSINodes().Informer().GetIndexer()

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(vcscheme.Scheme, v1.EventSource{Component: "strata-volcano", Host: cfg.Replica})
	if cfg.VerdictWithin <= 0 {
		cfg.VerdictWithin = 60 * time.Second
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	return &Cache{
		cfg: cfg, store: store, builder: builder, side: side, writer: writer, catalog: catalog,
		kube: kube, vc: vc, rest: restConfig, factory: factory, recorder: recorder,
		sealed: map[api.JobID]*group{}, extraOf: map[api.JobID]*group{}, rejected: map[api.JobID]string{},
	}, nil
}

// Run does nothing: the store follows the log from the start of the process.
func (c *Cache) Run(stopCh <-chan struct{}) {}

// WaitForCacheSync blocks until the store is ready (every kind SYNCED, caught up with the
// log's end as of start) and so is the sidecar's fold.
func (c *Cache) WaitForCacheSync(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.WaitReady(ctx); err != nil {
		klog.Errorf("waiting for the cache: %v", err)
	}
}

// WaitReady is WaitForCacheSync with a context and an error.
func (c *Cache) WaitReady(ctx context.Context) error {
	if err := c.store.WaitReady(ctx); err != nil {
		return err
	}
	for {
		if c.sidecarReason(ctx, c.store.Version(), 10*time.Second) == "" {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sidecarReason is why the sidecar's fold is not ready at minVersion ("" once it is).
func (c *Cache) sidecarReason(ctx context.Context, minVersion int64, within time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	st, err := c.side.State(ctx, minVersion)
	if err != nil {
		return err.Error()
	}
	if st.Reason != nil {
		return "sidecar: " + *st.Reason
	}
	return ""
}

// SnapshotReport is what the last Snapshot did.
type SnapshotReport struct {
	Version int64
	Took    time.Duration
	Sidecar time.Duration // of Took, the sidecar's answer (version, overlays)
	Stats   clusterinfo.Stats
	Err     error
}

// LastSnapshot says what the last Snapshot built, how long it took, and its error.
func (c *Cache) LastSnapshot() SnapshotReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return SnapshotReport{Version: c.lastAt, Took: c.lastTook, Sidecar: c.lastAsk, Stats: c.lastStats, Err: c.lastErr}
}

// Prepare builds the next session's ClusterInfo now (the next Snapshot hands it over) and
// says whether that session would be the last one again: nothing in the log or the overlays
// changed since, the last session left every node and job as it was built, and it published
// and wrote nothing. Volcano's session is then the same function of the same input, and the
// loop may leave it out (docs/volcano.md: which plugins make a session depend on the clock).
func (c *Cache) Prepare() (again bool) {
	c.mu.Lock()
	c.prepared = nil // one a skipped session left is no longer current
	quiet := c.acts == 0
	c.mu.Unlock()
	ci, err := c.take(quiet)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prepared = ci
	return err == nil && ci == nil
}

// acted notes that this session published or wrote something.
func (c *Cache) acted() {
	c.mu.Lock()
	c.acts++
	c.mu.Unlock()
}

// Snapshot is Volcano's ClusterInfo at a version both the store and the sidecar's fold have
// reached (at least past this replica's own records), with the fold's overlays at it.
// On failure it is empty: the session then decides nothing.
func (c *Cache) Snapshot() *api.ClusterInfo {
	c.mu.Lock()
	if ci := c.prepared; ci != nil {
		c.prepared = nil
		c.mu.Unlock()
		return ci
	}
	c.mu.Unlock()
	ci, err := c.take(false)
	if err != nil {
		return &api.ClusterInfo{
			Nodes: map[string]*api.NodeInfo{}, Jobs: map[api.JobID]*api.JobInfo{},
			Queues: map[api.QueueID]*api.QueueInfo{}, NamespaceInfo: map[api.NamespaceName]*api.NamespaceInfo{},
			RevocableNodes: map[string]*api.NodeInfo{}, CSINodesStatus: map[string]*api.CSINodeStatusInfo{},
		}
	}
	return ci
}

// take is one snapshot, reported in LastSnapshot; with unlessUnchanged, none (nil) when the
// builder finds nothing changed since the last.
func (c *Cache) take(unlessUnchanged bool) (*api.ClusterInfo, error) {
	started := time.Now()
	ci, version, stats, err := c.snapshot(context.Background(), unlessUnchanged)
	c.mu.Lock()
	c.lastStats, c.lastErr, c.lastTook, c.lastAt = stats, err, time.Since(started), version
	c.mu.Unlock()
	if err != nil {
		klog.Errorf("snapshot: %v", err)
		return nil, err
	}
	snapshotSeconds.Observe(time.Since(started).Seconds())
	return ci, nil
}

func (c *Cache) snapshot(ctx context.Context, unlessUnchanged bool) (*api.ClusterInfo, int64, clusterinfo.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.VerdictWithin)
	defer cancel()
	held := c.store.Hold() // the store stays here until Read takes it to the fold's version
	c.mu.Lock()
	want := max(held, c.minVersion)
	c.mu.Unlock()
	asked := time.Now()
	st, err := c.side.State(ctx, want)
	c.mu.Lock()
	c.lastAsk = time.Since(asked)
	c.mu.Unlock()
	if err != nil {
		c.store.Release()
		return nil, 0, clusterinfo.Stats{}, err
	}
	if st.Reason != nil {
		c.store.Release()
		return nil, 0, clusterinfo.Stats{}, fmt.Errorf("the sidecar's fold is not ready: %s", *st.Reason)
	}
	overlays := make(map[string]clusterinfo.Overlay, len(st.Overlays))
	for _, o := range st.Overlays {
		status := api.Binding
		if o.Status == "Releasing" {
			status = api.Releasing
		}
		overlays[o.Pod] = clusterinfo.Overlay{Status: status, Node: o.Node}
	}
	var ci *api.ClusterInfo
	var stats clusterinfo.Stats
	err = c.store.Read(ctx, st.Version, func(v objects.View) error {
		stats = c.builder.Refresh(v, overlays)
		if !unlessUnchanged || !stats.Unchanged {
			ci = c.builder.Assemble(v, &stats)
		}
		return nil
	})
	if err != nil {
		return nil, 0, stats, fmt.Errorf("reading the log at the fold's version %d: %w", st.Version, err)
	}
	if ci != nil {
		logged := make(map[api.QueueID]v1.ResourceList, len(ci.Queues))
		for id, q := range ci.Queues {
			logged[id] = q.Queue.Status.Allocated.DeepCopy()
		}
		c.mu.Lock()
		c.loggedAllocated = logged
		c.mu.Unlock()
	}
	snapshotVersion.Set(float64(st.Version))
	klog.V(3).Infof("snapshot at version %d: %d nodes, %d jobs, %d tasks, %d overlays, %d decoded",
		st.Version, stats.Nodes, stats.Jobs, stats.Tasks, stats.Overlays, stats.Decoded)
	return ci, st.Version, stats, nil
}

// BeginSession forgets the last session's buffers, verdicts and acts.
func (c *Cache) BeginSession() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.groups, c.extras, c.rejected, c.acts = nil, nil, nil, map[api.JobID]string{}, 0
	c.sealed, c.extraOf = map[api.JobID]*group{}, map[api.JobID]*group{}
}

// AddBindTask adds the bind to its job's group. A bind of another job seals the group before
// and publishes it at once, while the actions go on (Volcano commits a job's binds together),
// so the binder starts on the first gang while the session places the rest. A bind of a job
// whose group is already sealed goes into a group held until Flush, published only if the
// job's first group is admitted: on its own it could place a gang below its minMember.
func (c *Cache) AddBindTask(task *api.TaskInfo) error {
	if task.NodeName == "" {
		return fmt.Errorf("task %s/%s has no node to bind to", task.Namespace, task.Name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open != nil && c.open.job != task.Job {
		c.sealLocked()
	}
	if c.open == nil {
		if _, sealed := c.sealed[task.Job]; sealed {
			e := c.extraOf[task.Job]
			if e == nil {
				e = &group{job: task.Job}
				c.extraOf[task.Job] = e
				c.extras = append(c.extras, e)
			}
			e.tasks = append(e.tasks, task)
			return nil
		}
		c.open = &group{job: task.Job}
	}
	c.open.tasks = append(c.open.tasks, task)
	return nil
}

// sealLocked publishes the open group without waiting for the log (lock held).
func (c *Cache) sealLocked() {
	g := c.open
	c.open = nil
	c.sealed[g.job] = g
	c.groups = append(c.groups, g)
	g.done = make(chan struct{})
	value, err := c.encode(g)
	if err != nil {
		g.offset, g.err = cachelog.NotAppended, err
		close(g.done)
		return
	}
	c.writer.AppendAsync(c.cfg.Context, value, func(offset int64, err error) {
		g.offset, g.err = offset, err
		close(g.done)
	})
}

func (c *Cache) encode(g *group) ([]byte, error) {
	replica := c.cfg.Replica
	rec := avrolog.BindGroup{Replica: &replica}
	for _, t := range g.tasks {
		rec.Binds = append(rec.Binds, avrolog.GroupBind{Pod: string(t.UID), Node: t.NodeName, Extensions: map[string]string{}})
	}
	return c.catalog.Encode("strata.log.BindGroup", rec)
}

// Flush seals the last group, waits for the log to have answered every group published
// during the actions, asks the fold's verdict on each and takes every group the log did not
// take, or the fold rejected, back out of the session; then the same for the held groups of
// jobs whose first group was admitted (the others are taken back unpublished). Call it after
// the actions, before framework.CloseSession.
func (c *Cache) Flush(ctx context.Context, ssn *framework.Session) (Verdicts, error) {
	c.mu.Lock()
	if c.open != nil {
		c.sealLocked()
	}
	groups, extras := c.groups, c.extras
	c.groups, c.extras, c.sealed, c.extraOf = nil, nil, map[api.JobID]*group{}, map[api.JobID]*group{}
	c.mu.Unlock()
	v := Verdicts{Reasons: map[string]int{}}
	if len(groups) == 0 {
		return v, nil
	}
	c.acted()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.VerdictWithin)
	defer cancel()
	offsets := make([]int64, len(groups))
	var appendErr error
	for i, g := range groups {
		select {
		case <-g.done:
			offsets[i] = g.offset
			if g.err != nil {
				offsets[i] = cachelog.NotAppended
				appendErr = errors.Join(appendErr, g.err)
			}
		case <-ctx.Done():
			offsets[i] = cachelog.NotAppended // its verdict, if it reaches the log, is the next snapshot's
			appendErr = errors.Join(appendErr, fmt.Errorf("the log did not answer the BIND_GROUP of %s: %w", g.job, ctx.Err()))
		}
	}
	admitted, err := c.judge(ctx, ssn, groups, offsets, &v)
	appendErr = errors.Join(appendErr, err)
	if len(extras) == 0 {
		return v, appendErr
	}
	var follow []*group
	for _, e := range extras {
		if admitted[e.job] {
			follow = append(follow, e)
			continue
		}
		c.takeBack(ssn, []*group{e}, "its job's first group was not admitted")
	}
	if len(follow) == 0 {
		return v, appendErr
	}
	values := make([][]byte, len(follow))
	for i, g := range follow {
		if values[i], err = c.encode(g); err != nil {
			c.takeBack(ssn, follow, "not published")
			return v, errors.Join(appendErr, err)
		}
	}
	offsets, err = c.writer.Append(ctx, values)
	_, judged := c.judge(ctx, ssn, follow, offsets, &v)
	return v, errors.Join(appendErr, err, judged)
}

// judge takes back each group the log did not take (offset NotAppended), asks the fold's
// verdicts on the others, counts them into v and takes back the rejected; it says which jobs
// had a group admitted.
func (c *Cache) judge(ctx context.Context, ssn *framework.Session, groups []*group, offsets []int64,
	v *Verdicts) (map[api.JobID]bool, error) {
	admitted := map[api.JobID]bool{}
	var published []int64
	for i, g := range groups {
		if offsets[i] == cachelog.NotAppended {
			c.takeBack(ssn, []*group{g}, "not published")
			groupsPublished.WithLabelValues("not_published").Inc()
			v.Unpublished++
			continue
		}
		published = append(published, offsets[i])
	}
	if len(published) == 0 {
		return admitted, nil
	}
	outcomes, err := c.side.Outcomes(ctx, published)
	if err != nil {
		for i, g := range groups {
			if offsets[i] != cachelog.NotAppended {
				c.takeBack(ssn, []*group{g}, "no verdict")
			}
		}
		return admitted, fmt.Errorf("the fold's verdicts on offsets %v: %w", published, err)
	}
	c.mu.Lock()
	c.minVersion = max(c.minVersion, slices.Max(published)+1)
	c.mu.Unlock()
	v.Groups += len(published)
	for i, g := range groups {
		if offsets[i] == cachelog.NotAppended {
			continue
		}
		o := outcomes[offsets[i]]
		if o.Result == "applied" {
			admitted[g.job] = true
			v.Admitted++
			v.Binds += len(g.tasks)
			groupsPublished.WithLabelValues("admitted").Inc()
			bindsPublished.WithLabelValues("admitted").Add(float64(len(g.tasks)))
			continue
		}
		v.Rejected++
		v.Reasons[o.Reason]++
		groupsPublished.WithLabelValues("rejected").Inc()
		bindsPublished.WithLabelValues("rejected").Add(float64(len(g.tasks)))
		klog.V(2).Infof("BIND_GROUP of %s at offset %d %s: %s", g.job, offsets[i], o.Result, o.Reason)
		c.takeBack(ssn, []*group{g}, o.Result+": "+o.Reason)
	}
	return admitted, nil
}

// takeBack returns a group's tasks to Pending in the session, off their nodes, so that the
// statuses CloseSession writes tell what the log admitted.
func (c *Cache) takeBack(ssn *framework.Session, groups []*group, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		c.rejected[g.job] = reason
		job := ssn.Jobs[g.job]
		for _, t := range g.tasks {
			if node := ssn.Nodes[t.NodeName]; node != nil {
				if err := node.RemoveTask(t); err != nil {
					klog.V(4).Infof("taking %s/%s off node %s: %v", t.Namespace, t.Name, t.NodeName, err)
				}
			}
			if job != nil {
				if err := job.UpdateTaskStatus(t, api.Pending); err != nil {
					klog.V(4).Infof("returning %s/%s to Pending: %v", t.Namespace, t.Name, err)
				}
			}
			t.NodeName = ""
			t.Pod.Spec.NodeName = ""
		}
	}
}

// Evict publishes EVICT and returns the fold's verdict (an error when it is not applied).
func (c *Cache) Evict(task *api.TaskInfo, reason string) error {
	ctx, cancel := context.WithTimeout(c.cfg.Context, c.cfg.VerdictWithin)
	defer cancel()
	replica := c.cfg.Replica
	value, err := c.catalog.Encode("strata.log.Evict", avrolog.Evict{Pod: string(task.UID), Reason: &reason, Replica: &replica})
	if err != nil {
		return err
	}
	offsets, err := c.writer.Append(ctx, [][]byte{value})
	if err != nil {
		return err // one record: not in the log
	}
	c.acted()
	outcomes, err := c.side.Outcomes(ctx, offsets)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.minVersion = max(c.minVersion, offsets[0]+1)
	c.mu.Unlock()
	o := outcomes[offsets[0]]
	evictsPublished.WithLabelValues(o.Result).Inc()
	if o.Result != "applied" {
		return fmt.Errorf("EVICT of %s/%s at offset %d %s: %s", task.Namespace, task.Name, offsets[0], o.Result, o.Reason)
	}
	return nil
}

// BindPodGroup (multi-cluster forwarding) is not supported on the cache log.
func (c *Cache) BindPodGroup(job *api.JobInfo, cluster string) error {
	return errors.New("BindPodGroup (forwarding to another cluster) is not supported by strata-volcano")
}

// RecordJobStatusEvent is Volcano's, without the pods' PodScheduled conditions: replicas that
// disagree on a fit error would rewrite every pending pod each cycle.
func (c *Cache) RecordJobStatusEvent(job *api.JobInfo, updatePG bool) {
	if job.PodGroup == nil {
		return
	}
	phase := job.PodGroup.Status.Phase
	unschedulable := phase == scheduling.PodGroupUnknown || phase == scheduling.PodGroupPending || phase == scheduling.PodGroupInqueue
	if unschedulable {
		msg := fmt.Sprintf("%v/%v tasks in gang unschedulable: %v",
			len(job.TaskStatusIndex[api.Pending]), len(job.Tasks), job.FitError())
		c.recordPodGroupEvent(job.PodGroup, v1.EventTypeWarning, string(scheduling.PodGroupUnschedulableType), msg)
	} else if updatePG {
		c.recordPodGroupEvent(job.PodGroup, v1.EventTypeNormal, string(scheduling.PodGroupScheduled), string(scheduling.PodGroupReady))
	}
}

func (c *Cache) recordPodGroupEvent(pg *api.PodGroup, eventType, reason, msg string) {
	out := &vcv1beta1.PodGroup{}
	if err := schedulingscheme.Scheme.Convert(&pg.PodGroup, out, nil); err != nil {
		klog.Errorf("converting PodGroup %s/%s: %v", pg.Namespace, pg.Name, err)
		return
	}
	c.recorder.Eventf(out, eventType, reason, msg)
}

// unadmitted says why a PodGroup status must not be written: it reports a gang Running (or
// Completed) that the log has not admitted. Flush has taken rejected groups back out of the
// session, so this only catches what slipped past it.
func (c *Cache) unadmitted(job *api.JobInfo) string {
	phase := job.PodGroup.Status.Phase
	if phase != scheduling.PodGroupRunning && phase != scheduling.PodGroupCompleted {
		return ""
	}
	allocated := 0
	for status, tasks := range job.TaskStatusIndex {
		if api.AllocatedStatus(status) || status == api.Succeeded {
			allocated += len(tasks)
		}
	}
	c.mu.Lock()
	reason, rejected := c.rejected[job.UID]
	c.mu.Unlock()
	if rejected && int32(allocated) < job.PodGroup.Spec.MinMember {
		return fmt.Sprintf("%s: its group was %s", phase, reason)
	}
	return ""
}

// UpdateJobStatus writes the PodGroup's status, and only its status, as a JSON merge patch
// carrying the resourceVersion the log had (a replica with an older view gets a conflict and
// writes again next cycle, as with Volcano's plain update), then records its event. Volcano's
// job updater calls it with updatePG only when the status differs from the snapshot's. The
// object is never written whole: the log's copy is redacted (no last-applied-configuration)
// and the vendored types drop the fields they do not know.
func (c *Cache) UpdateJobStatus(job *api.JobInfo, updatePG bool) (*api.JobInfo, error) {
	if updatePG {
		if why := c.unadmitted(job); why != "" {
			statusSkipped.Inc()
			klog.Warningf("not writing PodGroup %s/%s: %s", job.Namespace, job.Name, why)
			return job, nil
		}
		patch, err := PodGroupStatusPatch(job.PodGroup)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(c.cfg.Context, 30*time.Second)
		defer cancel()
		updated, err := c.vc.SchedulingV1beta1().PodGroups(job.Namespace).Patch(
			ctx, job.PodGroup.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		statusWrites.WithLabelValues("PodGroup", outcome(err)).Inc()
		// a write that failed changed nothing: a repeat of this session would try it again,
		// and so will the next session that runs (a change, or --full-session-every)
		if err != nil {
			return nil, fmt.Errorf("patching the status of PodGroup %s/%s: %w", job.Namespace, job.PodGroup.Name, err)
		}
		info := &api.PodGroup{Version: api.PodGroupVersionV1Beta1}
		if err := schedulingscheme.Scheme.Convert(updated, &info.PodGroup, nil); err != nil {
			return nil, fmt.Errorf("converting PodGroup %s/%s: %w", updated.Namespace, updated.Name, err)
		}
		job.PodGroup = info
		c.acted()
	}
	c.RecordJobStatusEvent(job, updatePG)
	return job, nil
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "written"
}

// PodGroupStatusPatch is the merge patch of a PodGroup's status: every field of the vendored
// status named (zero counts and an empty phase too, so that a stale value is replaced, not
// kept), the log's resourceVersion as the precondition, nothing else of the object.
func PodGroupStatusPatch(pg *api.PodGroup) ([]byte, error) {
	out := &vcv1beta1.PodGroup{}
	if err := schedulingscheme.Scheme.Convert(&pg.PodGroup, out, nil); err != nil {
		return nil, fmt.Errorf("converting PodGroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	st := out.Status
	var conditions any // null clears them
	if len(st.Conditions) > 0 {
		conditions = st.Conditions
	}
	body := map[string]any{"status": map[string]any{
		"phase": st.Phase, "conditions": conditions,
		"running": st.Running, "succeeded": st.Succeeded, "failed": st.Failed,
	}}
	if out.ResourceVersion != "" {
		body["metadata"] = map[string]any{"resourceVersion": out.ResourceVersion}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the status of PodGroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return data, nil
}

// UpdateQueueStatus patches the Queue's status subresource with what Volcano changed: the
// allocated resources (a resource no longer allocated is removed), under the log's
// resourceVersion. Volcano computes it from the session's Running tasks, which come from the
// pods in the log, never from binds in flight; it calls this only when they changed.
func (c *Cache) UpdateQueueStatus(queue *api.QueueInfo) error {
	c.mu.Lock()
	logged := c.loggedAllocated[queue.UID]
	c.mu.Unlock()
	patch, err := QueueStatusPatch(queue, logged)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.cfg.Context, 30*time.Second)
	defer cancel()
	_, err = c.vc.SchedulingV1beta1().Queues().Patch(ctx, queue.Queue.Name, types.MergePatchType, patch,
		metav1.PatchOptions{}, "status")
	statusWrites.WithLabelValues("Queue", outcome(err)).Inc()
	if err != nil {
		return fmt.Errorf("patching the status of Queue %s: %w", queue.Name, err)
	}
	c.acted()
	return nil
}

// QueueStatusPatch is the merge patch of a Queue's status.allocated: the session's figures,
// and null for each resource the log's copy had that the session no longer allocates.
func QueueStatusPatch(queue *api.QueueInfo, logged v1.ResourceList) ([]byte, error) {
	out := &vcv1beta1.Queue{}
	if err := schedulingscheme.Scheme.Convert(queue.Queue, out, nil); err != nil {
		return nil, fmt.Errorf("converting Queue %s: %w", queue.Name, err)
	}
	allocated := map[string]any{}
	for name := range logged {
		allocated[string(name)] = nil
	}
	for name, q := range out.Status.Allocated {
		allocated[string(name)] = q.String()
	}
	body := map[string]any{"status": map[string]any{"allocated": allocated}}
	if out.ResourceVersion != "" {
		body["metadata"] = map[string]any{"resourceVersion": out.ResourceVersion}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the status of Queue %s: %w", queue.Name, err)
	}
	return data, nil
}

// GetPodVolumes: the log carries no PVCs or PVs; strata-volcano binds no volumes.
func (c *Cache) GetPodVolumes(task *api.TaskInfo, node *v1.Node) (*volumebinding.PodVolumes, error) {
	return nil, nil
}

// AllocateVolumes does nothing (see GetPodVolumes).
func (c *Cache) AllocateVolumes(task *api.TaskInfo, hostname string, podVolumes *volumebinding.PodVolumes) error {
	return nil
}

// BindVolumes does nothing (see GetPodVolumes).
func (c *Cache) BindVolumes(task *api.TaskInfo, volumes *volumebinding.PodVolumes) error { return nil }

// RevertVolumes does nothing (see GetPodVolumes).
func (c *Cache) RevertVolumes(task *api.TaskInfo, podVolumes *volumebinding.PodVolumes) {}

// Client is the Kubernetes client of status writes and events.
func (c *Cache) Client() kubernetes.Interface { return c.kube }

// ClientConfig is its rest config.
func (c *Cache) ClientConfig() *rest.Config { return c.rest }

// UpdateSchedulerNumaInfo: NUMA topology is not in the log.
func (c *Cache) UpdateSchedulerNumaInfo(sets map[string]api.ResNumaSets) error { return nil }

// SharedInformerFactory is never started: its listers hold what the log feeds them.
func (c *Cache) SharedInformerFactory() informers.SharedInformerFactory { return c.factory }

// SetMetricsConf: node usage metrics (a metrics server) are not read.
func (c *Cache) SetMetricsConf(conf map[string]string) {}

// EventRecorder records PodGroup events through the API.
func (c *Cache) EventRecorder() record.EventRecorder { return c.recorder }
