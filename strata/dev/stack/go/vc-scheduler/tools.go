//go:build tools

// Package tools pins Volcano's own scheduler, vc-scheduler, the reference that
// bench/volcano_bench.py --scale runs beside strata-volcano (see strata/dev/stack/vcscheduler.py).
package tools

import _ "volcano.sh/volcano/cmd/scheduler"
