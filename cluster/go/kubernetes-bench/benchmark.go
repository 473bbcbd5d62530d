package main

// One client count's rows: create, update, list (whole and paged) and delete the ConfigMaps of a
// namespace of its own, with a watcher on that namespace the whole time.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// writtenAtAnnotation carries the wall-clock time (Unix nanoseconds) at which the writer sent the
// request, so that the watcher, in the same process and on the same clock, can tell how long the
// change took to reach it.
const writtenAtAnnotation = "bench.revkv.dev/written-at-unix-nanos"

// row is one line of the report.
type row struct {
	Store      string  `json:"store"`
	Operation  string  `json:"operation"`
	Clients    int     `json:"clients"`
	Requests   int     `json:"requests"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"per_second"`
	P50Millis  float64 `json:"p50_ms"`
	P99Millis  float64 `json:"p99_ms"`
	StoreRSSMi float64 `json:"store_rss_mib"`
	// The CPU time of all the store's members, and of the apiserver, per request of the row;
	// absent from the watch row, whose events come from the writes of other rows.
	StoreCPUMicrosPerRequest     *float64 `json:"store_cpu_us_per_request,omitempty"`
	ApiserverCPUMicrosPerRequest *float64 `json:"apiserver_cpu_us_per_request,omitempty"`
}

// benchmark is the state of one client count's run.
type benchmark struct {
	ctx       context.Context
	client    kubernetes.Interface
	options   options
	clients   int
	meter     processMeter
	namespace string
	// objects[i] is object i as the last write returned it, for the next update's resourceVersion.
	objects []*corev1.ConfigMap
}

func (bench *benchmark) run() ([]row, error) {
	bench.namespace = fmt.Sprintf("%s-%d", bench.options.namespaceStem, bench.clients)
	bench.objects = make([]*corev1.ConfigMap, bench.options.objects)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bench.namespace}}
	if _, err := bench.client.CoreV1().Namespaces().Create(bench.ctx, namespace, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", bench.namespace, err)
	}
	watcher, err := startWatcher(bench.ctx, bench.client, bench.namespace)
	if err != nil {
		return nil, err
	}
	defer watcher.stop()
	var rows []row
	phases := []struct {
		operation string
		run       func() (row, error)
		// The watch events the phase must have produced before the next one starts.
		expectedEvents func() error
	}{
		{"create", bench.create, func() error { return watcher.waitFor(bench.ctx, "ADDED", bench.options.objects) }},
		{"update", bench.update, func() error { return watcher.waitFor(bench.ctx, "MODIFIED", bench.options.objects) }},
		{"list-whole", bench.listWhole, nil},
		{"list-paged", bench.listPaged, nil},
		{"delete", bench.delete, func() error { return watcher.waitFor(bench.ctx, "DELETED", bench.options.objects) }},
	}
	for _, phase := range phases {
		result, err := phase.run()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", phase.operation, err)
		}
		result.Operation, result.Clients = phase.operation, bench.clients
		rows = append(rows, result)
		if phase.expectedEvents != nil {
			if err := phase.expectedEvents(); err != nil {
				return nil, fmt.Errorf("the watcher after %s: %w", phase.operation, err)
			}
		}
	}
	watchRow := watcher.row()
	watchRow.Operation, watchRow.Clients = "watch", bench.clients
	if watchRow.StoreRSSMi, err = bench.meter.largestStoreRSSMiB(); err != nil {
		return nil, err
	}
	return append(rows, watchRow), nil
}

// value is the data of object index at its write number generation, valueBytes long.
func (bench *benchmark) value(index, generation int) map[string]string {
	stem := fmt.Sprintf("object %d, write %d: ", index, generation)
	size := max(bench.options.valueBytes, len(stem))
	return map[string]string{"value": stem + strings.Repeat("x", size-len(stem))}
}

func stampWrittenAt(meta *metav1.ObjectMeta) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[writtenAtAnnotation] = strconv.FormatInt(time.Now().UnixNano(), 10)
}

func (bench *benchmark) create() (row, error) {
	configMaps := bench.client.CoreV1().ConfigMaps(bench.namespace)
	return bench.measure(bench.options.objects, func(index int, record recorder) error {
		object := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("object-%05d", index)},
			Data:       bench.value(index, 0),
		}
		stampWrittenAt(&object.ObjectMeta)
		started := time.Now()
		created, err := configMaps.Create(bench.ctx, object, metav1.CreateOptions{})
		record(started)
		bench.objects[index] = created
		return err
	})
}

// update writes each object once more, with the resourceVersion its create returned: an
// optimistic update as a controller makes it, which no other writer races.
func (bench *benchmark) update() (row, error) {
	configMaps := bench.client.CoreV1().ConfigMaps(bench.namespace)
	return bench.measure(bench.options.objects, func(index int, record recorder) error {
		object := bench.objects[index].DeepCopy()
		object.Data = bench.value(index, 1)
		stampWrittenAt(&object.ObjectMeta)
		started := time.Now()
		updated, err := configMaps.Update(bench.ctx, object, metav1.UpdateOptions{})
		record(started)
		bench.objects[index] = updated
		return err
	})
}

func (bench *benchmark) listWhole() (row, error) {
	configMaps := bench.client.CoreV1().ConfigMaps(bench.namespace)
	return bench.measure(bench.options.wholeLists, func(_ int, record recorder) error {
		started := time.Now()
		list, err := configMaps.List(bench.ctx, metav1.ListOptions{})
		record(started)
		if err != nil {
			return err
		}
		return bench.expectListed(len(list.Items))
	})
}

// listPaged lists every object a page at a time, following the continue token; each page is a
// request of its own in the row.
func (bench *benchmark) listPaged() (row, error) {
	configMaps := bench.client.CoreV1().ConfigMaps(bench.namespace)
	return bench.measure(bench.options.pagedLists, func(_ int, record recorder) error {
		listed, continueToken := 0, ""
		for {
			started := time.Now()
			page, err := configMaps.List(bench.ctx, metav1.ListOptions{Limit: bench.options.pageSize, Continue: continueToken})
			record(started)
			if err != nil {
				return err
			}
			listed += len(page.Items)
			if continueToken = page.Continue; continueToken == "" {
				return bench.expectListed(listed)
			}
		}
	})
}

func (bench *benchmark) delete() (row, error) {
	configMaps := bench.client.CoreV1().ConfigMaps(bench.namespace)
	return bench.measure(bench.options.objects, func(index int, record recorder) error {
		started := time.Now()
		err := configMaps.Delete(bench.ctx, fmt.Sprintf("object-%05d", index), metav1.DeleteOptions{})
		record(started)
		return err
	})
}

func (bench *benchmark) expectListed(listed int) error {
	if listed != bench.options.objects {
		return fmt.Errorf("a list returned %d objects, not %d", listed, bench.options.objects)
	}
	return nil
}

// recorder takes the start of a request that has just ended and records its latency.
type recorder func(started time.Time)

// measure runs tasks 0..tasks-1 on the benchmark's clients (each a goroutine taking the next task)
// and makes the row: requests recorded, their throughput over the phase's wall-clock time, their
// latency, and the CPU the store and the apiserver spent over the phase per request.
func (bench *benchmark) measure(tasks int, task func(index int, record recorder) error) (row, error) {
	next := make(chan int, tasks)
	for index := range tasks {
		next <- index
	}
	close(next)
	latencies := make([][]time.Duration, bench.clients)
	errors := make([]error, bench.clients)
	before, err := bench.meter.sample()
	if err != nil {
		return row{}, err
	}
	started := time.Now()
	var workers sync.WaitGroup
	for worker := range bench.clients {
		workers.Add(1)
		go func() {
			defer workers.Done()
			record := func(requestStarted time.Time) {
				latencies[worker] = append(latencies[worker], time.Since(requestStarted))
			}
			for index := range next {
				if errors[worker] = task(index, record); errors[worker] != nil {
					return
				}
			}
		}()
	}
	workers.Wait()
	elapsed := time.Since(started)
	after, err := bench.meter.sample()
	if err != nil {
		return row{}, err
	}
	for _, err := range errors {
		if err != nil {
			return row{}, err
		}
	}
	var all []time.Duration
	for _, worker := range latencies {
		all = append(all, worker...)
	}
	result := row{Requests: len(all), Seconds: elapsed.Seconds()}
	result.PerSecond = float64(len(all)) / elapsed.Seconds()
	result.P50Millis, result.P99Millis = percentileMillis(all, 0.50), percentileMillis(all, 0.99)
	result.StoreCPUMicrosPerRequest = microsPerRequest(after.store-before.store, len(all))
	result.ApiserverCPUMicrosPerRequest = microsPerRequest(after.apiserver-before.apiserver, len(all))
	if result.StoreRSSMi, err = bench.meter.largestStoreRSSMiB(); err != nil {
		return row{}, err
	}
	return result, nil
}

func microsPerRequest(ticks uint64, requests int) *float64 {
	micros := float64(ticks) * 1e6 / clockTicksPerSecond / float64(max(requests, 1))
	return &micros
}
