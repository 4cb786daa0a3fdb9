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
	period, verdictTimeout                                           time.Duration
	qps                                                              float64
	burst                                                            int
	httpPort, exitWhenIdle                                           int
	exitWithParent                                                   bool
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
	fs.Float64Var(&c.qps, "kube-api-qps", 2000, "QPS of status writes and events (vc-scheduler's default)")
	fs.IntVar(&c.burst, "kube-api-burst", 2000, "burst of status writes and events (vc-scheduler's default)")
	fs.IntVar(&c.httpPort, "http-port", -1, "serve /metrics, /healthz and /readyz on this port (0: any free one; default: off)")
	fs.StringVar(&c.httpHost, "http-host", "127.0.0.1", "address the HTTP endpoints bind to")
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
	followed := make(chan error, 1)
	go func() { followed <- store.Follow(ctx, reader, catalog) }()
	writer, err := cachelog.NewWriter(conn, topic)
	if err != nil {
		return err
	}
	defer writer.Close()
	cache, err := logcache.New(logcache.Config{
		Context:       ctx,
		Replica:       c.replica,
		Fold:          clusterinfo.Config{SchedulerNames: c.schedulerNames, DefaultQueue: c.defaultQueue},
		VerdictWithin: c.verdictTimeout,
	}, store, sidecar.New(c.sidecarURL), writer, catalog, cfg)
	if err != nil {
		return err
	}
	l := &loop.Loop{Cache: cache, Conf: conf, Period: c.period, ExitWhenIdle: c.exitWhenIdle}
	if c.httpPort >= 0 {
		ready := false
		addr, err := server.Serve(ctx, c.httpHost, c.httpPort, server.Handler(server.Probes{
			Live: func() string {
				if err := store.Failure(); err != nil {
					return "the cache stopped following the log: " + err.Error()
				}
				if beat := l.LastBeat(); !beat.IsZero() && time.Since(beat) > 2*time.Minute+10*c.period {
					return fmt.Sprintf("no scheduling cycle for %.0f s", time.Since(beat).Seconds())
				}
				return ""
			},
			Ready: func(ctx context.Context) string {
				if ready { // readiness only goes up, as Strata's other components'
					return ""
				}
				reason := cache.NotReadyReason(ctx)
				ready = reason == ""
				return reason
			},
		}))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "strata-volcano: http://%s/readyz\n", addr)
	}
	fmt.Fprintf(os.Stderr, "replica %s: actions %s; plugins %s; waiting for %s to sync\n",
		c.replica, strings.Join(actions, ", "), strings.Join(plugins, ", "), c.kinds)
	if err := store.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(os.Stderr, "replica %s: read the log to its end at start (%d records) in %.1f s\n",
		c.replica, store.Version(), time.Since(began).Seconds())
	if err := cache.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(os.Stderr, "replica %s: synced at version %d (log end at start %d) in %.1f s\n",
		c.replica, store.Version(), end, time.Since(began).Seconds())
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
	go func() { loopErr <- l.Run(ctx) }()
	select {
	case err = <-loopErr:
	case err = <-followed:
		if err == nil && ctx.Err() == nil {
			err = errors.New("the cache log reader stopped")
		}
		stop()
		<-loopErr
	}
	fmt.Fprintf(os.Stderr, "replica %s: %d BIND_GROUPs admitted (%d binds), %d rejected\n",
		c.replica, totals["admitted"], totals["binds"], totals["rejected"])
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
