package main

// The optimistic concurrency Kubernetes controllers live by: 16 writers, each its own client-go
// client, change one ConfigMap 50 times each with retry.RetryOnConflict. No change may be lost
// (the count ends at 800 and each writer's own tally at 50), and on revkv the store's conflict
// metric for the ConfigMaps' prefix must have counted the compares the apiserver lost.

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const (
	raceWriters          = 16
	raceChangesPerWriter = 50
	raceConfigMap        = "counter"
	// revkv's prefix label of Kubernetes' ConfigMap keys, with --metrics-prefix-depth 2.
	configMapPrefixLabel = `prefix="/registry/configmaps"`
)

// raceBackoff retries far longer than client-go's DefaultRetry (5 tries): with 16 writers on one
// object, a writer can lose many times in a row, and a lost change is what the test looks for.
// The pause stays between 5 and 10 ms (no Factor growth and no Cap: wait.Backoff ends the steps
// once a Cap is reached).
var raceBackoff = wait.Backoff{Steps: 1000, Duration: 5 * time.Millisecond, Factor: 1, Jitter: 1}

func updateRace(test *testContext) error {
	configMaps := test.client.CoreV1().ConfigMaps(test.namespace)
	counter := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: raceConfigMap}, Data: map[string]string{"count": "0"}}
	if _, err := configMaps.Create(test.ctx, counter, metav1.CreateOptions{}); err != nil {
		return err
	}
	conflictsBefore, err := revkvConfigMapConflicts(test.options.revkvMetrics)
	if err != nil {
		return err
	}
	var clientConflicts atomic.Int64
	errs := make(chan error, raceWriters)
	var writers sync.WaitGroup
	for writer := 0; writer < raceWriters; writer++ {
		client, err := kubernetes.NewForConfig(restConfigFor(test.config, fmt.Sprintf("revkv-e2e-writer-%d", writer)))
		if err != nil {
			return err
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			errs <- raceWriter(test, client, writer, &clientConflicts)
		}()
	}
	writers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	final, err := configMaps.Get(test.ctx, raceConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	tallies := 0
	for writer := 0; writer < raceWriters; writer++ {
		if final.Data[writerKey(writer)] == strconv.Itoa(raceChangesPerWriter) {
			tallies++
		}
	}
	test.report("update race: %d writers x %d changes: count %s, writers with all %d changes kept %d, conflicts seen by the writers %t",
		raceWriters, raceChangesPerWriter, final.Data["count"], raceChangesPerWriter, tallies, clientConflicts.Load() > 0)
	if final.Data["count"] != strconv.Itoa(raceWriters*raceChangesPerWriter) || tallies != raceWriters {
		return fmt.Errorf("changes were lost: %v", final.Data)
	}
	return checkRevkvCountedConflicts(test, conflictsBefore, clientConflicts.Load())
}

func writerKey(writer int) string { return fmt.Sprintf("writer-%d", writer) }

func raceWriter(test *testContext, client kubernetes.Interface, writer int, conflicts *atomic.Int64) error {
	configMaps := client.CoreV1().ConfigMaps(test.namespace)
	for change := 1; change <= raceChangesPerWriter; change++ {
		attempt := 0
		err := retry.RetryOnConflict(raceBackoff, func() error {
			attempt++
			if attempt > 1 {
				conflicts.Add(1)
			}
			current, err := configMaps.Get(test.ctx, raceConfigMap, metav1.GetOptions{})
			if err != nil {
				return err
			}
			count, err := strconv.Atoi(current.Data["count"])
			if err != nil {
				return fmt.Errorf("the count is %q", current.Data["count"])
			}
			current.Data["count"] = strconv.Itoa(count + 1)
			current.Data[writerKey(writer)] = strconv.Itoa(change)
			_, err = configMaps.Update(test.ctx, current, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("writer %d, change %d: %w", writer, change, err)
		}
	}
	return nil
}

// checkRevkvCountedConflicts, on revkv only, requires its members' conflict counter for the
// ConfigMaps' prefix to have grown during the race. The apiserver checks a writer's
// resourceVersion against the object it read itself, so a conflict reaches the store only when two
// writers passed that check at once; with 16 writers that happens, but far less often than the
// writers' own conflicts, so the two counts are not compared.
func checkRevkvCountedConflicts(test *testContext, before float64, clientConflicts int64) error {
	if test.options.revkvMetrics == "" {
		return nil
	}
	after, err := revkvConfigMapConflicts(test.options.revkvMetrics)
	if err != nil {
		return err
	}
	if after <= before {
		return fmt.Errorf("revkv counted no conflict on %s during the race (%v before, %v after; the writers saw %d)",
			configMapPrefixLabel, before, after, clientConflicts)
	}
	fmt.Printf("# revkv counted %v conflicts on %s during the race; the writers retried %d times\n",
		after-before, configMapPrefixLabel, clientConflicts)
	return nil
}

// revkvConfigMapConflicts sums revkv_conflicts_total for the ConfigMaps' prefix over the members
// whose /metrics URLs are listed (comma-separated); 0 when none are.
func revkvConfigMapConflicts(urls string) (float64, error) {
	total := 0.0
	for _, url := range strings.Split(urls, ",") {
		if url == "" {
			continue
		}
		response, err := http.Get(url)
		if err != nil {
			return 0, fmt.Errorf("scraping %s: %w", url, err)
		}
		scanner := bufio.NewScanner(response.Body)
		for scanner.Scan() {
			line := scanner.Text()
			if !strings.HasPrefix(line, "revkv_conflicts_total{") || !strings.Contains(line, configMapPrefixLabel) {
				continue
			}
			fields := strings.Fields(line)
			value, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				_ = response.Body.Close()
				return 0, fmt.Errorf("%s: %q: %w", url, line, err)
			}
			total += value
		}
		_ = response.Body.Close()
		if err := scanner.Err(); err != nil {
			return 0, err
		}
	}
	return total, nil
}
