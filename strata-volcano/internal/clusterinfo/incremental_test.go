package clusterinfo

import (
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"volcano.sh/volcano/pkg/scheduler/api"

	"strata.local/volcano/internal/objects"
)

// world is the log's objects as a test changes them: the JSON of each, by kind and key.
type world struct {
	objs     map[objects.Kind]map[string]obj
	order    []string
	overlays map[string]Overlay
}

func newWorld() *world {
	w := &world{objs: map[objects.Kind]map[string]obj{}, overlays: map[string]Overlay{}}
	for _, k := range objects.Kinds {
		w.objs[k] = map[string]obj{}
	}
	return w
}

func (w *world) set(k objects.Kind, key string, o obj) {
	if k == objects.Node && w.objs[k][key] == nil {
		w.order = append(w.order, key)
	}
	w.objs[k][key] = o
}

func (w *world) del(k objects.Kind, key string) {
	delete(w.objs[k], key)
	if k == objects.Node {
		w.order = slices.DeleteFunc(w.order, func(n string) bool { return n == key })
	}
}

// store is what objects.Store does for a builder that follows it: entries replaced only for
// what changed, and the keys that did in Dirty.
type store struct {
	view objects.View
	seen map[objects.Kind]map[string]string // the JSON each entry was made from
}

func newStore() *store {
	s := &store{view: objects.View{Objects: map[objects.Kind]map[string]*objects.Entry{}, Dirty: map[objects.Kind]map[string]bool{}},
		seen: map[objects.Kind]map[string]string{}}
	for _, k := range objects.Kinds {
		s.view.Objects[k], s.view.Dirty[k], s.seen[k] = map[string]*objects.Entry{}, map[string]bool{}, map[string]string{}
	}
	return s
}

func (s *store) sync(t *testing.T, w *world) objects.View {
	for _, k := range objects.Kinds {
		for key := range s.view.Objects[k] {
			if _, ok := w.objs[k][key]; !ok {
				delete(s.view.Objects[k], key)
				delete(s.seen[k], key)
				s.view.Dirty[k][key] = true
			}
		}
		for key, o := range w.objs[k] {
			e := entry(t, o)
			if s.seen[k][key] != string(e.Raw) {
				s.view.Objects[k][key], s.seen[k][key] = e, string(e.Raw)
				s.view.Dirty[k][key] = true
			}
		}
	}
	s.view.NodeOrder = slices.Clone(w.order)
	return s.view
}

func (s *store) read() {
	for _, keys := range s.view.Dirty {
		clear(keys)
	}
}

func (w *world) fresh(t *testing.T) objects.View {
	v := newStore().sync(t, w)
	v.Dirty = nil
	return v
}

// render is the ClusterInfo in words, every field a session reads, sorted.
func render(ci *api.ClusterInfo) string {
	var lines []string
	for name, n := range ci.Nodes {
		lines = append(lines, fmt.Sprintf("node %s idle %s used %s releasing %s pipelined %s images %d",
			name, n.Idle, n.Used, n.Releasing, n.Pipelined, len(n.ImageStates)))
		for key, t := range n.Tasks {
			lines = append(lines, fmt.Sprintf("node %s task %s %s %s %s", name, key, t.UID, t.Status, t.NodeName))
		}
	}
	lines = append(lines, "nodelist "+strings.Join(ci.NodeList, ","))
	for id, j := range ci.Jobs {
		lines = append(lines, fmt.Sprintf("job %s queue %s min %d prio %d phase %s fit %q %d allocated %s total %s",
			id, j.Queue, j.MinAvailable, j.Priority, j.PodGroup.Status.Phase, j.JobFitErrors, len(j.NodesFitErrors),
			j.Allocated, j.TotalRequest))
		for uid, t := range j.Tasks {
			lines = append(lines, fmt.Sprintf("job %s task %s %s %s pod-node %q", id, uid, t.Status, t.NodeName, t.Pod.Spec.NodeName))
		}
		for status, tasks := range j.TaskStatusIndex {
			if len(tasks) > 0 {
				lines = append(lines, fmt.Sprintf("job %s index %s %d", id, status, len(tasks)))
			}
		}
	}
	for id, q := range ci.Queues {
		lines = append(lines, fmt.Sprintf("queue %s weight %d", id, q.Weight))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// session changes a ClusterInfo as Volcano's actions do: tasks allocated onto nodes (and some
// discarded again), a PodGroup's phase, fit errors, a pod's spec.nodeName.
func session(r *rand.Rand, ci *api.ClusterInfo) {
	nodes := slices.Sorted(func(yield func(string) bool) {
		for n := range ci.Nodes {
			if !yield(n) {
				return
			}
		}
	})
	for _, id := range slices.Sorted(func(yield func(api.JobID) bool) {
		for id := range ci.Jobs {
			if !yield(id) {
				return
			}
		}
	}) {
		job := ci.Jobs[id]
		if r.Intn(3) == 0 {
			job.PodGroup.Status.Phase = "Inqueue"
			job.JobFitErrors = "no fit"
		}
		for _, t := range job.TaskStatusIndex[api.Pending] {
			if len(nodes) == 0 || r.Intn(2) == 0 {
				continue
			}
			node := ci.Nodes[nodes[r.Intn(len(nodes))]]
			if !t.Resreq.LessEqual(node.Idle, api.Zero) {
				continue
			}
			t.Pod.Spec.NodeName = node.Name
			if err := job.UpdateTaskStatus(t, api.Allocated); err != nil {
				continue
			}
			t.NodeName = node.Name
			if err := node.AddTask(t); err != nil {
				continue
			}
			job.NodesFitErrors[t.UID] = api.NewFitErrors()
			if r.Intn(3) == 0 { // Statement.Discard
				_ = job.UpdateTaskStatus(t, api.Pending)
				_ = node.RemoveTask(t)
				t.NodeName = ""
			}
		}
	}
}

// An incremental build equals a build from scratch of the same objects and overlays, after
// any changes in the log and any session; and the check catches a builder that does not scan
// what the last session changed.
func TestIncrementalBuildEqualsAFullOne(t *testing.T) {
	for _, tt := range []struct {
		name     string
		skipScan bool
		wantSame bool
	}{
		{"incremental", false, true},
		{"without the scan of the last session (must differ)", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{SchedulerNames: []string{"volcano"}, DefaultQueue: "default"}
			r := rand.New(rand.NewSource(7))
			w, s := newWorld(), newStore()
			b := NewBuilder(cfg)
			b.skipScan = tt.skipScan
			w.set(objects.Queue, "q", queue("q", 1))
			w.set(objects.Queue, "default", queue("default", 1))
			differed := 0
			for step := 0; step < 120; step++ {
				for i := 0; i < 3; i++ {
					switch n := fmt.Sprintf("n%d", r.Intn(6)); r.Intn(10) {
					case 0:
						w.del(objects.Node, n)
					case 1, 2:
						w.set(objects.Node, n, node(n, fmt.Sprint(2+r.Intn(6)), r.Intn(8) != 0, nil))
					default:
						g := fmt.Sprintf("g%d", r.Intn(5))
						p := fmt.Sprintf("p%d", r.Intn(20))
						switch r.Intn(8) {
						case 0:
							w.del(objects.Pod, "ns/"+p)
						case 1:
							w.set(objects.PodGroup, "ns/"+g, podGroup("ns", g, []string{"q", "", "missing"}[r.Intn(3)], 1+r.Intn(3)))
						case 2:
							w.overlays["u"+p] = Overlay{Status: api.Binding, Node: n}
						case 3:
							delete(w.overlays, "u"+p)
						default:
							onNode, phase := "", "Pending"
							if r.Intn(3) == 0 {
								onNode, phase = n, "Running"
							}
							w.set(objects.Pod, "ns/"+p, pod("ns", p, "u"+p, g, "volcano", onNode, phase, "1"))
						}
					}
				}
				ci, _ := b.Build(s.sync(t, w), w.overlays)
				s.read()
				want, _ := NewBuilder(cfg).Build(w.fresh(t), w.overlays)
				if got, exp := render(ci), render(want); got != exp {
					differed++
					if tt.wantSame {
						t.Fatalf("step %d: the incremental build differs from a full one:\n%s", step, diff(got, exp))
					}
				}
				session(r, ci)
			}
			if !tt.wantSame && differed == 0 {
				t.Fatal("a builder that ignores what the last session changed went unnoticed")
			}
		})
	}
}

func diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMain(m *testing.M) {
	// the sessions above overcommit nodes on purpose; Volcano logs each
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	_ = flags.Set("logtostderr", "false")
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// Unchanged tells a build whose ClusterInfo is the last one's: not the first build, not after a
// change in the log or the overlays, not after a session that changed a node or a job.
func TestUnchanged(t *testing.T) {
	w, s := newWorld(), newStore()
	b := NewBuilder(Config{SchedulerNames: []string{"volcano"}, DefaultQueue: "default"})
	w.set(objects.Queue, "q", queue("q", 1))
	w.set(objects.Node, "n1", node("n1", "4", true, nil))
	w.set(objects.PodGroup, "ns/g", podGroup("ns", "g", "q", 1))
	w.set(objects.Pod, "ns/p", pod("ns", "p", "up", "g", "volcano", "", "Pending", "1"))
	build := func() (*api.ClusterInfo, Stats) {
		ci, st := b.Build(s.sync(t, w), w.overlays)
		s.read()
		return ci, st
	}
	// allocate does what Statement.Allocate does to the task's job and node
	allocate := func(ci *api.ClusterInfo) (*api.JobInfo, *api.NodeInfo, *api.TaskInfo) {
		job, n := ci.Jobs["ns/g"], ci.Nodes["n1"]
		task := job.Tasks["up"]
		if err := job.UpdateTaskStatus(task, api.Allocated); err != nil {
			t.Fatal(err)
		}
		task.NodeName = "n1"
		if err := n.AddTask(task); err != nil {
			t.Fatal(err)
		}
		return job, n, task
	}
	steps := []struct {
		name   string
		change func(ci *api.ClusterInfo)
		want   bool
	}{
		{"the first build", nil, false},
		{"nothing changed", nil, true},
		{"a session changed a PodGroup's phase only (every build hands out new PodGroups)", func(ci *api.ClusterInfo) {
			ci.Jobs["ns/g"].PodGroup.Status.Phase = "Running" // a new PodGroup is handed out every build
		}, true},
		{"a session allocated the task and took it back (Statement.Discard)", func(ci *api.ClusterInfo) {
			job, n, task := allocate(ci)
			if err := job.UpdateTaskStatus(task, api.Pending); err != nil {
				t.Fatal(err)
			}
			if err := n.RemoveTask(task); err != nil {
				t.Fatal(err)
			}
			task.NodeName = ""
		}, true},
		{"a session allocated the task", func(ci *api.ClusterInfo) { allocate(ci) }, false},
		{"nothing since", nil, true},
		{"an overlay", func(*api.ClusterInfo) { w.overlays["up"] = Overlay{Status: api.Binding, Node: "n1"} }, false},
		{"a pod's change in the log", func(*api.ClusterInfo) {
			w.set(objects.Pod, "ns/p", pod("ns", "p", "up", "g", "volcano", "n1", "Running", "1"))
		}, false},
		{"and then nothing", nil, true},
	}
	var ci *api.ClusterInfo
	for _, step := range steps {
		if step.change != nil && ci != nil {
			step.change(ci)
		}
		var st Stats
		ci, st = build()
		if st.Unchanged != step.want {
			t.Errorf("%s: Unchanged %v, want %v (%+v)", step.name, st.Unchanged, step.want, st)
		}
	}
}
