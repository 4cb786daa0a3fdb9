package loop

import (
	"context"
	"slices"
	"testing"
	"time"

	"volcano.sh/volcano/pkg/scheduler/framework"

	"strata.local/volcano/internal/logcache"
)

// preparing is the fake with logcache.Cache's Prepare: it says, cycle by cycle, whether the
// session would repeat the last one.
type preparing struct {
	*fakeCache
	again []bool
	asked int
	slow  time.Duration // how long each session's flush takes
}

func (p *preparing) Flush(ctx context.Context, ssn *framework.Session) (logcache.Verdicts, error) {
	time.Sleep(p.slow)
	return p.fakeCache.Flush(ctx, ssn)
}

func (p *preparing) Prepare() bool {
	p.fakeCache.Snapshot()
	again := p.asked < len(p.again) && p.again[p.asked]
	p.asked++
	return again
}

// A session that would repeat the last one is left out, unless FullEvery has passed since the
// last session ran; a loop without SkipRepeats runs every session (the breakage the count
// catches: its sessions open every cycle).
func TestSkipRepeats(t *testing.T) {
	tests := []struct {
		name      string
		skip      bool
		fullEvery time.Duration
		slow      time.Duration
		again     []bool
		wantOpen  []bool // per cycle: did a session open
	}{
		{"a changed input runs; a repeat is left out", true, time.Hour, 0,
			[]bool{false, true, true, false, true}, []bool{true, false, false, true, false}},
		{"the first cycle always runs", true, time.Hour, 0, []bool{true, true}, []bool{true, false}},
		{"FullEvery runs a repeat anyway", true, 0, 0, []bool{true, true, true}, []bool{true, true, true}},
		// at scale a session takes longer than FullEvery: counted from its start, every cycle
		// would run one
		{"FullEvery counts from the last session's end", true, 100 * time.Millisecond, 150 * time.Millisecond,
			[]bool{true, true}, []bool{true, false}},
		{"without SkipRepeats every session runs", false, time.Hour, 0, []bool{false, true, true}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &preparing{fakeCache: &fakeCache{}, again: tt.again, slow: tt.slow}
			l := newLoop(t, c.fakeCache)
			l.Cache, l.SkipRepeats, l.FullEvery = c, tt.skip, tt.fullEvery
			var opened []bool
			for range tt.again {
				before := count(c.Events(), "open")
				r := l.RunOnce(t.Context())
				ran := count(c.Events(), "open") > before
				if ran == r.Skipped {
					t.Fatalf("report says skipped=%v but a session opened=%v", r.Skipped, ran)
				}
				opened = append(opened, ran)
			}
			if !slices.Equal(opened, tt.wantOpen) {
				t.Errorf("sessions opened %v, want %v", opened, tt.wantOpen)
			}
		})
	}
}

func count(events []string, name string) int {
	n := 0
	for _, e := range events {
		if e == name {
			n++
		}
	}
	return n
}

// The default configuration is clock-free; one with sla is not.
func TestClockFree(t *testing.T) {
	def, err := LoadConf("")
	if err != nil {
		t.Fatal(err)
	}
	if !def.ClockFree() {
		t.Error("Volcano's default configuration is not clock-free")
	}
	def.Tiers[0].Plugins = append(def.Tiers[0].Plugins, def.Tiers[0].Plugins[0])
	def.Tiers[0].Plugins[len(def.Tiers[0].Plugins)-1].Name = "sla"
	if def.ClockFree() {
		t.Error("a configuration with sla (job waiting time) counted clock-free")
	}
}
