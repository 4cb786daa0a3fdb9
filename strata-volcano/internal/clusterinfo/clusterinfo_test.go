package clusterinfo

import (
	"encoding/json"
	"testing"

	"volcano.sh/volcano/pkg/scheduler/api"

	"strata.local/volcano/internal/objects"
)

type obj = map[string]any

func entry(t *testing.T, o obj) *objects.Entry {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return &objects.Entry{Raw: raw}
}

func node(name string, cpu string, ready bool, labels map[string]string) obj {
	status := "True"
	if !ready {
		status = "False"
	}
	res := obj{"cpu": cpu, "memory": "8Gi", "pods": "110"}
	return obj{"apiVersion": "v1", "kind": "Node", "metadata": obj{"name": name, "labels": labels},
		"status": obj{"capacity": res, "allocatable": res, "conditions": []obj{{"type": "Ready", "status": status}}}}
}

func pod(ns, name, uid, group, scheduler, nodeName, phase, cpu string) obj {
	return obj{"apiVersion": "v1", "kind": "Pod",
		"metadata": obj{"name": name, "namespace": ns, "uid": uid, "annotations": obj{"scheduling.k8s.io/group-name": group}},
		"spec": obj{"schedulerName": scheduler, "nodeName": nodeName,
			"containers": []obj{{"name": "c", "resources": obj{"requests": obj{"cpu": cpu}}}}},
		"status": obj{"phase": phase}}
}

func podGroup(ns, name, queue string, minMember int) obj {
	return obj{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": obj{"name": name, "namespace": ns}, "spec": obj{"minMember": minMember, "queue": queue},
		"status": obj{"phase": "Inqueue"}}
}

func queue(name string, weight int) obj {
	return obj{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
		"metadata": obj{"name": name}, "spec": obj{"weight": weight}}
}

func view(t *testing.T, nodes []obj, pods map[string]obj, groups map[string]obj, queues []obj) objects.View {
	v := objects.View{Objects: map[objects.Kind]map[string]*objects.Entry{}}
	for _, k := range objects.Kinds {
		v.Objects[k] = map[string]*objects.Entry{}
	}
	for _, n := range nodes {
		name := n["metadata"].(obj)["name"].(string)
		v.Objects[objects.Node][name] = entry(t, n)
		v.NodeOrder = append(v.NodeOrder, name)
	}
	for key, p := range pods {
		v.Objects[objects.Pod][key] = entry(t, p)
	}
	for key, g := range groups {
		v.Objects[objects.PodGroup][key] = entry(t, g)
	}
	for _, q := range queues {
		v.Objects[objects.Queue][q["metadata"].(obj)["name"].(string)] = entry(t, q)
	}
	return v
}

func TestBuild(t *testing.T) {
	cfg := Config{SchedulerNames: []string{"volcano"}, DefaultQueue: "default"}
	nodes := []obj{node("n1", "4", true, nil), node("n2", "4", true, nil), node("n3", "4", false, nil)}
	queues := []obj{queue("q", 1), queue("default", 1)}
	tests := []struct {
		name       string
		pods       map[string]obj
		groups     map[string]obj
		overlays   map[string]Overlay
		wantJobs   []api.JobID
		wantTasks  map[string]api.TaskStatus // uid -> status in its job
		wantIdle   map[string]float64        // node -> idle milli-cpu
		wantNodes  int
		wantPlaced int
	}{
		{
			name:      "nodes that are not Ready are left out",
			wantNodes: 2,
			wantIdle:  map[string]float64{"n1": 4000, "n2": 4000},
		},
		{
			name: "a pending gang in a stored queue",
			pods: map[string]obj{
				"ns/a0": pod("ns", "a0", "ua0", "a", "volcano", "", "Pending", "1"),
				"ns/a1": pod("ns", "a1", "ua1", "a", "volcano", "", "Pending", "1"),
			},
			groups:    map[string]obj{"ns/a": podGroup("ns", "a", "q", 2)},
			wantJobs:  []api.JobID{"ns/a"},
			wantTasks: map[string]api.TaskStatus{"ua0": api.Pending, "ua1": api.Pending},
			wantIdle:  map[string]float64{"n1": 4000},
			wantNodes: 2,
		},
		{
			name: "jobs without a stored queue, or without a PodGroup, are left out; the default queue is used",
			pods: map[string]obj{
				"ns/b0": pod("ns", "b0", "ub0", "b", "volcano", "", "Pending", "1"),
				"ns/c0": pod("ns", "c0", "uc0", "c", "volcano", "", "Pending", "1"),
				"ns/d0": pod("ns", "d0", "ud0", "d", "volcano", "", "Pending", "1"),
			},
			groups: map[string]obj{
				"ns/b": podGroup("ns", "b", "missing", 1),
				"ns/d": podGroup("ns", "d", "", 1),
			},
			wantJobs:  []api.JobID{"ns/d"},
			wantTasks: map[string]api.TaskStatus{"ud0": api.Pending},
			wantNodes: 2,
		},
		{
			name: "bound pods use their node; another scheduler's pending pods are not the cache's",
			pods: map[string]obj{
				"ns/e0": pod("ns", "e0", "ue0", "e", "volcano", "n1", "Running", "1500m"),
				"ns/f0": pod("ns", "f0", "uf0", "f", "other", "", "Pending", "1"),
				"ns/g0": pod("ns", "g0", "ug0", "", "other", "n2", "Running", "1"),
			},
			groups:    map[string]obj{"ns/e": podGroup("ns", "e", "q", 1), "ns/f": podGroup("ns", "f", "q", 1)},
			wantJobs:  []api.JobID{"ns/e", "ns/f"},
			wantTasks: map[string]api.TaskStatus{"ue0": api.Running},
			wantIdle:  map[string]float64{"n1": 2500, "n2": 3000},
			wantNodes: 2,
		},
		{
			name: "the fold's overlays: Binding on a node, Releasing in place",
			pods: map[string]obj{
				"ns/h0": pod("ns", "h0", "uh0", "h", "volcano", "", "Pending", "1"),
				"ns/h1": pod("ns", "h1", "uh1", "h", "volcano", "n2", "Running", "1"),
			},
			groups: map[string]obj{"ns/h": podGroup("ns", "h", "q", 1)},
			overlays: map[string]Overlay{
				"uh0": {Status: api.Binding, Node: "n1"},
				"uh1": {Status: api.Releasing, Node: "n2"},
			},
			wantJobs:  []api.JobID{"ns/h"},
			wantTasks: map[string]api.TaskStatus{"uh0": api.Binding, "uh1": api.Releasing},
			wantIdle:  map[string]float64{"n1": 3000, "n2": 3000},
			wantNodes: 2,
		},
		{
			name: "an overlay Volcano finds too big for the node is counted, not placed",
			pods: map[string]obj{
				"ns/i0": pod("ns", "i0", "ui0", "i", "volcano", "", "Pending", "5"),
			},
			groups:     map[string]obj{"ns/i": podGroup("ns", "i", "q", 1)},
			overlays:   map[string]Overlay{"ui0": {Status: api.Binding, Node: "n1"}},
			wantJobs:   []api.JobID{"ns/i"},
			wantTasks:  map[string]api.TaskStatus{"ui0": api.Binding},
			wantIdle:   map[string]float64{"n1": 4000},
			wantNodes:  2,
			wantPlaced: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(cfg)
			ci, st := b.Build(view(t, nodes, tt.pods, tt.groups, queues), tt.overlays)
			if len(ci.Nodes) != tt.wantNodes {
				t.Errorf("%d nodes, want %d", len(ci.Nodes), tt.wantNodes)
			}
			if len(ci.Jobs) != len(tt.wantJobs) {
				t.Errorf("jobs %v, want %v", keys(ci.Jobs), tt.wantJobs)
			}
			for _, id := range tt.wantJobs {
				if ci.Jobs[id] == nil {
					t.Errorf("job %s missing", id)
				}
			}
			for uid, status := range tt.wantTasks {
				found := false
				for _, job := range ci.Jobs {
					if task := job.Tasks[api.TaskID(uid)]; task != nil {
						found = true
						if task.Status != status {
							t.Errorf("task %s is %s, want %s", uid, task.Status, status)
						}
					}
				}
				if !found {
					t.Errorf("task %s missing", uid)
				}
			}
			for name, idle := range tt.wantIdle {
				if got := ci.Nodes[name].Idle.MilliCPU; got != idle {
					t.Errorf("node %s idle cpu %v, want %v", name, got, idle)
				}
			}
			if st.NotPlaced != tt.wantPlaced {
				t.Errorf("%d tasks not placed, want %d", st.NotPlaced, tt.wantPlaced)
			}
		})
	}
}

// A session writes the node it chose into the shared pod (Session.Allocate); the next build
// gives the pod back the node the log has.
func TestBuildUndoesASessionsAssumption(t *testing.T) {
	b := NewBuilder(Config{SchedulerNames: []string{"volcano"}, DefaultQueue: "default"})
	v := view(t, []obj{node("n1", "4", true, nil)},
		map[string]obj{"ns/a0": pod("ns", "a0", "ua0", "a", "volcano", "", "Pending", "1")},
		map[string]obj{"ns/a": podGroup("ns", "a", "q", 1)}, []obj{queue("q", 1)})
	ci, _ := b.Build(v, nil)
	task := ci.Jobs["ns/a"].Tasks["ua0"]
	task.Pod.Spec.NodeName = "n1" // what Session.Allocate does
	ci, st := b.Build(v, nil)
	if st.Decoded != 0 {
		t.Errorf("an unchanged view decoded %d objects again", st.Decoded)
	}
	again := ci.Jobs["ns/a"].Tasks["ua0"]
	if again.Pod.Spec.NodeName != "" || again.Status != api.Pending || again.NodeName != "" {
		t.Errorf("task after a session: pod node %q, status %s, node %q", again.Pod.Spec.NodeName, again.Status, again.NodeName)
	}
}

func keys(m map[api.JobID]*api.JobInfo) []api.JobID {
	var out []api.JobID
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A CSINode's driver limits become the node's attach limits, and go when it goes, without the
// node being decoded again (its JSON is dropped once decoded).
func TestBuildFollowsCSINodes(t *testing.T) {
	b := NewBuilder(Config{SchedulerNames: []string{"volcano"}, DefaultQueue: "default"})
	v := view(t, []obj{node("n1", "4", true, nil)}, nil, nil, nil)
	csi := obj{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": obj{"name": "n1"},
		"spec": obj{"drivers": []obj{{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": obj{"count": 25}}}}}
	const key = "attachable-volumes-csi-ebs.csi.aws.com"
	tests := []struct {
		name      string
		withCSI   bool
		wantLimit float64
		decoded   int
	}{
		{"without a CSINode", false, 0, 1},
		{"with one", true, 25, 1}, // Volcano keeps it as 25 milli (NewScaledQuantity(25, -3)); the node is not decoded again
		{"after it went", false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v.Objects[objects.CSINode] = map[string]*objects.Entry{}
			if tt.withCSI {
				v.Objects[objects.CSINode]["n1"] = entry(t, csi)
			}
			ci, st := b.Build(v, nil)
			if got := ci.Nodes["n1"].Allocatable.ScalarResources[key]; got != tt.wantLimit {
				t.Errorf("attach limit %v, want %v", got, tt.wantLimit)
			}
			if st.Decoded != tt.decoded {
				t.Errorf("decoded %d objects, want %d", st.Decoded, tt.decoded)
			}
			if len(ci.CSINodesStatus) != map[bool]int{true: 1, false: 0}[tt.withCSI] {
				t.Errorf("CSINode statuses %v", ci.CSINodesStatus)
			}
		})
	}
}
