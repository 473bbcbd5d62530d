package main

// Watches as informers use them: a watch-list (initial events, then the bookmark that ends them),
// a watch resumed from the last resourceVersion it saw missing nothing written while it was
// away, a plain watch's bookmarks (bookmarks.go), and a watch from a compacted resourceVersion
// answered 410 Gone. The last uses PodTemplates, whose watch cache the script turns off
// (--watch-cache-sizes=podtemplates#0), so that the watch reaches the store and the store's
// compaction answers it, not the cache's window.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const resumedConfigMaps = 5

func watches(test *testContext) error {
	if err := watchList(test); err != nil {
		return err
	}
	if err := resumedWatch(test); err != nil {
		return err
	}
	if err := periodicBookmarks(test); err != nil {
		return err
	}
	return compactedWatch(test)
}

// watchList asks for the namespace's ConfigMaps as client-go's informers do by default: initial
// events, then a bookmark annotated as their end.
func watchList(test *testContext) error {
	sendInitialEvents := true
	watcher, err := test.client.CoreV1().ConfigMaps(test.namespace).Watch(test.ctx, metav1.ListOptions{
		SendInitialEvents:    &sendInitialEvents,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return err
	}
	defer watcher.Stop()
	var initial []string
	deadline := time.After(expectationDeadline)
	for {
		select {
		case event, open := <-watcher.ResultChan():
			if !open {
				return fmt.Errorf("the watch-list ended after %v", initial)
			}
			switch event.Type {
			case watch.Added:
				initial = append(initial, event.Object.(*corev1.ConfigMap).Name)
			case watch.Bookmark:
				annotations := event.Object.(*corev1.ConfigMap).Annotations
				if annotations[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
				sort.Strings(initial)
				test.report("watch-list of configmaps: initial events [%s], then the initial-events-end bookmark",
					strings.Join(initial, " "))
				return nil
			default:
				return fmt.Errorf("the watch-list sent %s %v before its initial-events-end bookmark", event.Type, event.Object)
			}
		case <-deadline:
			return fmt.Errorf("no initial-events-end bookmark within %s (initial events %v)", expectationDeadline, initial)
		}
	}
}

// resumedWatch stops a watch, writes while none runs, and resumes from the last resourceVersion the
// first watch saw: the resumed one must deliver exactly what was written in between.
func resumedWatch(test *testContext) error {
	configMaps := test.client.CoreV1().ConfigMaps(test.namespace)
	list, err := configMaps.List(test.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	first, err := configMaps.Watch(test.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	if _, err := configMaps.Create(test.ctx, namedConfigMap("resume-before"), metav1.CreateOptions{}); err != nil {
		first.Stop()
		return err
	}
	seen, lastResourceVersion, err := receiveConfigMapEvents(first, 1)
	first.Stop()
	if err != nil {
		return err
	}
	for index := 0; index < resumedConfigMaps; index++ {
		if _, err := configMaps.Create(test.ctx, namedConfigMap(fmt.Sprintf("resume-%d", index)), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	resumed, err := configMaps.Watch(test.ctx, metav1.ListOptions{ResourceVersion: lastResourceVersion})
	if err != nil {
		return err
	}
	defer resumed.Stop()
	missed, _, err := receiveConfigMapEvents(resumed, resumedConfigMaps)
	if err != nil {
		return err
	}
	test.report("watch before the pause: %s; resumed from its last resourceVersion: %s",
		strings.Join(seen, " "), strings.Join(missed, " "))
	return nil
}

func namedConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"name": name}}
}

// receiveConfigMapEvents takes watcher's next count events (bookmarks aside) as "TYPE:name" and
// the resourceVersion of the last.
func receiveConfigMapEvents(watcher watch.Interface, count int) ([]string, string, error) {
	var events []string
	lastResourceVersion := ""
	deadline := time.After(expectationDeadline)
	for len(events) < count {
		select {
		case event, open := <-watcher.ResultChan():
			if !open {
				return events, "", fmt.Errorf("the watch ended after %v of %d events", events, count)
			}
			if event.Type == watch.Error {
				return events, "", fmt.Errorf("the watch answered an error: %v", apierrors.FromObject(event.Object))
			}
			configMap, ok := event.Object.(*corev1.ConfigMap)
			if !ok {
				return events, "", fmt.Errorf("the watch sent a %T", event.Object)
			}
			lastResourceVersion = configMap.ResourceVersion
			if event.Type != watch.Bookmark {
				events = append(events, fmt.Sprintf("%s:%s", event.Type, configMap.Name))
			}
		case <-deadline:
			return events, "", fmt.Errorf("%v of %d events within %s", events, count, expectationDeadline)
		}
	}
	return events, lastResourceVersion, nil
}

// compactedWatch writes a PodTemplate, waits until the apiserver's compactor has compacted the
// store past that write, and then watches from the write's resourceVersion.
func compactedWatch(test *testContext) error {
	templates := test.client.CoreV1().PodTemplates(test.namespace)
	template := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "compacted"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "nginx:1.29"}},
		}},
	}
	created, err := templates.Create(test.ctx, template, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// A list at exactly that resourceVersion reaches the store (no cache for PodTemplates) and is
	// answered 410 Gone once the compactor passed it. Writes go on meanwhile, as the compactor
	// compacts only up to a revision it saw one interval earlier.
	var gone error
	change := 0
	err = test.waitFor("the store compacted past the PodTemplate's write", func() (bool, error) {
		change++
		template := created.DeepCopy()
		template.ResourceVersion = ""
		template.Labels = map[string]string{"change": fmt.Sprint(change)}
		if _, err := templates.Update(test.ctx, template, metav1.UpdateOptions{}); err != nil {
			return false, err
		}
		_, err := templates.List(test.ctx, metav1.ListOptions{
			ResourceVersion: created.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			gone = err
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return err
	}
	test.report("list at a compacted resourceVersion: %s", describeStatus(gone))
	watcher, err := templates.Watch(test.ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		test.report("watch from a compacted resourceVersion: refused: %s", describeStatus(err))
		return nil
	}
	defer watcher.Stop()
	select {
	case event, open := <-watcher.ResultChan():
		if !open || event.Type != watch.Error {
			return fmt.Errorf("a watch from a compacted resourceVersion sent %v %v instead of an error", event.Type, event.Object)
		}
		test.report("watch from a compacted resourceVersion: error event: %s", describeStatus(apierrors.FromObject(event.Object)))
	case <-time.After(expectationDeadline):
		return fmt.Errorf("a watch from a compacted resourceVersion sent nothing within %s", expectationDeadline)
	}
	return nil
}

// describeStatus is an API error's code and reason, without its message, which names revisions.
func describeStatus(err error) string {
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		return err.Error()
	}
	return fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)
}
