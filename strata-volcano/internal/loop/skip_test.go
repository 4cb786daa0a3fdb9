package loop

import (
	"slices"
	"testing"
	"time"
)

// preparing is the fake with logcache.Cache's Prepare: it says, cycle by cycle, whether the
// session would repeat the last one.
type preparing struct {
	*fakeCache
	again []bool
	asked int
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
		again     []bool
		wantOpen  []bool // per cycle: did a session open
	}{
		{"a changed input runs; a repeat is left out", true, time.Hour,
			[]bool{false, true, true, false, true}, []bool{true, false, false, true, false}},
		{"the first cycle always runs", true, time.Hour, []bool{true, true}, []bool{true, false}},
		{"FullEvery runs a repeat anyway", true, 0, []bool{true, true, true}, []bool{true, true, true}},
		{"without SkipRepeats every session runs", false, time.Hour, []bool{false, true, true}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &preparing{fakeCache: &fakeCache{}, again: tt.again}
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
