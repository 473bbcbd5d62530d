// Command kubernetes-e2e drives a running Kubernetes control plane (kube-apiserver,
// kube-controller-manager and kube-scheduler, as scripts/cluster.sh up --kubernetes starts them)
// through client-go and prints what Kubernetes reports, one line per fact, with nothing in it that
// differs by design from one store to another (names with random suffixes, resource versions,
// times). scripts/kubernetes-e2e.sh runs it once on revkv and once on etcd and compares the two
// reports line by line; an expectation that does not hold (a Deployment that never becomes
// available, a lost update) ends it with an error instead.
//
// No kubelet runs: the program makes the Nodes by hand and plays the kubelet's part for the Pods
// bound to them (kubelet.go), so that Deployments become available and deletions finish.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The longest any single expectation may take to come true; generous, as the whole control plane
// and the store share two cores in CI. Waits poll, so a fast machine waits less.
const expectationDeadline = 3 * time.Minute

// options are the command line's.
type options struct {
	kubeconfig   string
	revkvMetrics string
	namespace    string
	killLeader   string
}

func main() {
	var opts options
	flag.StringVar(&opts.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the administrator's kubeconfig")
	flag.StringVar(&opts.revkvMetrics, "revkv-metrics", "",
		"comma-separated /metrics URLs of the revkv members under the apiserver; when set, the "+
			"conflicts of the update race must show in revkv_conflicts_total")
	flag.StringVar(&opts.namespace, "namespace", "e2e", "the namespace the test works in (made fresh)")
	flag.StringVar(&opts.killLeader, "kill-leader", "",
		"a shell command that kills the store's leader with SIGKILL, run while writers and informers run; "+
			"without it the failover step is left out")
	flag.Parse()
	if err := run(opts); err != nil {
		fmt.Fprintf(os.Stderr, "kubernetes-e2e: %v\n", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	config, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig %q: %w", opts.kubeconfig, err)
	}
	// The defaults (5 requests per second, bursts of 10) would make the 16 writers of the update
	// race wait on their own client instead of racing.
	config.QPS = 1000
	config.Burst = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	test, err := newTestContext(ctx, config, opts)
	if err != nil {
		return err
	}
	defer test.stop()
	steps := []struct {
		name string
		run  func(*testContext) error
	}{
		{"nodes and the kubelet's part", startNodesAndKubelet},
		{"deployment", deploymentLifecycle},
		{"custom resources", customResources},
		{"update race", updateRace},
		{"watches", watches},
		{"apiserver metrics", apiserverMetrics},
	}
	if opts.killLeader != "" {
		// Last: the store goes on with one member fewer.
		steps = append(steps, struct {
			name string
			run  func(*testContext) error
		}{"failover", failover})
	}
	for _, step := range steps {
		test.report("step %s", step.name)
		if err := step.run(test); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

// restConfigFor is a copy of the base configuration, so that clients do not share one connection
// when they should race as separate clients.
func restConfigFor(base *rest.Config, userAgent string) *rest.Config {
	config := rest.CopyConfig(base)
	config.UserAgent = userAgent
	return config
}
