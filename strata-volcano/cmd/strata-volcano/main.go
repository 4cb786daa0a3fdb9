// Command strata-volcano runs Volcano v1.10.0's own actions and plugins as one active scheduler
// replica on Strata's cache log: several replicas on one log never double-book a node and never
// half-place a gang, because the fold admits each BIND_GROUP in log order (docs/volcano.md).
//
// It needs its sidecar (strata volcano-sidecar, or strata volcano, which starts both): Strata's
// fold on the same log, which answers the version, the overlays and the verdicts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/cmd/scheduler/app/options"
	_ "volcano.sh/volcano/pkg/scheduler/actions" // registers enqueue, allocate, backfill, preempt, reclaim, shuffle
	"volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/gpushare"
	"volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu"
	_ "volcano.sh/volcano/pkg/scheduler/plugins" // registers Volcano's plugins

	"strata.local/volcano/internal/avrolog"
	"strata.local/volcano/internal/cachelog"
	"strata.local/volcano/internal/clusterinfo"
	"strata.local/volcano/internal/logcache"
	"strata.local/volcano/internal/loop"
	"strata.local/volcano/internal/objects"
	"strata.local/volcano/internal/server"
	"strata.local/volcano/internal/sidecar"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type config struct {
	replica, bootstrap, topicPrefix, sidecarURL, schemas, kubeconfig string
	schedulerNames                                                   listFlag
	defaultQueue, schedulerConf, kinds, httpHost                     string
	period, verdictTimeout, sidecarGrace, fullEvery                  time.Duration
	qps                                                              float64
	burst                                                            int
	httpPort, exitWhenIdle                                           int
	exitWithParent, skipRepeats                                      bool
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func parse() config {
	var c config
	fs := flag.CommandLine
	klog.InitFlags(fs)
	fs.StringVar(&c.replica, "replica", "", "this replica's id, written into every BIND_GROUP and EVICT (required)")
	fs.StringVar(&c.bootstrap, "bootstrap", env("STRATA_KAFKA_BOOTSTRAP", "127.0.0.1:19092"), "Kafka bootstrap servers (TLS and SASL: STRATA_KAFKA_SECURITY_PROTOCOL, _SASL_*, _SSL_*)")
	fs.StringVar(&c.topicPrefix, "topic-prefix", env("STRATA_TOPIC_PREFIX", "strata."), "prefix of every topic name")
	fs.StringVar(&c.sidecarURL, "sidecar", "", "the sidecar's URL, http://127.0.0.1:PORT (required)")
	fs.StringVar(&c.schemas, "schemas", env("STRATA_SCHEMAS", ""), "directory of Strata's Avro schemas, schemas/avsc (required)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of status writes and events (default: in-cluster; KUBECONFIG is not read)")
	fs.Var(&c.schedulerNames, "scheduler-name", "a scheduler whose pods the cache accepts (repeatable; default: volcano)")
	fs.StringVar(&c.defaultQueue, "default-queue", "default", "queue of a PodGroup that names none")
	fs.StringVar(&c.schedulerConf, "scheduler-conf", "", "vc-scheduler configuration file (default: Volcano's)")
	fs.StringVar(&c.kinds, "kinds", strings.Join(objects.KindNames(), ","), "kinds that must be SYNCED before the first cycle")
	fs.DurationVar(&c.period, "schedule-period", time.Second, "the period between scheduling cycles")
	fs.DurationVar(&c.verdictTimeout, "verdict-timeout", time.Minute, "how long to wait for the fold's verdict on a record")
	fs.DurationVar(&c.sidecarGrace, "sidecar-grace", 20*time.Second, "exit (and fail /healthz) once the sidecar has not answered its /healthz for this long, or its fold has not moved for this long while behind this replica's own reading of the log")
	fs.Float64Var(&c.qps, "kube-api-qps", 2000, "QPS of status writes and events (vc-scheduler's default)")
	fs.IntVar(&c.burst, "kube-api-burst", 2000, "burst of status writes and events (vc-scheduler's default)")
	fs.IntVar(&c.httpPort, "http-port", -1, "serve /metrics, /healthz and /readyz on this port (0: any free one; default: off)")
	fs.StringVar(&c.httpHost, "http-host", "127.0.0.1", "address the HTTP endpoints bind to")
	fs.BoolVar(&c.skipRepeats, "skip-repeats", true, "leave out a session that would repeat the last one: nothing changed in the log, the last session published and wrote nothing (clock-free configurations only)")
	fs.DurationVar(&c.fullEvery, "full-session-every", 10*time.Second, "with --skip-repeats, still run a session at least this often")
	fs.IntVar(&c.exitWhenIdle, "exit-when-idle", 0, "stop after N cycles in a row that bound nothing (0: never)")
	fs.BoolVar(&c.exitWithParent, "exit-with-parent", false, "exit when the process that started this one is gone (its sidecar's)")
	flag.Parse()
	if len(c.schedulerNames) == 0 {
		c.schedulerNames = listFlag{"volcano"}
	}
	return c
}

func main() {
	c := parse()
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "strata-volcano: error: %v\n", err)
		os.Exit(1)
	}
}

func restConfig(kubeconfig string, qps float64, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the Kubernetes client's configuration (--kubeconfig): %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = "strata-volcano"
	return cfg, nil
}

func run(c config) error {
	began := time.Now()
	if c.replica == "" || c.sidecarURL == "" || c.schemas == "" {
		return errors.New("--replica, --sidecar and --schemas are required")
	}
	conf, err := loop.LoadConf(c.schedulerConf)
	if err != nil {
		return err
	}
	actions, plugins := conf.Names()
	for _, p := range plugins {
		if p == "deviceshare" {
			return errors.New("the deviceshare plugin writes node and pod annotations through the API, outside the log: not supported")
		}
	}
	catalog, err := avrolog.Load(c.schemas)
	if err != nil {
		return err
	}
	cfg, err := restConfig(c.kubeconfig, c.qps, c.burst)
	if err != nil {
		return err
	}
	// what vc-scheduler's flags would set; CalculateNumOfFeasibleNodesToFind reads them
	opts := options.NewServerOption()
	opts.SchedulerNames = c.schedulerNames
	opts.DefaultQueue = c.defaultQueue
	opts.SchedulePeriod = c.period
	opts.EnablePriorityClass = true
	opts.MinNodesToFind, opts.MinPercentageOfNodesToFind, opts.PercentageOfNodesToFind = 100, 5, 0
	opts.RegisterOptions()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// runCtx ends with a signal, or with the reason the replica must stop: the log reader
	// failed, or the sidecar is dead or stalled
	runCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	stopped := func(err error) error { // the error run returns when a wait ended with err
		if ctx.Err() != nil {
			return nil // a signal: a clean stop
		}
		if cause := context.Cause(runCtx); runCtx.Err() != nil {
			return cause
		}
		return err
	}
	if c.exitWithParent {
		go exitWithParent(os.Getppid())
	}
	conn, err := cachelog.SecurityFromEnv(os.Getenv).Conn(c.bootstrap)
	if err != nil {
		return err
	}
	topic := cachelog.Topic(c.topicPrefix)
	end, err := cachelog.EndOffset(ctx, conn, topic)
	if err != nil {
		return err
	}
	store := objects.New(strings.Split(c.kinds, ","), end)
	reader, err := cachelog.NewReader(conn, topic, 0)
	if err != nil {
		return err
	}
	defer reader.Close()
	go func() {
		err := store.Follow(runCtx, reader, catalog)
		if err == nil && runCtx.Err() == nil {
			err = errors.New("the cache log reader stopped")
		}
		if err != nil {
			abort(err)
		}
	}()
	side := sidecar.New(c.sidecarURL)
	// the sidecar's watchdog from the start: a sidecar that dies while this replica syncs ends
	// it too; the probes read its last answer and never ask the sidecar themselves
	watchdog := &sidecar.Watchdog{Client: side, Grace: c.sidecarGrace, Store: store.Version}
	go func() {
		if err := watchdog.Run(runCtx); err != nil {
			abort(err)
		}
	}()
	writer, err := cachelog.NewWriter(conn, topic)
	if err != nil {
		return err
	}
	defer writer.Close()
	cache, err := logcache.New(logcache.Config{
		Context:       runCtx,
		Replica:       c.replica,
		Fold:          clusterinfo.Config{SchedulerNames: c.schedulerNames, DefaultQueue: c.defaultQueue},
		VerdictWithin: c.verdictTimeout,
	}, store, side, writer, catalog, cfg)
	if err != nil {
		return err
	}
	l := &loop.Loop{Cache: cache, Conf: conf, Period: c.period, ExitWhenIdle: c.exitWhenIdle,
		SkipRepeats: c.skipRepeats && conf.ClockFree(), FullEvery: c.fullEvery}
	if c.skipRepeats && !conf.ClockFree() {
		fmt.Fprintf(os.Stderr, "replica %s: an action or plugin reads the clock: every cycle runs a session\n", c.replica)
	}
	var replica *server.Replica
	if c.httpPort >= 0 {
		// both probes read atomics only (the store's mirrors, the watchdog's last answer, the
		// loop's beat): a build holding the store's lock for seconds never delays them. Served
		// until the process ends: /healthz tells why while a dying replica drains its cycle.
		replica = &server.Replica{
			Failure:  store.Failure,
			Dead:     watchdog.DeadReason,
			LastBeat: l.LastBeat,
			Stale:    2*time.Minute + 10*c.period,
			NotReady: []func() string{store.NotReadyReason, watchdog.ReadyReason},
		}
		addr, err := server.Serve(ctx, c.httpHost, c.httpPort, server.Handler(replica.Probes()))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "strata-volcano: http://%s/readyz\n", addr)
	}
	fmt.Fprintf(os.Stderr, "replica %s: actions %s; plugins %s; waiting for %s to sync\n",
		c.replica, strings.Join(actions, ", "), strings.Join(plugins, ", "), c.kinds)
	if err := store.WaitReady(runCtx); err != nil {
		return stopped(err)
	}
	fmt.Fprintf(os.Stderr, "replica %s: read the log to its end at start (%d records) in %.1f s\n",
		c.replica, store.Version(), time.Since(began).Seconds())
	if err := cache.WaitReady(runCtx); err != nil {
		return stopped(err)
	}
	if replica != nil {
		replica.MarkReady() // the store and the sidecar were ready just now
	}
	fmt.Fprintf(os.Stderr, "replica %s: synced at version %d (log end at start %d) in %.1f s\n",
		c.replica, store.Version(), end, time.Since(began).Seconds())
	var mu sync.Mutex // totals: the loop's, read at the end
	totals := map[string]int{}
	l.OnCycle = func(r loop.Report) {
		if gpushare.GpuSharingEnable || gpushare.GpuNumberEnable || vgpu.VGPUEnable {
			klog.Fatal("device sharing was switched on: it writes through the API outside the log")
		}
		klog.V(1).Info(r.String())
		v := r.Verdicts
		if v.Groups == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		totals["admitted"] += v.Admitted
		totals["rejected"] += v.Rejected
		totals["binds"] += v.Binds
		line := fmt.Sprintf("replica %s: %d BIND_GROUPs admitted (%d binds), %d rejected", c.replica, v.Admitted, v.Binds, v.Rejected)
		reasons := make([]string, 0, len(v.Reasons))
		for reason, n := range v.Reasons {
			reasons = append(reasons, fmt.Sprintf("; %dx %s", n, reason))
		}
		sort.Strings(reasons)
		fmt.Fprintln(os.Stderr, line+strings.Join(reasons, ""))
	}
	loopErr := make(chan error, 1)
	go func() { loopErr <- l.Run(runCtx) }()
	select {
	case err = <-loopErr: // --exit-when-idle, or runCtx ended between cycles
	case <-runCtx.Done():
		// a cycle may be waiting on a sidecar that no longer answers (up to --verdict-timeout):
		// the process does not wait that long for it to end
		select {
		case err = <-loopErr:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(os.Stderr, "replica %s: the cycle in flight did not end within 10 s; exiting\n", c.replica)
		}
	}
	err = stopped(err)
	mu.Lock()
	fmt.Fprintf(os.Stderr, "replica %s: %d BIND_GROUPs admitted (%d binds), %d rejected\n",
		c.replica, totals["admitted"], totals["binds"], totals["rejected"])
	mu.Unlock()
	return err
}

// exitWithParent ends the process once its parent is gone (it is then re-parented): a replica
// whose sidecar was killed must not go on scheduling without its fold.
func exitWithParent(parent int) {
	for range time.Tick(250 * time.Millisecond) {
		if os.Getppid() != parent {
			fmt.Fprintln(os.Stderr, "strata-volcano: the sidecar's process is gone; exiting")
			os.Exit(1)
		}
	}
}
