package main

// Nodes made by hand, and the part of the kubelet the control plane waits for: a Pod bound to one
// of them is reported running and ready, and a Pod being deleted is finished off (the kubelet
// confirms a graceful deletion with a deletion of grace period 0 once its containers stopped).
// The controller manager runs without its node-lifecycle controller, so nothing marks these
// Nodes unreachable for the heartbeats they never send.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const nodeCount = 3

// How often the kubelet's part retries one Pod before it gives up on it.
const maxKubeletRetries = 20

func nodeName(index int) string { return fmt.Sprintf("e2e-node-%d", index) }

func startNodesAndKubelet(test *testContext) error {
	for index := 1; index <= nodeCount; index++ {
		if err := createReadyNode(test, nodeName(index)); err != nil {
			return err
		}
	}
	test.report("%d nodes made by hand, ready", nodeCount)
	factory := informers.NewSharedInformerFactoryWithOptions(test.client, 0,
		informers.WithNamespace(test.namespace))
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(object any) {
		if key, err := cache.MetaNamespaceKeyFunc(object); err == nil {
			queue.Add(key)
		}
	}
	_, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, object any) { enqueue(object) },
	})
	if err != nil {
		return err
	}
	factory.Start(test.ctx.Done())
	if !cache.WaitForCacheSync(test.ctx.Done(), pods.Informer().HasSynced) {
		return fmt.Errorf("the kubelet's pod informer did not sync")
	}
	test.background.Add(2)
	go func() {
		defer test.background.Done()
		<-test.ctx.Done()
		queue.ShutDown()
		factory.Shutdown()
	}()
	go func() {
		defer test.background.Done()
		for {
			key, shutdown := queue.Get()
			if shutdown {
				return
			}
			err := actAsKubelet(test, pods.Lister().Pods(test.namespace), key)
			// A Pod the kubelet's part keeps failing on is given up after a bound; the step
			// waiting for it then fails with its own deadline.
			if err != nil && queue.NumRequeues(key) < maxKubeletRetries {
				queue.AddRateLimited(key)
			} else {
				queue.Forget(key)
			}
			queue.Done(key)
		}
	}()
	return nil
}

func createReadyNode(test *testContext, name string) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "MadeByHand", Message: "no kubelet runs here; the e2e test plays its part",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	if _, err := test.client.CoreV1().Nodes().Create(test.ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return nil
}

// actAsKubelet brings the Pod named key to where a kubelet would: running and ready once bound,
// gone once its deletion began.
func actAsKubelet(test *testContext, lister corelisters.PodNamespaceLister, key string) error {
	_, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pods := test.client.CoreV1().Pods(test.namespace)
	switch {
	case pod.DeletionTimestamp != nil:
		err = pods.Delete(test.ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pod.Spec.NodeName != "" && !podReady(pod):
		running := pod.DeepCopy()
		now := metav1.Now()
		running.Status.Phase = corev1.PodRunning
		running.Status.StartTime = &now
		running.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		_, err = pods.UpdateStatus(test.ctx, running, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}
