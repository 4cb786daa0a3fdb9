package logcache

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hamba/avro/v2"
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

// appender is the log as the writer sees it: each value appended in turn gets the next offset,
// but those refuse names (by the order of the calls) are refused; asynchronous appends answer
// from another goroutine, as franz-go's callbacks do.
type appender struct {
	mu     sync.Mutex
	next   int64
	calls  int
	refuse map[int]bool
	values [][]byte // every value the log took, in order
	sync   int      // values given to Append (the held groups), not AppendAsync
}

func (a *appender) take(value []byte) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.calls
	a.calls++
	if a.refuse[i] {
		return cachelog.NotAppended, errors.New("MESSAGE_TOO_LARGE")
	}
	a.values = append(a.values, value)
	a.next++
	return a.next - 1, nil
}

func (a *appender) Append(ctx context.Context, values [][]byte) ([]int64, error) {
	offsets := make([]int64, len(values))
	var errs error
	for i, v := range values {
		var err error
		offsets[i], err = a.take(v)
		errs = errors.Join(errs, err)
	}
	a.mu.Lock()
	a.sync += len(values)
	a.mu.Unlock()
	return offsets, errs
}

func (a *appender) AppendAsync(ctx context.Context, value []byte, done func(int64, error)) {
	offset, err := a.take(value)
	go done(offset, err)
}

// fold answers a verdict for each offset: rejected where reject says so, else applied.
type fold struct {
	reject map[int64]bool
}

func (f *fold) State(ctx context.Context, minVersion int64) (sidecar.State, error) {
	return sidecar.State{Version: minVersion}, nil
}

func (f *fold) Outcomes(ctx context.Context, offsets []int64) (map[int64]sidecar.Outcome, error) {
	out := map[int64]sidecar.Outcome{}
	for _, o := range offsets {
		if f.reject[o] {
			out[o] = sidecar.Outcome{Result: "rejected", Reason: "node over its allocatable"}
		} else {
			out[o] = sidecar.Outcome{Result: "applied"}
		}
	}
	return out, nil
}

// session is a Volcano session of one-cpu tasks allocated onto node n1 the way Statement.Allocate
// leaves them (Binding in the job, on the node), and their binds given to the cache in the
// order of binds (task names such as "a0": job "a"), as the actions' commits give them.
func session(t *testing.T, c *Cache, binds ...string) *framework.Session {
	t.Helper()
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("16"), v1.ResourcePods: resource.MustParse("100")}
	node := api.NewNodeInfo(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Allocatable: res, Capacity: res}})
	ssn := &framework.Session{Jobs: map[api.JobID]*api.JobInfo{}, Nodes: map[string]*api.NodeInfo{"n1": node}}
	for _, name := range binds {
		group := name[:1]
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("u" + name),
			Annotations: map[string]string{"scheduling.k8s.io/group-name": group}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}}}}
		task := api.NewTaskInfo(pod)
		job := ssn.Jobs[task.Job]
		if job == nil {
			job = api.NewJobInfo(task.Job)
			ssn.Jobs[task.Job] = job
		}
		job.AddTaskInfo(task)
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

// placed lists the tasks still placed in the session (Binding in their job and on n1).
func placed(ssn *framework.Session) []string {
	var out []string
	for _, job := range ssn.Jobs {
		for _, task := range job.TaskStatusIndex[api.Binding] {
			if ssn.Nodes["n1"].Tasks[api.TaskID("ns/"+task.Name)] != nil {
				out = append(out, task.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// groupsIn decodes the BIND_GROUPs the log took: each as its pods' names, in log order.
func groupsIn(t *testing.T, c *Cache, values [][]byte) []string {
	t.Helper()
	var out []string
	for _, value := range values {
		rec, err := c.catalog.Decode(value) // the header and the schema it names; a BIND_GROUP's body is ours to read
		if err != nil {
			t.Fatal(err)
		}
		var bg avrolog.BindGroup
		if err := avro.Unmarshal(rec.Schema.Schema, value[avrolog.HeaderSize:], &bg); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range bg.Binds {
			names = append(names, strings.TrimPrefix(b.Pod, "u"))
		}
		out = append(out, strings.Join(names, "+"))
	}
	return out
}

// One BIND_GROUP per job's commit, published while the actions go on, in their order; a group
// the broker refused, or the fold rejected, is taken back out of the session; a group the log
// admitted stays, whatever became of its neighbour; a later commit of a job already published
// waits for that job's verdict (published if admitted, else taken back unpublished).
func TestFlushTakesBackOnlyWhatTheLogDidNotAdmit(t *testing.T) {
	tests := []struct {
		name       string
		binds      []string
		refuse     map[int]bool   // appends the broker refuses, by call
		reject     map[int64]bool // offsets the fold rejects
		wantLog    []string       // the groups the log took
		wantPlaced []string
		wantErr    bool
		want       Verdicts
	}{
		{"both admitted", []string{"a0", "a1", "b0"}, nil, nil, []string{"a0+a1", "b0"},
			[]string{"a0", "a1", "b0"}, false, Verdicts{Groups: 2, Admitted: 2, Binds: 3}},
		{"b rejected by the fold", []string{"a0", "b0"}, nil, map[int64]bool{1: true}, []string{"a0", "b0"},
			[]string{"a0"}, false, Verdicts{Groups: 2, Admitted: 1, Rejected: 1, Binds: 1}},
		{"b refused by the broker, a kept", []string{"a0", "b0"}, map[int]bool{1: true}, nil, []string{"a0"},
			[]string{"a0"}, true, Verdicts{Groups: 1, Admitted: 1, Unpublished: 1, Binds: 1}},
		{"a refused by the broker, b kept", []string{"a0", "b0"}, map[int]bool{0: true}, nil, []string{"b0"},
			[]string{"b0"}, true, Verdicts{Groups: 1, Admitted: 1, Unpublished: 1, Binds: 1}},
		{"a later commit of a is held, then published after a's admission", []string{"a0", "b0", "a1"}, nil, nil,
			[]string{"a0", "b0", "a1"}, []string{"a0", "a1", "b0"}, false, Verdicts{Groups: 3, Admitted: 3, Binds: 3}},
		{"a later commit of a rejected job is never published", []string{"a0", "b0", "a1"}, nil, map[int64]bool{0: true},
			[]string{"a0", "b0"}, []string{"b0"}, false, Verdicts{Groups: 2, Admitted: 1, Rejected: 1, Binds: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &appender{refuse: tt.refuse}
			c := newCache(t, w, &fold{reject: tt.reject})
			ssn := session(t, c, tt.binds...)
			v, err := c.Flush(context.Background(), ssn)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if got := groupsIn(t, c, w.values); !slices.Equal(got, tt.wantLog) {
				t.Errorf("the log took %v, want %v", got, tt.wantLog)
			}
			if got := placed(ssn); !slices.Equal(got, tt.wantPlaced) {
				t.Errorf("placed %v, want %v", got, tt.wantPlaced)
			}
			v.Reasons = nil
			if !reflect.DeepEqual(v, tt.want) {
				t.Errorf("verdicts %+v, want %+v", v, tt.want)
			}
		})
	}
}

// A group is in the log before the actions end: the binder starts on the first gang while the
// session places the rest.
func TestAGroupIsPublishedWhenTheNextJobsBindComes(t *testing.T) {
	w := &appender{}
	c := newCache(t, w, &fold{})
	session(t, c, "a0", "a1")
	if len(w.values) != 0 {
		t.Fatalf("a's group was published before a bind of another job sealed it")
	}
	session(t, c, "b0")
	if got := groupsIn(t, c, w.values); !slices.Equal(got, []string{"a0+a1"}) {
		t.Fatalf("after b's first bind the log has %v, want a's group", got)
	}
}
