package main

// The watcher of one namespace's ConfigMaps: it counts the events of each type and, for creates
// and updates, how long each change took from the writer's request to the watcher's event.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// eventDeadline bounds how long the watcher may lag behind the writes of a phase.
const eventDeadline = 3 * time.Minute

type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mutex     sync.Mutex
	counts    map[watch.EventType]int
	latencies []time.Duration
	first     time.Time
	last      time.Time
	failure   error
}

// startWatcher watches the namespace's ConfigMaps from the revision of a list made now, so that
// no write after it is missed, and resumes from the last event when the apiserver ends the watch.
func startWatcher(ctx context.Context, client kubernetes.Interface, namespace string) (*watcher, error) {
	configMaps := client.CoreV1().ConfigMaps(namespace)
	list, err := configMaps.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("listing before the watch: %w", err)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{}), counts: map[watch.EventType]int{}}
	resourceVersion := list.ResourceVersion
	stream, err := configMaps.Watch(watchCtx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching: %w", err)
	}
	go func() {
		defer close(w.done)
		for {
			resourceVersion = w.consume(stream, resourceVersion)
			if watchCtx.Err() != nil || w.failed() {
				return
			}
			stream, err = configMaps.Watch(watchCtx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
			if err != nil {
				w.fail(fmt.Errorf("resuming the watch at %s: %w", resourceVersion, err))
				return
			}
		}
	}()
	return w, nil
}

// consume reads one watch stream to its end and returns the last resourceVersion it saw.
func (w *watcher) consume(stream watch.Interface, resourceVersion string) string {
	defer stream.Stop()
	for event := range stream.ResultChan() {
		received := time.Now()
		switch event.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			object, ok := event.Object.(*corev1.ConfigMap)
			if !ok {
				w.fail(fmt.Errorf("a %s event of a %T", event.Type, event.Object))
				return resourceVersion
			}
			resourceVersion = object.ResourceVersion
			w.record(event.Type, object, received)
		case watch.Bookmark:
			if object, ok := event.Object.(*corev1.ConfigMap); ok {
				resourceVersion = object.ResourceVersion
			}
		case watch.Error:
			w.fail(fmt.Errorf("the watch ended with an error: %v", event.Object))
			return resourceVersion
		}
	}
	return resourceVersion
}

func (w *watcher) record(eventType watch.EventType, object *corev1.ConfigMap, received time.Time) {
	w.mutex.Lock()
	defer w.mutex.Unlock()
	w.counts[eventType]++
	if w.first.IsZero() {
		w.first = received
	}
	w.last = received
	// A delete's event carries the object as the update left it; only creates and updates are
	// timed.
	if eventType == watch.Deleted {
		return
	}
	nanos, err := strconv.ParseInt(object.Annotations[writtenAtAnnotation], 10, 64)
	if err != nil {
		w.failure = fmt.Errorf("object %s has no %s annotation", object.Name, writtenAtAnnotation)
		return
	}
	w.latencies = append(w.latencies, received.Sub(time.Unix(0, nanos)))
}

func (w *watcher) fail(err error) {
	w.mutex.Lock()
	defer w.mutex.Unlock()
	if w.failure == nil {
		w.failure = err
	}
}

func (w *watcher) failed() bool {
	w.mutex.Lock()
	defer w.mutex.Unlock()
	return w.failure != nil
}

// waitFor polls until the watcher has seen count events of eventType, within eventDeadline.
func (w *watcher) waitFor(ctx context.Context, eventType watch.EventType, count int) error {
	deadline := time.Now().Add(eventDeadline)
	for {
		w.mutex.Lock()
		seen, failure := w.counts[eventType], w.failure
		w.mutex.Unlock()
		switch {
		case failure != nil:
			return failure
		case seen > count:
			return fmt.Errorf("%d %s events for %d writes", seen, eventType, count)
		case seen == count:
			return nil
		case time.Now().After(deadline) || ctx.Err() != nil:
			return fmt.Errorf("%d of %d %s events within %s", seen, count, eventType, eventDeadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// row is the watch's line: its events, their rate while they arrived, and the latency of the
// creates' and updates' events.
func (w *watcher) row() row {
	w.mutex.Lock()
	defer w.mutex.Unlock()
	events := 0
	for _, count := range w.counts {
		events += count
	}
	span := w.last.Sub(w.first).Seconds()
	result := row{Requests: events, Seconds: span}
	if span > 0 {
		result.PerSecond = float64(events) / span
	}
	result.P50Millis, result.P99Millis = percentileMillis(w.latencies, 0.50), percentileMillis(w.latencies, 0.99)
	return result
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

// percentileMillis is the q-th quantile (nearest rank) of the latencies, in milliseconds.
func percentileMillis(latencies []time.Duration, q float64) float64 {
	if len(latencies) == 0 {
		return 0
	}
	sorted := slices.Clone(latencies)
	slices.Sort(sorted)
	rank := int(q*float64(len(sorted))+0.999999) - 1
	return float64(sorted[min(max(rank, 0), len(sorted)-1)]) / float64(time.Millisecond)
}
