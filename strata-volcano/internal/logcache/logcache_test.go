package logcache

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingscheme "volcano.sh/apis/pkg/apis/scheduling/scheme"
	vcv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"strata.local/volcano/internal/avrolog"
	"strata.local/volcano/internal/cachelog"
	"strata.local/volcano/internal/clusterinfo"
	"strata.local/volcano/internal/sidecar"
)

// ------------------------------------------------------------------ status patches

func podGroup() *api.PodGroup {
	return &api.PodGroup{Version: api.PodGroupVersionV1Beta1, PodGroup: scheduling.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", ResourceVersion: "42",
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"},
			Labels:      map[string]string{"team": "a"}},
		Spec:   scheduling.PodGroupSpec{MinMember: 3, Queue: "q"},
		Status: scheduling.PodGroupStatus{Phase: scheduling.PodGroupInqueue},
	}}
}

// the old write: the whole object converted from the session's (the log's) copy
func wholeObject(pg *api.PodGroup) ([]byte, error) {
	out := &vcv1beta1.PodGroup{}
	if err := schedulingscheme.Scheme.Convert(&pg.PodGroup, out, nil); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// statusOnly says what a PodGroup write carries beyond its status and the precondition.
func statusOnly(body []byte) []string {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return []string{err.Error()}
	}
	var extra []string
	for k, v := range m {
		switch k {
		case "status":
		case "metadata":
			for mk := range v.(map[string]any) {
				if mk != "resourceVersion" {
					extra = append(extra, "metadata."+mk)
				}
			}
		default:
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return extra
}

func TestPodGroupStatusPatch(t *testing.T) {
	pg := podGroup()
	body, err := PodGroupStatusPatch(pg)
	if err != nil {
		t.Fatal(err)
	}
	if extra := statusOnly(body); len(extra) > 0 {
		t.Errorf("the patch writes %v besides the status", extra)
	}
	var m struct {
		Metadata map[string]any `json:"metadata"`
		Status   map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata["resourceVersion"] != "42" {
		t.Errorf("precondition %v, want the log's resourceVersion 42", m.Metadata)
	}
	// zero counts and no conditions are written out, so that a stale value is replaced
	for _, k := range []string{"phase", "running", "succeeded", "failed", "conditions"} {
		if _, ok := m.Status[k]; !ok {
			t.Errorf("status.%s missing from %s", k, body)
		}
	}
	if m.Status["phase"] != "Inqueue" || m.Status["running"] != 0.0 || m.Status["conditions"] != nil {
		t.Errorf("status %v", m.Status)
	}
	// the check can fail: the old write of the whole object carries the rest of it
	old, err := wholeObject(pg)
	if err != nil {
		t.Fatal(err)
	}
	if extra := statusOnly(old); !slices.Contains(extra, "spec") || !slices.Contains(extra, "metadata.annotations") {
		t.Errorf("the check did not see the whole object written: %v", extra)
	}
}

func TestQueueStatusPatch(t *testing.T) {
	q := api.NewQueueInfo(&scheduling.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "q", ResourceVersion: "7"},
		Status:     scheduling.QueueStatus{Allocated: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}},
	})
	logged := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}
	body, err := QueueStatusPatch(q, logged)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"7"},"status":{"allocated":{"cpu":"2","nvidia.com/gpu":null}}}`
	if string(body) != want {
		t.Errorf("patch %s, want %s", body, want)
	}
}

// ------------------------------------------------------------------ flush

// appender takes the values it is given; refuse says which (by index) the broker refused.
type appender struct {
	next    int64
	refuse  map[int]bool
	whole   bool // the old Append: any refusal loses every offset of the call
	batches [][][]byte
}

func (a *appender) Append(ctx context.Context, values [][]byte) ([]int64, error) {
	a.batches = append(a.batches, values)
	offsets := make([]int64, len(values))
	var err error
	for i := range values {
		if a.refuse[i] {
			offsets[i], err = cachelog.NotAppended, errors.Join(err, errors.New("MESSAGE_TOO_LARGE"))
			continue
		}
		offsets[i] = a.next
		a.next++
	}
	if err != nil && a.whole {
		for i := range offsets {
			offsets[i] = cachelog.NotAppended
		}
	}
	return offsets, err
}

// fold answers a verdict for each offset: rejected where reject says so, else applied.
type fold struct {
	reject map[int64]bool
	asked  []int64
}

func (f *fold) State(ctx context.Context, minVersion int64) (sidecar.State, error) {
	return sidecar.State{Version: minVersion}, nil
}

func (f *fold) Outcomes(ctx context.Context, offsets []int64) (map[int64]sidecar.Outcome, error) {
	out := map[int64]sidecar.Outcome{}
	for _, o := range offsets {
		f.asked = append(f.asked, o)
		if f.reject[o] {
			out[o] = sidecar.Outcome{Result: "rejected", Reason: "node over its allocatable"}
		} else {
			out[o] = sidecar.Outcome{Result: "applied"}
		}
	}
	return out, nil
}

// session is a Volcano session of two one-task jobs allocated by Volcano's own Statement, as
// the allocate action leaves it, with their binds buffered in the cache.
func session(t *testing.T, c *Cache) *framework.Session {
	t.Helper()
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourcePods: resource.MustParse("10")}
	node := api.NewNodeInfo(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Allocatable: res, Capacity: res}})
	ssn := &framework.Session{Jobs: map[api.JobID]*api.JobInfo{}, Nodes: map[string]*api.NodeInfo{"n1": node}}
	for _, name := range []string{"a", "b"} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "0", UID: k8stypes.UID("u" + name),
			Annotations: map[string]string{"scheduling.k8s.io/group-name": name}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}}}}
		task := api.NewTaskInfo(pod)
		job := api.NewJobInfo(task.Job, task)
		ssn.Jobs[job.UID] = job
		if err := job.UpdateTaskStatus(task, api.Binding); err != nil {
			t.Fatal(err)
		}
		task.NodeName = "n1"
		if err := node.AddTask(task); err != nil {
			t.Fatal(err)
		}
		if err := c.AddBindTask(task); err != nil {
			t.Fatal(err)
		}
	}
	return ssn
}

func newCache(t *testing.T, w Appender, f Fold) *Cache {
	t.Helper()
	catalog, err := avrolog.Load(filepath.Join("..", "..", "..", "schemas", "avsc"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Replica: "r1", Fold: clusterinfo.Config{SchedulerNames: []string{"volcano"}}},
		nil, f, w, catalog, &rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// placed says, per job, whether its task is still placed in the session (Binding on n1).
func placed(ssn *framework.Session) map[string]bool {
	out := map[string]bool{}
	for id, job := range ssn.Jobs {
		out[string(id)] = len(job.TaskStatusIndex[api.Binding]) == 1 && len(ssn.Nodes["n1"].Tasks) > 0 &&
			ssn.Nodes["n1"].Tasks[api.TaskID("ns/"+job.Tasks[firstTask(job)].Name)] != nil
	}
	return out
}

func firstTask(job *api.JobInfo) api.TaskID {
	for uid := range job.Tasks {
		return uid
	}
	return ""
}

// One BIND_GROUP per job in the log; a group the log refused, or whose verdict is a
// rejection, is taken back out of the session; a group the log admitted stays, whatever
// became of its neighbour. The last row is the old Append (an error loses every offset): the
// same check reports the admitted group taken back.
func TestFlushTakesBackOnlyWhatTheLogDidNotAdmit(t *testing.T) {
	tests := []struct {
		name       string
		refuse     map[int]bool
		whole      bool
		reject     map[int64]bool
		wantPlaced map[string]bool
		wantErr    bool
		wantBroken bool // the check must report this row (a breakage)
	}{
		{"both admitted", nil, false, nil, map[string]bool{"ns/a": true, "ns/b": true}, false, false},
		{"b rejected by the fold", nil, false, map[int64]bool{1: true}, map[string]bool{"ns/a": true, "ns/b": false}, false, false},
		{"b refused by the broker", map[int]bool{1: true}, false, nil, map[string]bool{"ns/a": true, "ns/b": false}, true, false},
		{"the old Append: one refusal loses a's offset too", map[int]bool{1: true}, true, nil,
			map[string]bool{"ns/a": true, "ns/b": false}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, f := &appender{refuse: tt.refuse, whole: tt.whole}, &fold{reject: tt.reject}
			c := newCache(t, w, f)
			ssn := session(t, c)
			v, err := c.Flush(context.Background(), ssn)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if len(w.batches) != 1 || len(w.batches[0]) != 2 {
				t.Fatalf("appended %d batches; want one of two BIND_GROUPs", len(w.batches))
			}
			got := placed(ssn)
			broken := !mapsEqual(got, tt.wantPlaced)
			if broken != tt.wantBroken {
				t.Errorf("placed %v, want %v (verdicts %+v)", got, tt.wantPlaced, v)
			}
			if !tt.wantBroken && v.Admitted+v.Rejected+v.Unpublished != 2 {
				t.Errorf("verdicts %+v do not count two groups", v)
			}
		})
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
