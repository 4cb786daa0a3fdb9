package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// breakage is one deliberate breakage of the code under test: the real source with one
// mechanism taken away (each old text replaced by its new one), and the tests that must catch it.
type breakage struct {
	name  string
	file  string      // under the module's root
	edits [][2]string // old text (found exactly once), new text
	tests string      // -run pattern: each of these tests must fail
	fail  []string    // the tests that must be reported failing
	race  bool        // caught by the race detector only: tried in a -race run
}

var breakages = []breakage{
	// server: the probes' answers
	{"a probe answers 200 whatever it says", "internal/server/server.go",
		[][2]string{{"\t\tif reason != \"\" {\n\t\t\tw.WriteHeader", "\t\tif false {\n\t\t\tw.WriteHeader"}},
		"^(TestProbes|TestReplicaLive)$", []string{"TestProbes", "TestReplicaLive"}, false},
	{"readiness is not kept once reached", "internal/server/server.go",
		[][2]string{{"\tr.ready.Store(true)\n", "\n"}}, "^TestReplicaReady$", []string{"TestReplicaReady"}, false},
	{"readiness is a plain bool (the race detector sees it)", "internal/server/server.go",
		[][2]string{{"\tready atomic.Bool ", "\tready plainBool "}, {"// Live is", "var _ atomic.Bool\n\ntype plainBool struct{ v bool }\n\n" +
			"func (b *plainBool) Load() bool   { return b.v }\nfunc (b *plainBool) Store(v bool) { b.v = v }\n\n// Live is"}},
		"^TestReplicaProbesConcurrently$", []string{"TestReplicaProbesConcurrently"}, true},
	{"the heartbeat's age is not looked at", "internal/server/server.go",
		[][2]string{{"now().Sub(beat) > r.Stale", "false"}}, "^TestReplicaLive$", []string{"TestReplicaLive"}, false},

	// sidecar: the client and the watchdog
	{"a missing verdict is not noticed", "internal/sidecar/sidecar.go",
		[][2]string{{"if _, ok := out[o]; !ok {", "if _, ok := out[o]; false && !ok {"}}, "^TestOutcomes$", []string{"TestOutcomes"}, false},
	{"a non-200 answer is read as an answer", "internal/sidecar/sidecar.go",
		[][2]string{{"\tif resp.StatusCode != http.StatusOK {\n\t\treturn fmt.Errorf(\"the sidecar answered %s to %s", "\tif false {\n\t\treturn fmt.Errorf(\"the sidecar answered %s to %s"}},
		"^(TestState|TestOutcomes)$", []string{"TestState", "TestOutcomes"}, false},
	{"a state without a version is version 0", "internal/sidecar/sidecar.go",
		[][2]string{{"if answer.Version == nil {", "if answer.Version == nil && false {"}}, "^TestState$", []string{"TestState"}, false},
	{"the sidecar is told to wait a minute whatever the deadline", "internal/sidecar/sidecar.go",
		[][2]string{{"if deadline, ok := ctx.Deadline(); ok {", "if deadline, ok := ctx.Deadline(); false && ok {"}},
		"^TestTimeoutFollowsTheDeadline$", []string{"TestTimeoutFollowsTheDeadline"}, false},
	{"a silent sidecar is never dead", "internal/sidecar/watchdog.go",
		[][2]string{{"case at.Sub(w.aliveAt) >= grace:", "case false:"}}, "^(TestWatchdogJudges|TestWatchdogRun)$",
		[]string{"TestWatchdogJudges", "TestWatchdogRun"}, false},
	{"a stalled fold is never dead", "internal/sidecar/watchdog.go",
		[][2]string{{"case w.answered && at.Sub(w.movedAt) >= grace && w.version < was:", "case false:"}},
		"^TestWatchdogJudges$", []string{"TestWatchdogJudges"}, false},

	// loop: the cycle
	{"the beat is stored after a failed snapshot", "internal/loop/loop.go",
		[][2]string{{"if report.Snapshot.Err == nil {", "if true {"}}, "^TestBeatOnlyOnASuccessfulSnapshot$",
		[]string{"TestBeatOnlyOnASuccessfulSnapshot"}, false},
	{"the binds are published after CloseSession", "internal/loop/loop.go",
		[][2]string{
			{"\tr.Verdicts, r.Err = l.Cache.Flush(ctx, ssn)\n", "\tframework.CloseSession(ssn)\n"},
			{"\tr.Flush = time.Since(started) - r.Open - r.Actions\n\tframework.CloseSession(ssn)\n",
				"\tr.Flush = time.Since(started) - r.Open - r.Actions\n\tr.Verdicts, r.Err = l.Cache.Flush(ctx, ssn)\n"},
		}, "^TestRunOnce$", []string{"TestRunOnce"}, false},
	{"a lost race waits for the period", "internal/loop/loop.go",
		[][2]string{{"wait = 0 // lost a race", "_ = 0 // lost a race"}}, "^TestARejectedGroupStartsTheNextCycleAtOnce$",
		[]string{"TestARejectedGroupStartsTheNextCycleAtOnce"}, false},

	// logcache: the flush
	{"a held group is published whatever its job's first verdict", "internal/logcache/logcache.go",
		[][2]string{{"if admitted[e.job] {", "if _ = admitted; true {"}}, "^TestFlushTakesBackOnlyWhatTheLogDidNotAdmit$",
		[]string{"TestFlushTakesBackOnlyWhatTheLogDidNotAdmit"}, false},
	{"a group the broker refused stays in the session", "internal/logcache/logcache.go",
		[][2]string{{"\t\t\tc.takeBack(ssn, []*group{g}, \"not published\")\n\t\t\tgroupsPublished", "\t\t\t_ = g\n\t\t\tgroupsPublished"}},
		"^TestFlushTakesBackOnlyWhatTheLogDidNotAdmit$", []string{"TestFlushTakesBackOnlyWhatTheLogDidNotAdmit"}, false},
	{"a group waits for the end of the actions", "internal/logcache/logcache.go",
		[][2]string{{"\tif c.open != nil && c.open.job != task.Job {\n\t\tc.sealLocked()\n\t}\n\tif c.open == nil {",
			"\tif c.open != nil && c.open.job != task.Job {\n\t\tc.groups = append(c.groups, c.open)\n\t\tc.sealed[c.open.job] = c.open\n\t\tc.open = nil\n\t}\n\tif c.open == nil {"}},
		"^TestAGroupIsPublishedWhenTheNextJobsBindComes$", []string{"TestAGroupIsPublishedWhenTheNextJobsBindComes"}, false},

	// clusterinfo and objects: the incremental build
	{"the last session's changes are not scanned", "internal/clusterinfo/clusterinfo.go",
		[][2]string{{"} else if b.handedOut && !b.skipScan {", "} else if false {"}},
		"^(TestIncrementalBuildEqualsAFullOne|TestUnchanged)$", []string{"TestIncrementalBuildEqualsAFullOne", "TestUnchanged"}, false},
	{"a zero a discarded allocation leaves makes the node anew", "internal/clusterinfo/clusterinfo.go",
		[][2]string{{"(ok && w != v) || (!ok && v != 0)", "(ok && w != v) || !ok"}}, "^TestUnchanged$", []string{"TestUnchanged"}, false},
	{"a stored object is not marked dirty", "internal/objects/objects.go",
		[][2]string{{"Version: s.view.Version + 1}\n\t\ts.view.Dirty[kind][key] = true\n", "Version: s.view.Version + 1}\n"}},
		"^TestDirty$", []string{"TestDirty"}, false},

	// loop: the sessions left out
	{"--full-session-every counts from a session's start", "internal/loop/loop.go",
		[][2]string{
			{"\tl.lastFull = time.Now() // FullEvery counts from a session's end: at scale one takes seconds\n", ""},
			{"\tl.Cache.BeginSession()\n", "\tl.lastFull = started\n\tl.Cache.BeginSession()\n"},
		}, "^TestSkipRepeats$", []string{"TestSkipRepeats"}, false},

	// cachelog: the record limit
	{"the writer keeps franz-go's 1 MB batch limit", "internal/cachelog/cachelog.go",
		[][2]string{{"\t\tkgo.ProducerBatchMaxBytes(MaxRecordBytes),\n", ""}}, "^TestMaxRecordBytesIsTheCacheLogs$",
		[]string{"TestMaxRecordBytesIsTheCacheLogs"}, false},

	// avrolog: the Python-written vectors
	{"Go writes arrays with a block size, as Python does not", "internal/avrolog/avrolog.go",
		[][2]string{{"DisableBlockSizeHeader: true", "DisableBlockSizeHeader: false"}}, "^TestPythonMessages$",
		[]string{"TestPythonMessages"}, false},
}

// Each package's tests catch a deliberate breakage of the code under test: the package's tests
// are built again with one source file replaced (go test -overlay) by the real file with one
// mechanism taken away, and the named tests must fail (not the build). An edit whose old text
// is not found once makes this test fail: a refactor must move its breakage along. 1-7 s a
// breakage once its dependencies are built; -short skips them.
func TestTheTestsCatchDeliberateBreakages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the deliberate breakages are not built")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	for i, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			if b.race && !raceBuild {
				t.Skip("the race detector catches it: go test -race")
			}
			path := filepath.Join(root, b.file)
			// read every file of the package, so that go test's cache of this result is
			// invalidated when any of them changes (it tracks the files a test opens)
			files, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if _, err := os.ReadFile(f); err != nil {
					t.Fatal(err)
				}
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			broken := string(text)
			for _, e := range b.edits {
				if n := strings.Count(broken, e[0]); n != 1 {
					t.Fatalf("%s has %q %d times, not once: move this breakage along with the code", b.file, e[0], n)
				}
				broken = strings.Replace(broken, e[0], e[1], 1)
			}
			sub := filepath.Join(dir, strings.Repeat("x", i+1))
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			copyPath := filepath.Join(sub, filepath.Base(b.file))
			if err := os.WriteFile(copyPath, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {path: copyPath}})
			overlayPath := filepath.Join(sub, "overlay.json")
			if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"test", "-count=1", "-overlay=" + overlayPath, "-run", b.tests}
			if raceBuild { // the same mode as this run: its dependencies are built already
				args = append(args, "-race")
			}
			cmd := exec.Command(goTool, append(args, "./"+filepath.Dir(b.file))...)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the tests passed against the breakage:\n%s", out)
			}
			for _, name := range b.fail {
				if !strings.Contains(string(out), "--- FAIL: "+name+" ") {
					t.Errorf("%s did not fail:\n%s", name, out)
				}
			}
		})
	}
}
