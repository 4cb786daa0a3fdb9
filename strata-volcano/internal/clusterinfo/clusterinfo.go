// Package clusterinfo builds Volcano's api.ClusterInfo from the full objects of the cache log
// at one version, with Volcano's own constructors (api.NewNodeInfo, api.NewTaskInfo,
// api.NewJobInfo + SetPodGroup, api.NewQueueInfo) and the filters of Volcano's
// SchedulerCache.Snapshot (ready nodes; jobs with a PodGroup whose queue is stored), plus the
// fold's overlays at the same version: tasks that an admitted BIND put in Binding on a node, or
// an applied EVICT in Releasing. Objects are decoded once per change; a snapshot clones them.
package clusterinfo

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"
	k8sframework "k8s.io/kubernetes/pkg/scheduler/framework"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"

	"volcano.sh/apis/pkg/apis/scheduling"
	"volcano.sh/apis/pkg/apis/scheduling/scheme"
	vcv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/api"

	"strata.local/volcano/internal/objects"
)

// defaultAttachableVolumeQuantity is Volcano's limit for CSI drivers without one.
const defaultAttachableVolumeQuantity int64 = 2147483647

// Config is what the fold's result depends on besides the records: the same flags as the
// sidecar's and the binder's.
type Config struct {
	SchedulerNames []string
	DefaultQueue   string
}

// Overlay is what the fold lays over a task: Binding (an admitted BIND) or Releasing (an
// applied EVICT), on a node.
type Overlay struct {
	Status api.TaskStatus
	Node   string
}

// Stats says what one Build did.
type Stats struct {
	Decoded   int // objects decoded because they changed since the last build
	Undecoded int // stored objects that are no valid object of their kind (left out)
	Nodes     int
	Jobs      int
	Tasks     int
	Overlays  int
	NotPlaced int // tasks a node refused (api.NodeInfo.AddTask: an overlay Volcano finds too big)
	// what the build made anew, and why; the rest of the ClusterInfo is the last build's
	NodesBuilt, JobsBuilt     int
	NodesTouched, JobsTouched int // of those, changed by the last session (found by Build's scan)
	TasksMoved                int // tasks whose pod or overlay changed since the last build
	Full                      bool
	// Unchanged: no object of the log and no overlay changed since the last build, and the
	// last session left every node and job as the build made it: the ClusterInfo is the last one
	Unchanged bool
}

type podCache struct {
	entry    *objects.Entry
	nodeName string // spec.nodeName as the log has it: a session may change the shared pod's
	template *api.TaskInfo
	accepted bool // the cache's scheduler names, or already on a node
	// where the last build put the task: its status and node (the overlay's, or the pod's),
	// and the node and job whose indexes hold it
	status         api.TaskStatus
	node           string
	onNode         string
	inJob          api.JobID
	overlaid       bool
	placed, listed bool
}

type nodeCache struct {
	entry, csi *objects.Entry
	base       *v1.Node // as the log has it
	node       *v1.Node // with the CSINode's attach limits, as Volcano's SyncNode sets them
}

type pgCache struct {
	entry *objects.Entry
	pg    *scheduling.PodGroup
}

type queueCache struct {
	entry *objects.Entry
	queue *scheduling.Queue
}

type pcCache struct {
	entry *objects.Entry
	pc    *schedulingv1.PriorityClass
}

type csiCache struct {
	entry *objects.Entry
	csi   *storagev1.CSINode
}

// built is what a node looked like when Build made it: a session that leaves it otherwise
// changed it (Statement.Allocate, Evict, Pipeline and what they undo).
type built struct {
	tasks                            int
	idle, used, releasing, pipelined *api.Resource
	notPlaced                        int
}

// Builder keeps the decoded objects between builds, and the ClusterInfo's nodes and jobs: a
// build makes anew only those whose objects or overlays changed since the last build, or that
// the last session changed (a scan compares each with what the build made). Not safe for
// concurrent use; a session must be over before the next Build.
type Builder struct {
	cfg       Config
	pods      map[string]*podCache
	nodes     map[string]*nodeCache
	podGroups map[string]*pgCache
	queues    map[string]*queueCache
	pcs       map[string]*pcCache
	csiNodes  map[string]*csiCache
	bad       map[*objects.Entry]bool
	// CSINodeIndexer, when set, holds the stored CSINodes for the plugins' listers.
	CSINodeIndexer cache.Indexer

	byUID    map[api.TaskID]*podCache
	onNode   map[string]map[*podCache]struct{}
	inJob    map[api.JobID]map[*podCache]struct{}
	infos    map[string]*api.NodeInfo
	made     map[string]*built
	jobs     map[api.JobID]*api.JobInfo
	jobMade  map[api.JobID]*[2]*api.Resource // each job's Allocated and TotalRequest as built
	overlays map[string]Overlay
	images   map[string]*k8sframework.ImageStateSummary
	dirtyN   map[string]bool
	dirtyJ   map[api.JobID]bool
	imagesOK bool
	first    bool
	queued   []string // pods whose cache entry changed in this build's refresh
	skipScan bool     // a breakage for the tests: trust that no session changed anything
	// handedOut: a ClusterInfo went to a session since the last scan
	handedOut bool
}

// NewBuilder builds with the fold's settings.
func NewBuilder(cfg Config) *Builder {
	return &Builder{
		cfg:       cfg,
		pods:      map[string]*podCache{},
		nodes:     map[string]*nodeCache{},
		podGroups: map[string]*pgCache{},
		queues:    map[string]*queueCache{},
		pcs:       map[string]*pcCache{},
		csiNodes:  map[string]*csiCache{},
		bad:       map[*objects.Entry]bool{},
		byUID:     map[api.TaskID]*podCache{},
		onNode:    map[string]map[*podCache]struct{}{},
		inJob:     map[api.JobID]map[*podCache]struct{}{},
		infos:     map[string]*api.NodeInfo{},
		made:      map[string]*built{},
		jobs:      map[api.JobID]*api.JobInfo{},
		jobMade:   map[api.JobID]*[2]*api.Resource{},
		overlays:  map[string]Overlay{},
		dirtyN:    map[string]bool{},
		dirtyJ:    map[api.JobID]bool{},
		first:     true,
	}
}

func decode[T any](e *objects.Entry, into *T) error {
	if err := json.Unmarshal(e.Raw, into); err != nil {
		return fmt.Errorf("decoding a stored object: %w", err)
	}
	return nil
}

// refresh brings the caches of one kind up to the view: decode what changed, forget what went.
// With the store's dirty keys (dirty != nil) only those are looked at. It calls changed with
// each key whose cache entry was replaced or removed, before the change (old may be nil).
func refresh[C any](b *Builder, stored map[string]*objects.Entry, dirty map[string]bool, caches map[string]*C,
	entryOf func(*C) *objects.Entry, build func(*objects.Entry) (*C, error), changed func(key string, old *C), st *Stats) {
	look := func(key string) {
		e, ok := stored[key]
		c, cached := caches[key]
		if !ok {
			if cached {
				changed(key, c)
				delete(caches, key)
			}
			return
		}
		if cached && entryOf(c) == e {
			return
		}
		if b.bad[e] {
			st.Undecoded++
			return
		}
		fresh, err := build(e)
		if err != nil {
			b.bad[e] = true
			if cached {
				changed(key, c)
				delete(caches, key)
			}
			st.Undecoded++
			return
		}
		e.Raw = nil // decoded for good: the cache keeps the object, keyed by its entry
		st.Decoded++
		if cached {
			changed(key, c)
		} else {
			changed(key, nil)
		}
		caches[key] = fresh
	}
	if dirty != nil {
		for key := range dirty {
			look(key)
		}
		return
	}
	for key := range caches {
		if _, ok := stored[key]; !ok {
			look(key)
		}
	}
	for key := range stored {
		look(key)
	}
}

func (b *Builder) refreshAll(v objects.View, st *Stats) {
	if len(b.bad) > 0 && v.Dirty == nil { // forget bad entries the store no longer holds
		stored := map[*objects.Entry]bool{}
		for _, objs := range v.Objects {
			for _, e := range objs {
				stored[e] = true
			}
		}
		for e := range b.bad {
			if !stored[e] {
				delete(b.bad, e)
			}
		}
	}
	dirty := func(k objects.Kind) map[string]bool {
		if v.Dirty == nil {
			return nil
		}
		if d := v.Dirty[k]; d != nil {
			return d
		}
		return map[string]bool{}
	}
	refresh(b, v.Objects[objects.Pod], dirty(objects.Pod), b.pods, func(c *podCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*podCache, error) {
			pod := &v1.Pod{}
			if err := decode(e, pod); err != nil {
				return nil, err
			}
			t := api.NewTaskInfo(pod)
			t.BestEffort = t.InitResreq.IsEmpty() // as SchedulerCache.NewTaskInfo
			accepted := slices.Contains(b.cfg.SchedulerNames, pod.Spec.SchedulerName) || pod.Spec.NodeName != ""
			return &podCache{entry: e, nodeName: pod.Spec.NodeName, template: t, accepted: accepted}, nil
		}, func(key string, old *podCache) {
			if old != nil {
				b.unplace(old)
				if b.byUID[old.template.UID] == old {
					delete(b.byUID, old.template.UID)
				}
			}
			b.queued = append(b.queued, key)
		}, st)
	refresh(b, v.Objects[objects.PodGroup], dirty(objects.PodGroup), b.podGroups, func(c *pgCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*pgCache, error) {
			in := &vcv1beta1.PodGroup{}
			if err := decode(e, in); err != nil {
				return nil, err
			}
			pg := &scheduling.PodGroup{}
			if err := scheme.Scheme.Convert(in, pg, nil); err != nil {
				return nil, fmt.Errorf("converting a PodGroup: %w", err)
			}
			return &pgCache{entry: e, pg: pg}, nil
		}, func(key string, _ *pgCache) { b.dirtyJ[api.JobID(key)] = true }, st)
	refresh(b, v.Objects[objects.Queue], dirty(objects.Queue), b.queues, func(c *queueCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*queueCache, error) {
			in := &vcv1beta1.Queue{}
			if err := decode(e, in); err != nil {
				return nil, err
			}
			q := &scheduling.Queue{}
			if err := scheme.Scheme.Convert(in, q, nil); err != nil {
				return nil, fmt.Errorf("converting a Queue: %w", err)
			}
			return &queueCache{entry: e, queue: q}, nil
		}, func(string, *queueCache) {}, st)
	refresh(b, v.Objects[objects.PriorityClass], dirty(objects.PriorityClass), b.pcs, func(c *pcCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*pcCache, error) {
			pc := &schedulingv1.PriorityClass{}
			if err := decode(e, pc); err != nil {
				return nil, err
			}
			return &pcCache{entry: e, pc: pc}, nil
		}, func(string, *pcCache) {}, st)
	refresh(b, v.Objects[objects.CSINode], dirty(objects.CSINode), b.csiNodes, func(c *csiCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*csiCache, error) {
			csi := &storagev1.CSINode{}
			if err := decode(e, csi); err != nil {
				return nil, err
			}
			if b.CSINodeIndexer != nil {
				_ = b.CSINodeIndexer.Update(csi)
			}
			return &csiCache{entry: e, csi: csi}, nil
		}, func(key string, old *csiCache) {
			if old != nil && b.CSINodeIndexer != nil {
				if _, stored := v.Objects[objects.CSINode][key]; !stored {
					_ = b.CSINodeIndexer.Delete(old.csi)
				}
			}
		}, st)
	// nodes depend on their CSINode too
	stored := v.Objects[objects.Node]
	look := func(key string) {
		e, ok := stored[key]
		c := b.nodes[key]
		if !ok {
			if c != nil {
				delete(b.nodes, key)
				b.dirtyN[key], b.imagesOK = true, false
			}
			return
		}
		if c == nil || c.entry != e {
			if b.bad[e] {
				if c != nil {
					delete(b.nodes, key)
					b.dirtyN[key], b.imagesOK = true, false
				}
				st.Undecoded++
				return
			}
			base := &v1.Node{}
			if err := decode(e, base); err != nil {
				b.bad[e] = true
				if c != nil {
					delete(b.nodes, key)
					b.dirtyN[key], b.imagesOK = true, false
				}
				st.Undecoded++
				return
			}
			e.Raw = nil
			st.Decoded++
			c = &nodeCache{entry: e, base: base}
			b.nodes[key] = c
			b.dirtyN[key], b.imagesOK = true, false
		}
		var csi *objects.Entry
		if cc := b.csiNodes[key]; cc != nil {
			csi = cc.entry
		}
		if c.node == nil || c.csi != csi {
			c.node, c.csi = c.base, csi
			if cc := b.csiNodes[key]; cc != nil {
				c.node = c.base.DeepCopy()
				setCSIResourceOnNode(cc.csi, c.node)
			}
			b.dirtyN[key] = true
		}
	}
	if v.Dirty == nil {
		for key := range b.nodes {
			if _, ok := stored[key]; !ok {
				look(key)
			}
		}
		for key := range stored {
			look(key)
		}
		return
	}
	for key := range v.Dirty[objects.Node] {
		look(key)
	}
	for key := range v.Dirty[objects.CSINode] {
		look(key)
	}
}

// unplace takes a task out of the node and job indexes it was listed in, marking both.
func (b *Builder) unplace(c *podCache) {
	if !c.listed {
		return
	}
	if c.onNode != "" {
		delete(b.onNode[c.onNode], c)
		b.dirtyN[c.onNode] = true
	}
	if c.inJob != "" {
		delete(b.inJob[c.inJob], c)
		b.dirtyJ[c.inJob] = true
	}
	c.onNode, c.inJob, c.listed = "", "", false
}

// place lists a task where its status and node (the overlay's or the pod's) put it.
func (b *Builder) place(c *podCache, o Overlay, overlaid bool) {
	c.status, c.node, c.overlaid = c.template.Status, c.template.NodeName, overlaid
	if overlaid {
		c.status, c.node = o.Status, o.Node
	}
	if !c.accepted {
		return
	}
	c.listed = true
	if c.node != "" && c.status != api.Succeeded && c.status != api.Failed {
		c.onNode = c.node
		set := b.onNode[c.node]
		if set == nil {
			set = map[*podCache]struct{}{}
			b.onNode[c.node] = set
		}
		set[c] = struct{}{}
		b.dirtyN[c.node] = true
	}
	if job := c.template.Job; job != "" {
		c.inJob = job
		set := b.inJob[job]
		if set == nil {
			set = map[*podCache]struct{}{}
			b.inJob[job] = set
		}
		set[c] = struct{}{}
		b.dirtyJ[job] = true
	}
}

// task is the pod's task as placed: a fresh clone the ClusterInfo may own.
func (c *podCache) task() *api.TaskInfo {
	t := c.template.Clone()
	t.Status, t.NodeName = c.status, c.node
	return t
}

// scan marks the nodes and jobs the last session changed: a task's status or node not the one
// the build gave it, a task more or fewer, or a node's resources moved.
func (b *Builder) scan(st *Stats) {
	for name, ni := range b.infos {
		if b.dirtyN[name] {
			continue
		}
		m := b.made[name]
		touched := m == nil || len(ni.Tasks) != m.tasks || !settle(ni.Idle, m.idle) || !settle(ni.Used, m.used) ||
			!settle(ni.Releasing, m.releasing) || !settle(ni.Pipelined, m.pipelined)
		if !touched {
			for _, t := range ni.Tasks {
				if c := b.byUID[t.UID]; c == nil || c.onNode != name || t.Status != c.status || t.NodeName != c.node {
					touched = true
					break
				}
			}
		}
		if touched {
			b.dirtyN[name] = true
			st.NodesTouched++
		}
	}
	for id, job := range b.jobs {
		if b.dirtyJ[id] {
			continue
		}
		m := b.jobMade[id]
		touched := m == nil || len(job.Tasks) != len(b.inJob[id]) || !settle(job.Allocated, m[0]) || !settle(job.TotalRequest, m[1])
		if !touched {
			for _, t := range job.Tasks {
				if c := b.byUID[t.UID]; c == nil || c.inJob != id || t.Status != c.status || t.NodeName != c.node {
					touched = true
					break
				}
			}
		}
		if touched {
			b.dirtyJ[id] = true
			st.JobsTouched++
		}
	}
}

// setCSIResourceOnNode is Volcano's SchedulerCache.setCSIResourceOnNode.
func setCSIResourceOnNode(csiNode *storagev1.CSINode, node *v1.Node) {
	csiResources := map[v1.ResourceName]resource.Quantity{}
	for i := range csiNode.Spec.Drivers {
		d := csiNode.Spec.Drivers[i]
		k := v1.ResourceName(volumeutil.GetCSIAttachLimitKey(d.Name))
		if d.Allocatable != nil && d.Allocatable.Count != nil {
			csiResources[k] = *resource.NewScaledQuantity(int64(*d.Allocatable.Count), -3)
		} else {
			csiResources[k] = *resource.NewScaledQuantity(defaultAttachableVolumeQuantity, -3)
		}
	}
	if len(csiResources) == 0 {
		return
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = v1.ResourceList{}
	}
	if node.Status.Capacity == nil {
		node.Status.Capacity = v1.ResourceList{}
	}
	for name, q := range csiResources {
		node.Status.Allocatable[name] = q
		node.Status.Capacity[name] = q
	}
}

// Build is the ClusterInfo at the view's version with the fold's overlays (by pod uid). The
// nodes and jobs it hands out are kept for the next build, which makes anew only what changed
// (in the log, in the overlays, or in the last session); the maps and lists around them, the
// queues and every job's PodGroup are new each time, so a session may change them freely.
func (b *Builder) Build(v objects.View, overlays map[string]Overlay) (*api.ClusterInfo, Stats) {
	st := b.Refresh(v, overlays)
	ci := b.Assemble(v, &st)
	return ci, st
}

// Refresh brings the kept nodes and jobs up to the view and the overlays (Build's first half):
// its Stats say whether anything changed. Assemble then hands them out; without it (a session
// left out) nothing of them reaches a session, so the next Refresh need not scan them.
func (b *Builder) Refresh(v objects.View, overlays map[string]Overlay) Stats {
	var st Stats
	st.Full = b.first
	if b.first {
		v.Dirty = nil // the first build looks at everything
	} else if b.handedOut && !b.skipScan {
		b.scan(&st)
	}
	b.handedOut = false
	b.queued = b.queued[:0]
	dirtyKeys := 0
	for _, keys := range v.Dirty {
		dirtyKeys += len(keys)
	}
	st.Unchanged = !b.first && v.Dirty != nil && dirtyKeys == 0 && st.NodesTouched == 0 && st.JobsTouched == 0
	b.refreshAll(v, &st)
	b.first = false

	// the tasks to place again: pods that changed, and those whose overlay did
	again := map[*podCache]struct{}{}
	for _, key := range b.queued {
		if c := b.pods[key]; c != nil {
			b.byUID[c.template.UID] = c
			again[c] = struct{}{}
		}
	}
	mark := func(uid string) {
		if c := b.byUID[api.TaskID(uid)]; c != nil {
			again[c] = struct{}{}
		}
	}
	for uid, o := range b.overlays {
		if n, ok := overlays[uid]; !ok || n != o {
			mark(uid)
		}
	}
	for uid, o := range overlays {
		if old, ok := b.overlays[uid]; !ok || old != o {
			mark(uid)
		}
	}
	b.overlays = make(map[string]Overlay, len(overlays))
	for uid, o := range overlays {
		b.overlays[uid] = o
	}
	for c := range again {
		b.unplace(c)
		o, ok := overlays[string(c.template.UID)]
		b.place(c, o, ok)
	}
	st.TasksMoved = len(again)
	st.Unchanged = st.Unchanged && len(again) == 0

	if !b.imagesOK { // the image summary counts nodes: any node that came, went or changed moves it
		b.images = map[string]*k8sframework.ImageStateSummary{}
		for _, c := range b.nodes {
			for _, image := range c.node.Status.Images {
				for _, name := range image.Names {
					if s, ok := b.images[name]; ok {
						s.NumNodes++
					} else {
						b.images[name] = &k8sframework.ImageStateSummary{Size: image.SizeBytes, NumNodes: 1}
					}
				}
			}
		}
		for name, ni := range b.infos {
			if !b.dirtyN[name] {
				b.setImages(ni, b.nodes[name])
			}
		}
		b.imagesOK = true
	}

	for name := range b.dirtyN {
		c := b.nodes[name]
		if c == nil {
			delete(b.infos, name)
			delete(b.made, name)
			continue
		}
		ni := api.NewNodeInfo(c.node)
		b.setImages(ni, c)
		m := &built{}
		// in log order: a node refuses a Binding task that no longer fits, so which one it
		// refuses must not depend on a map's order
		for _, pc := range inLogOrder(b.onNode[name]) {
			t := *pc.template // AddTask keeps a clone of its own
			t.Status, t.NodeName = pc.status, pc.node
			if err := ni.AddTask(&t); err != nil {
				m.notPlaced++
			}
		}
		m.tasks = len(ni.Tasks)
		m.idle, m.used, m.releasing, m.pipelined = ni.Idle.Clone(), ni.Used.Clone(), ni.Releasing.Clone(), ni.Pipelined.Clone()
		b.infos[name], b.made[name] = ni, m
		st.NodesBuilt++
	}
	for id := range b.dirtyJ {
		pods := b.inJob[id]
		if len(pods) == 0 {
			delete(b.inJob, id)
			if b.podGroups[string(id)] == nil {
				delete(b.jobs, id)
				delete(b.jobMade, id)
				continue
			}
		}
		job := api.NewJobInfo(id)
		for pc := range pods {
			job.AddTaskInfo(pc.task())
		}
		b.jobs[id] = job
		b.jobMade[id] = &[2]*api.Resource{job.Allocated.Clone(), job.TotalRequest.Clone()}
		st.JobsBuilt++
	}
	clear(b.dirtyN)
	clear(b.dirtyJ)
	return st
}

// Assemble is the ClusterInfo of the kept nodes and jobs at the view (Build's second half): new
// maps, queues and PodGroups around them, the shared pods' spec.nodeName as the log has it.
func (b *Builder) Assemble(v objects.View, st *Stats) *api.ClusterInfo {
	b.handedOut = true
	snapshot := &api.ClusterInfo{
		Nodes:          map[string]*api.NodeInfo{},
		Jobs:           map[api.JobID]*api.JobInfo{},
		Queues:         map[api.QueueID]*api.QueueInfo{},
		NamespaceInfo:  map[api.NamespaceName]*api.NamespaceInfo{}, // no ResourceQuota in the log
		RevocableNodes: map[string]*api.NodeInfo{},
		CSINodesStatus: map[string]*api.CSINodeStatusInfo{},
	}
	for name, c := range b.csiNodes {
		status := &api.CSINodeStatusInfo{CSINodeName: name, DriverStatus: map[string]bool{}}
		for _, d := range c.csi.Spec.Drivers {
			status.DriverStatus[d.Name] = d.Allocatable != nil && d.Allocatable.Count != nil
		}
		snapshot.CSINodesStatus[name] = status
	}
	// nodes, in the order they were first stored (Volcano's NodeList); SchedulerCache.Snapshot's
	// filter: Ready nodes
	for _, name := range v.NodeOrder {
		ni := b.infos[name]
		if ni == nil {
			continue
		}
		snapshot.NodeList = append(snapshot.NodeList, name)
		st.NotPlaced += b.made[name].notPlaced
		if !ni.Ready() {
			continue
		}
		snapshot.Nodes[name] = ni
		if ni.RevocableZone != "" {
			snapshot.RevocableNodes[name] = ni
		}
	}
	for name, c := range b.queues {
		snapshot.Queues[api.QueueID(name)] = api.NewQueueInfo(c.queue.DeepCopy())
	}
	// priority classes: the default is the global default's value
	var defaultPriority int32
	for _, key := range sortedKeys(b.pcs) {
		if pc := b.pcs[key].pc; pc.GlobalDefault {
			defaultPriority = pc.Value
		}
	}
	// every job's PodGroup anew (a session writes its status, the enqueue action its phase) and
	// its fit errors cleared; SchedulerCache.Snapshot's filter: a PodGroup whose queue is stored
	for id, job := range b.jobs {
		job.NodesFitErrors, job.JobFitErrors = map[api.TaskID]*api.FitErrors{}, ""
		c := b.podGroups[string(id)]
		if c == nil {
			job.UnsetPodGroup()
			continue
		}
		job.SetPodGroup(&api.PodGroup{PodGroup: *c.pg.DeepCopy(), Version: api.PodGroupVersionV1Beta1})
		if c.pg.Spec.Queue == "" {
			job.Queue = api.QueueID(b.cfg.DefaultQueue)
		}
		if _, ok := snapshot.Queues[job.Queue]; !ok {
			continue
		}
		job.Priority = defaultPriority
		if pc := b.pcs[job.PodGroup.Spec.PriorityClassName]; pc != nil {
			job.Priority = pc.pc.Value
		}
		snapshot.Jobs[id] = job
	}
	// undo what a session assumed on the shared pods (Statement.Allocate sets spec.nodeName)
	for _, c := range b.pods {
		c.template.Pod.Spec.NodeName = c.nodeName
		if c.listed {
			st.Tasks++
		}
		if c.overlaid && c.listed {
			st.Overlays++
		}
	}
	st.Nodes, st.Jobs = len(snapshot.Nodes), len(snapshot.Jobs)
	return snapshot
}

func (b *Builder) setImages(ni *api.NodeInfo, c *nodeCache) {
	ni.ImageStates = map[string]*k8sframework.ImageStateSummary{}
	for _, image := range c.node.Status.Images {
		for _, n := range image.Names {
			s := *b.images[n]
			ni.ImageStates[n] = &s
		}
	}
}

func inLogOrder(set map[*podCache]struct{}) []*podCache {
	out := make([]*podCache, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *podCache) int {
		if a.entry.Version != b.entry.Version {
			return cmp.Compare(a.entry.Version, b.entry.Version)
		}
		return cmp.Compare(a.template.Namespace+"/"+a.template.Name, b.template.Namespace+"/"+b.template.Name)
	})
	return out
}

// settle says whether r is b but for scalar resources at zero that one has and the other has
// not (a session that allocated and took back again leaves such a zero behind), and then makes
// r b to the key, so that a tried and discarded allocation does not make a node or a job anew.
func settle(r, b *api.Resource) bool {
	if r.MilliCPU != b.MilliCPU || r.Memory != b.Memory || r.MaxTaskNum != b.MaxTaskNum {
		return false
	}
	for k, v := range r.ScalarResources {
		if w, ok := b.ScalarResources[k]; (ok && w != v) || (!ok && v != 0) {
			return false
		}
	}
	for k, w := range b.ScalarResources {
		if _, ok := r.ScalarResources[k]; !ok && w != 0 {
			return false
		}
	}
	for k := range r.ScalarResources {
		if _, ok := b.ScalarResources[k]; !ok {
			delete(r.ScalarResources, k)
		}
	}
	for k, w := range b.ScalarResources {
		if _, ok := r.ScalarResources[k]; !ok {
			if r.ScalarResources == nil {
				r.ScalarResources = map[v1.ResourceName]float64{}
			}
			r.ScalarResources[k] = w
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
