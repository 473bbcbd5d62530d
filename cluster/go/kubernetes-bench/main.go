// Command kubernetes-bench measures how fast Kubernetes works on the store under a running
// kube-apiserver: it creates, updates, lists and deletes ConfigMaps through client-go with 1, 16
// and 64 clients, watches them while they are written, and prints one JSON line per row with the
// row's throughput, its latency (p50 and p99), the CPU the store's members and the apiserver spent
// per request, and the members' memory. scripts/bench-kubernetes.sh runs it against the same
// apiserver build on revkv and on etcd 3.6 and 3.7, order rotated, and compares the rows.
//
// The program only measures; it asserts what must hold for the numbers to mean anything (every
// object created, updated and deleted, every list complete, every write seen by the watcher) and
// fails otherwise.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The longest the whole run may take before it is abandoned; a row that hangs is a failure, not
// a slow result.
const runDeadline = 60 * time.Minute

// options are the command line's.
type options struct {
	kubeconfig    string
	store         string
	objects       int
	clientCounts  []int
	wholeLists    int
	pagedLists    int
	pageSize      int64
	valueBytes    int
	storePIDs     []int
	apiserverPID  int
	namespaceStem string
}

func main() {
	var opts options
	var clients, storePIDs string
	flag.StringVar(&opts.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the administrator's kubeconfig")
	flag.StringVar(&opts.store, "store", "", "the store's name, copied into every row (revkv, etcd-3.6, ...)")
	flag.IntVar(&opts.objects, "objects", 10000, "ConfigMaps created, updated and deleted per client count")
	flag.StringVar(&clients, "clients", "1,16,64", "the client counts, comma-separated, each a row of its own")
	flag.IntVar(&opts.wholeLists, "whole-lists", 20, "whole lists (no limit) per client count")
	flag.IntVar(&opts.pagedLists, "paged-lists", 20, "paged lists (every page) per client count")
	flag.Int64Var(&opts.pageSize, "page-size", 500, "the limit of each page of a paged list")
	flag.IntVar(&opts.valueBytes, "value-bytes", 256, "bytes of data in each ConfigMap")
	flag.StringVar(&storePIDs, "store-pids", "", "comma-separated process ids of the store's members")
	flag.IntVar(&opts.apiserverPID, "apiserver-pid", 0, "the kube-apiserver's process id")
	flag.StringVar(&opts.namespaceStem, "namespace", "bench", "the stem of the namespaces made, one per client count")
	flag.Parse()
	var err error
	if opts.clientCounts, err = parseCounts(clients); err != nil {
		fail(fmt.Errorf("--clients: %w", err))
	}
	if opts.storePIDs, err = parseCounts(storePIDs); err != nil || len(opts.storePIDs) == 0 {
		fail(fmt.Errorf("--store-pids: give the members' process ids (%v)", err))
	}
	if opts.apiserverPID <= 0 || opts.objects <= 0 || opts.pageSize <= 0 {
		fail(fmt.Errorf("--apiserver-pid, --objects and --page-size must be positive"))
	}
	if err := run(opts); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kubernetes-bench: %v\n", err)
	os.Exit(1)
}

// parseCounts reads a comma-separated list of positive integers.
func parseCounts(text string) ([]int, error) {
	var counts []int
	for _, field := range strings.Split(text, ",") {
		if field = strings.TrimSpace(field); field == "" {
			continue
		}
		count, err := strconv.Atoi(field)
		if err != nil || count <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", field)
		}
		counts = append(counts, count)
	}
	return counts, nil
}

func run(opts options) error {
	config, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig %q: %w", opts.kubeconfig, err)
	}
	// Protobuf, as Kubernetes' own controllers speak to the apiserver, and no client-side rate
	// limit: the apiserver and the store are what is measured, not client-go's token bucket.
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.QPS = 1e6
	config.Burst = 1e6
	config.UserAgent = "revkv-kubernetes-bench"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
	defer cancel()
	meter := processMeter{storePIDs: opts.storePIDs, apiserverPID: opts.apiserverPID}
	output := json.NewEncoder(os.Stdout)
	for _, clients := range opts.clientCounts {
		bench := &benchmark{ctx: ctx, client: client, options: opts, clients: clients, meter: meter}
		rows, err := bench.run()
		if err != nil {
			return fmt.Errorf("%d clients: %w", clients, err)
		}
		for _, row := range rows {
			row.Store = opts.store
			if err := output.Encode(row); err != nil {
				return err
			}
		}
	}
	return nil
}
