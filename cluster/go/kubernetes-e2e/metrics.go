package main

// What the apiserver's own metrics say about the store under it: that consistent lists are
// answered from the watch cache (which the apiserver does only when the store's version promises
// working watch-progress requests), that such a list matches the writes, and that the watch
// cache's consistency checker, when it ran, found the cache equal to the store.

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func apiserverMetrics(test *testContext) error {
	before, err := apiserverCounter(test, "apiserver_watch_cache_consistent_read_total",
		`resource="configmaps"`, `success="true"`, `fallback="false"`)
	if err != nil {
		return err
	}
	list, err := test.client.CoreV1().ConfigMaps(test.namespace).List(test.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	after, err := apiserverCounter(test, "apiserver_watch_cache_consistent_read_total",
		`resource="configmaps"`, `success="true"`, `fallback="false"`)
	if err != nil {
		return err
	}
	if after <= before {
		return fmt.Errorf("a consistent list of configmaps was not answered from the watch cache " +
			"(apiserver_watch_cache_consistent_read_total did not grow): the apiserver does not trust the store's progress notifications")
	}
	var names []string
	for _, configMap := range list.Items {
		names = append(names, configMap.Name)
	}
	sort.Strings(names)
	test.report("consistent list from the watch cache: [%s]", strings.Join(names, " "))
	failures, err := apiserverCounter(test, "apiserver_storage_consistency_checks_total", `status="failure"`)
	if err != nil {
		return err
	}
	successes, err := apiserverCounter(test, "apiserver_storage_consistency_checks_total", `status="success"`)
	if err != nil {
		return err
	}
	if failures > 0 {
		return fmt.Errorf("the watch cache's consistency checker found %v inconsistencies", failures)
	}
	fmt.Printf("# the watch cache's consistency checker ran %v times, all consistent\n", successes)
	return nil
}

// apiserverCounter sums the samples of metric whose labels contain every one of labels.
func apiserverCounter(test *testContext, metric string, labels ...string) (float64, error) {
	body, err := test.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(test.ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	total := 0.0
	scanner := bufio.NewScanner(bytes.NewReader(body))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		matches := true
		for _, label := range labels {
			matches = matches && strings.Contains(line, label)
		}
		if !matches {
			continue
		}
		fields := strings.Fields(line)
		value, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		total += value
	}
	return total, scanner.Err()
}
