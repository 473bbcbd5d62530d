// Command controller-bench-go is a reference replica-set controller written the way a Kubernetes
// engineer writes one with client-go (an informer filling a cache.Indexer, a typed rate-limited
// workqueue, N workers), talking to revkv or etcd through etcd's gRPC API. A Rust driver starts
// it as a child process, writes desired state and measures time to convergence, conflicts and
// memory, to compare it with revkv's Rust controller runtime doing the same job.
//
// Interface: after the first list it prints `synced N` (N cached keys) on stdout. It runs until
// SIGTERM, SIGINT or EOF on stdin, then stops the watch, drains the queue, waits for the workers
// and prints one JSON line of counters on stdout. Logs go to stderr only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// dialTimeout bounds connecting to the endpoints at start.
const dialTimeout = 5 * time.Second

// summary is the JSON line printed at exit; the driver parses these exact names.
type summary struct {
	Reconciles int64 `json:"reconciles"`
	Conflicts  int64 `json:"conflicts"`
	Retries    int64 `json:"retries"`
	Errors     int64 `json:"errors"`
	Relists    int64 `json:"relists"`
	CachedKeys int   `json:"cached_keys"`
}

type options struct {
	endpoints []string
	prefix    string
	workers   int
}

func main() {
	os.Exit(run(parseOptions()))
}

func parseOptions() options {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "the store's client endpoints, comma-separated")
	prefix := flag.String("prefix", "bench/controller/", "the prefix holding sets/ and replicas/")
	workers := flag.Int("workers", 4, "reconcile workers")
	flag.Parse()
	opts := options{prefix: *prefix, workers: max(*workers, 1)}
	for _, endpoint := range strings.Split(*endpoints, ",") {
		if endpoint = strings.TrimSpace(endpoint); endpoint != "" {
			opts.endpoints = append(opts.endpoints, endpoint)
		}
	}
	return opts
}

// run answers the exit code: 0 after an orderly stop, 1 if the store could not be reached or
// the first list failed.
func run(opts options) int {
	logger := log.New(os.Stderr, "controller-bench-go: ", log.LstdFlags|log.Lmicroseconds)
	stopContext, stop := contextStoppedBySignalOrStdinEOF()
	defer stop()

	client, err := clientv3.New(clientv3.Config{Endpoints: opts.endpoints, DialTimeout: dialTimeout})
	if err != nil {
		logger.Printf("connecting to %v: %v", opts.endpoints, err)
		return 1
	}
	defer client.Close()
	if err := waitUntilReachable(stopContext, client, opts.prefix); err != nil && stopContext.Err() == nil {
		logger.Printf("no answer from %v within %v: %v", opts.endpoints, dialTimeout, err)
		return 1
	}

	layout := newKeyLayout(opts.prefix)
	indexer := newObjectIndexer(layout)
	queue := newReplicaSetQueue()
	counts := &counters{}
	sharedInformer := &informer{
		client: client, prefix: opts.prefix, layout: layout, indexer: indexer,
		enqueue: queue.Add, logger: logger,
	}
	worker := &controller{client: client, layout: layout, indexer: indexer, queue: queue, counts: counts, logger: logger}

	listedRevision, cachedKeys, err := sharedInformer.initialSync(stopContext)
	if err != nil {
		if stopContext.Err() != nil {
			// Stopped before the first list finished: an orderly stop with nothing done.
			queue.ShutDown()
			printSummary(logger, counts, sharedInformer, 0)
			return 0
		}
		logger.Printf("listing %q: %v", opts.prefix, err)
		return 1
	}
	fmt.Printf("synced %d\n", cachedKeys)

	informerDone := make(chan struct{})
	go func() {
		defer close(informerDone)
		sharedInformer.run(stopContext, listedRevision)
	}()
	var workers sync.WaitGroup
	for range opts.workers {
		workers.Go(worker.runWorker)
	}

	<-stopContext.Done()
	// Stop feeding the queue first, then let the workers finish what is queued or in flight.
	<-informerDone
	queue.ShutDownWithDrain()
	workers.Wait()
	printSummary(logger, counts, sharedInformer, len(indexer.ListKeys()))
	return 0
}

// waitUntilReachable reads one key within the dial timeout. The client connects lazily, so
// without it a store that is down at start would only show as a list page timing out, much later.
func waitUntilReachable(ctx context.Context, client *clientv3.Client, key string) error {
	reachContext, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	_, err := client.Get(reachContext, key)
	return err
}

// contextStoppedBySignalOrStdinEOF answers a context cancelled by SIGTERM, SIGINT, or the end of
// stdin: the driver stops the program by closing the pipe, which also stops it when the driver
// dies without sending a signal.
func contextStoppedBySignalOrStdinEOF() (context.Context, context.CancelFunc) {
	signalled, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	stopContext, cancel := context.WithCancel(signalled)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return stopContext, func() {
		cancel()
		stopSignals()
	}
}

func printSummary(logger *log.Logger, counts *counters, sharedInformer *informer, cachedKeys int) {
	line, err := json.Marshal(summary{
		Reconciles: counts.reconciles.Load(),
		Conflicts:  counts.conflicts.Load(),
		Retries:    counts.retries.Load(),
		Errors:     counts.errors.Load(),
		Relists:    sharedInformer.relists.Load(),
		CachedKeys: cachedKeys,
	})
	if err != nil {
		logger.Printf("encoding the summary: %v", err)
		return
	}
	fmt.Println(string(line))
}
