package main

// The store's leader killed (kill -9, by the command --kill-leader names) while writers and
// informers run through the apiserver: every write the apiserver acknowledged is still there
// afterwards, and every informer converges to what a fresh list returns.

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	failoverWriters = 4
	// Each writer goes on until the apiserver has acknowledged this many of its creates; the kill
	// comes when every writer has a third of them.
	failoverWritesPerWriter = 30
	failoverInformers       = 2
	failoverLabel           = "e2e-failover"
)

func failover(test *testContext) error {
	informerStores, stopInformers, err := startFailoverInformers(test)
	if err != nil {
		return err
	}
	defer stopInformers()
	var acknowledged sync.Map
	var progress sync.WaitGroup
	progress.Add(failoverWriters)
	errs := make(chan error, failoverWriters)
	for writer := 0; writer < failoverWriters; writer++ {
		client, err := kubernetes.NewForConfig(restConfigFor(test.config, fmt.Sprintf("revkv-e2e-failover-%d", writer)))
		if err != nil {
			return err
		}
		go func() {
			// Once a third is written, or when the writer gives up, whichever comes first.
			var once sync.Once
			reached := func() { once.Do(progress.Done) }
			defer reached()
			errs <- failoverWriter(test, client, writer, &acknowledged, reached)
		}()
	}
	progress.Wait()
	output, err := exec.CommandContext(test.ctx, "sh", "-c", test.options.killLeader).CombinedOutput()
	if err != nil {
		return fmt.Errorf("killing the store's leader (%s): %v: %s", test.options.killLeader, err, output)
	}
	for writer := 0; writer < failoverWriters; writer++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	names, err := failoverConfigMapNames(test)
	if err != nil {
		return err
	}
	missing := 0
	acknowledged.Range(func(name, _ any) bool {
		if !names[name.(string)] {
			missing++
		}
		return true
	})
	if missing > 0 {
		return fmt.Errorf("%d acknowledged writes are missing after the leader's kill", missing)
	}
	test.report("store leader killed during %d writers' %d acknowledged creates: every one of them listed afterwards",
		failoverWriters, failoverWriters*failoverWritesPerWriter)
	for index, store := range informerStores {
		err := test.waitFor(fmt.Sprintf("informer %d converged to a fresh list", index), func() (bool, error) {
			fresh, err := failoverConfigMapNames(test)
			if err != nil {
				return false, err
			}
			return sameNames(fresh, informerNames(store)), nil
		})
		if err != nil {
			return err
		}
	}
	test.report("%d informers converged to a fresh list", failoverInformers)
	// Creates the apiserver answered with an error may have happened all the same.
	fmt.Printf("# %d failover configmaps listed, %d of them acknowledged\n", len(names), failoverWriters*failoverWritesPerWriter)
	return nil
}

// failoverWriter creates ConfigMaps until the apiserver acknowledged failoverWritesPerWriter of
// them, retrying a create the apiserver answered with an error under a new name (an error says
// nothing about whether the write happened, so only acknowledged names are counted).
func failoverWriter(test *testContext, client kubernetes.Interface, writer int, acknowledged *sync.Map, reachedThird func()) error {
	configMaps := client.CoreV1().ConfigMaps(test.namespace)
	deadline := time.Now().Add(expectationDeadline)
	attempt := 0
	for count := 0; count < failoverWritesPerWriter; {
		if time.Now().After(deadline) {
			return fmt.Errorf("writer %d: %d of %d creates acknowledged within %s", writer, count, failoverWritesPerWriter, expectationDeadline)
		}
		attempt++
		name := fmt.Sprintf("failover-%d-%d", writer, attempt)
		configMap := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{failoverLabel: "true"}},
			Data:       map[string]string{"writer": fmt.Sprint(writer)},
		}
		if _, err := configMaps.Create(test.ctx, configMap, metav1.CreateOptions{}); err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		acknowledged.Store(name, true)
		count++
		if count == failoverWritesPerWriter/3 {
			reachedThird()
		}
	}
	return nil
}

func startFailoverInformers(test *testContext) ([]cache.Store, func(), error) {
	var stores []cache.Store
	var factories []informers.SharedInformerFactory
	stop := make(chan struct{})
	for index := 0; index < failoverInformers; index++ {
		client, err := kubernetes.NewForConfig(restConfigFor(test.config, fmt.Sprintf("revkv-e2e-informer-%d", index)))
		if err != nil {
			return nil, nil, err
		}
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(test.namespace),
			informers.WithTweakListOptions(func(options *metav1.ListOptions) { options.LabelSelector = failoverLabel }))
		informer := factory.Core().V1().ConfigMaps().Informer()
		factory.Start(stop)
		if !cache.WaitForCacheSync(test.ctx.Done(), informer.HasSynced) {
			close(stop)
			return nil, nil, fmt.Errorf("informer %d did not sync", index)
		}
		stores = append(stores, informer.GetStore())
		factories = append(factories, factory)
	}
	return stores, func() {
		close(stop)
		for _, factory := range factories {
			factory.Shutdown()
		}
	}, nil
}

// failoverConfigMapNames lists the failover ConfigMaps afresh.
func failoverConfigMapNames(test *testContext) (map[string]bool, error) {
	list, err := test.client.CoreV1().ConfigMaps(test.namespace).List(test.ctx,
		metav1.ListOptions{LabelSelector: labels.Set{failoverLabel: "true"}.String()})
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, item := range list.Items {
		names[item.Name] = true
	}
	return names, nil
}

func informerNames(store cache.Store) map[string]bool {
	names := map[string]bool{}
	for _, object := range store.List() {
		names[object.(*corev1.ConfigMap).Name] = true
	}
	return names
}

func sameNames(left, right map[string]bool) bool {
	return strings.Join(sortedNames(left), ",") == strings.Join(sortedNames(right), ",")
}

func sortedNames(names map[string]bool) []string {
	var sorted []string
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	return sorted
}
