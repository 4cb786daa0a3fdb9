// Package clusterinfo builds Volcano's api.ClusterInfo from the full objects of the cache log
// at one version, with Volcano's own constructors (api.NewNodeInfo, api.NewTaskInfo,
// api.NewJobInfo + SetPodGroup, api.NewQueueInfo) and the filters of Volcano's
// SchedulerCache.Snapshot (ready nodes; jobs with a PodGroup whose queue is stored), plus the
// fold's overlays at the same version: tasks that an admitted BIND put in Binding on a node, or
// an applied EVICT in Releasing. Objects are decoded once per change; a snapshot clones them.
package clusterinfo

import (
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
}

type podCache struct {
	entry    *objects.Entry
	nodeName string // spec.nodeName as the log has it: a session may change the shared pod's
	template *api.TaskInfo
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

// Builder keeps the decoded objects between builds. Not safe for concurrent use.
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
	}
}

func decode[T any](e *objects.Entry, into *T) error {
	if err := json.Unmarshal(e.Raw, into); err != nil {
		return fmt.Errorf("decoding a stored object: %w", err)
	}
	return nil
}

// refresh brings the caches of one kind up to the view: decode what changed, forget what went.
func refresh[C any](b *Builder, stored map[string]*objects.Entry, caches map[string]*C,
	entryOf func(*C) *objects.Entry, build func(*objects.Entry) (*C, error), st *Stats) {
	for key := range caches {
		if _, ok := stored[key]; !ok {
			delete(caches, key)
		}
	}
	for key, e := range stored {
		if c, ok := caches[key]; ok && entryOf(c) == e {
			continue
		}
		if b.bad[e] {
			st.Undecoded++
			continue
		}
		c, err := build(e)
		if err != nil {
			b.bad[e] = true
			delete(caches, key)
			st.Undecoded++
			continue
		}
		e.Raw = nil // decoded for good: the cache keeps the object, keyed by its entry
		st.Decoded++
		caches[key] = c
	}
}

func (b *Builder) refreshAll(v objects.View, st *Stats) {
	if len(b.bad) > 0 { // forget bad entries the store no longer holds
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
	refresh(b, v.Objects[objects.Pod], b.pods, func(c *podCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*podCache, error) {
			pod := &v1.Pod{}
			if err := decode(e, pod); err != nil {
				return nil, err
			}
			t := api.NewTaskInfo(pod)
			t.BestEffort = t.InitResreq.IsEmpty() // as SchedulerCache.NewTaskInfo
			return &podCache{entry: e, nodeName: pod.Spec.NodeName, template: t}, nil
		}, st)
	refresh(b, v.Objects[objects.PodGroup], b.podGroups, func(c *pgCache) *objects.Entry { return c.entry },
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
		}, st)
	refresh(b, v.Objects[objects.Queue], b.queues, func(c *queueCache) *objects.Entry { return c.entry },
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
		}, st)
	refresh(b, v.Objects[objects.PriorityClass], b.pcs, func(c *pcCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*pcCache, error) {
			pc := &schedulingv1.PriorityClass{}
			if err := decode(e, pc); err != nil {
				return nil, err
			}
			return &pcCache{entry: e, pc: pc}, nil
		}, st)
	refresh(b, v.Objects[objects.CSINode], b.csiNodes, func(c *csiCache) *objects.Entry { return c.entry },
		func(e *objects.Entry) (*csiCache, error) {
			csi := &storagev1.CSINode{}
			if err := decode(e, csi); err != nil {
				return nil, err
			}
			if b.CSINodeIndexer != nil {
				_ = b.CSINodeIndexer.Update(csi)
			}
			return &csiCache{entry: e, csi: csi}, nil
		}, st)
	if b.CSINodeIndexer != nil {
		for _, obj := range b.CSINodeIndexer.List() {
			if csi, ok := obj.(*storagev1.CSINode); ok {
				if _, stored := b.csiNodes[csi.Name]; !stored {
					_ = b.CSINodeIndexer.Delete(csi)
				}
			}
		}
	}
	// nodes depend on their CSINode too
	stored := v.Objects[objects.Node]
	for key := range b.nodes {
		if _, ok := stored[key]; !ok {
			delete(b.nodes, key)
		}
	}
	for key, e := range stored {
		c := b.nodes[key]
		if c == nil || c.entry != e {
			if b.bad[e] {
				delete(b.nodes, key)
				st.Undecoded++
				continue
			}
			base := &v1.Node{}
			if err := decode(e, base); err != nil {
				b.bad[e] = true
				delete(b.nodes, key)
				st.Undecoded++
				continue
			}
			e.Raw = nil
			st.Decoded++
			c = &nodeCache{entry: e, base: base}
			b.nodes[key] = c
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

// Build is the ClusterInfo at the view's version with the fold's overlays (by pod uid).
func (b *Builder) Build(v objects.View, overlays map[string]Overlay) (*api.ClusterInfo, Stats) {
	var st Stats
	b.refreshAll(v, &st)
	snapshot := &api.ClusterInfo{
		Nodes:          map[string]*api.NodeInfo{},
		Jobs:           map[api.JobID]*api.JobInfo{},
		Queues:         map[api.QueueID]*api.QueueInfo{},
		NamespaceInfo:  map[api.NamespaceName]*api.NamespaceInfo{}, // no ResourceQuota in the log
		RevocableNodes: map[string]*api.NodeInfo{},
		CSINodesStatus: map[string]*api.CSINodeStatusInfo{},
	}

	// priority classes: the default is the global default's value
	var defaultPriority int32
	for _, key := range sortedKeys(b.pcs) {
		if pc := b.pcs[key].pc; pc.GlobalDefault {
			defaultPriority = pc.Value
		}
	}

	for name, c := range b.csiNodes {
		status := &api.CSINodeStatusInfo{CSINodeName: name, DriverStatus: map[string]bool{}}
		for _, d := range c.csi.Spec.Drivers {
			status.DriverStatus[d.Name] = d.Allocatable != nil && d.Allocatable.Count != nil
		}
		snapshot.CSINodesStatus[name] = status
	}

	// nodes, in the order they were first stored (Volcano's NodeList), with image states
	images := map[string]*k8sframework.ImageStateSummary{}
	for _, c := range b.nodes {
		for _, image := range c.node.Status.Images {
			for _, name := range image.Names {
				if s, ok := images[name]; ok {
					s.NumNodes++
				} else {
					images[name] = &k8sframework.ImageStateSummary{Size: image.SizeBytes, NumNodes: 1}
				}
			}
		}
	}
	all := map[string]*api.NodeInfo{}
	for _, name := range v.NodeOrder {
		c := b.nodes[name]
		if c == nil {
			continue
		}
		ni := api.NewNodeInfo(c.node)
		for _, image := range c.node.Status.Images {
			for _, n := range image.Names {
				s := *images[n]
				ni.ImageStates[n] = &s
			}
		}
		all[name] = ni
		snapshot.NodeList = append(snapshot.NodeList, name)
	}

	for name, c := range b.queues {
		snapshot.Queues[api.QueueID(name)] = api.NewQueueInfo(c.queue.DeepCopy())
	}

	jobs := map[api.JobID]*api.JobInfo{}
	for key, c := range b.podGroups {
		id := api.JobID(key)
		job := api.NewJobInfo(id)
		job.SetPodGroup(&api.PodGroup{PodGroup: *c.pg.DeepCopy(), Version: api.PodGroupVersionV1Beta1})
		if c.pg.Spec.Queue == "" {
			job.Queue = api.QueueID(b.cfg.DefaultQueue)
		}
		jobs[id] = job
	}

	// tasks: the pods the cache accepts (its scheduler names, or already on a node)
	for _, c := range b.pods {
		pod := c.template.Pod
		pod.Spec.NodeName = c.nodeName // undo what an earlier session assumed on the shared pod
		if !slices.Contains(b.cfg.SchedulerNames, pod.Spec.SchedulerName) && c.nodeName == "" {
			continue
		}
		task := c.template.Clone()
		if o, ok := overlays[string(task.UID)]; ok {
			task.Status = o.Status
			task.NodeName = o.Node
			st.Overlays++
		}
		if task.NodeName != "" && task.Status != api.Succeeded && task.Status != api.Failed {
			if ni := all[task.NodeName]; ni != nil {
				if err := ni.AddTask(task); err != nil {
					st.NotPlaced++
				}
			}
		}
		if task.Job != "" {
			job := jobs[task.Job]
			if job == nil {
				job = api.NewJobInfo(task.Job)
				jobs[task.Job] = job
			}
			job.AddTaskInfo(task)
		}
		st.Tasks++
	}

	// SchedulerCache.Snapshot's filters
	for name, ni := range all {
		if !ni.Ready() {
			continue
		}
		snapshot.Nodes[name] = ni
		if ni.RevocableZone != "" {
			snapshot.RevocableNodes[name] = ni
		}
	}
	for id, job := range jobs {
		if job.PodGroup == nil {
			continue
		}
		if _, ok := snapshot.Queues[job.Queue]; !ok {
			continue
		}
		job.Priority = defaultPriority
		if c := b.pcs[job.PodGroup.Spec.PriorityClassName]; c != nil {
			job.Priority = c.pc.Value
		}
		snapshot.Jobs[id] = job
	}
	st.Nodes, st.Jobs = len(snapshot.Nodes), len(snapshot.Jobs)
	return snapshot, st
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
