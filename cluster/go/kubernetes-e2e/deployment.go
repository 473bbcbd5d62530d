package main

// A Deployment's life as the controllers see it: created with 3 replicas, scaled to 20 and back,
// rolled out to a new image, deleted with its ReplicaSets and Pods (foreground cascading).

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

const deploymentName = "web"

func deploymentLifecycle(test *testContext) error {
	deployments := test.client.AppsV1().Deployments(test.namespace)
	if _, err := deployments.Create(test.ctx, webDeployment(3, "nginx:1.29"), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := waitUntilRolledOut(test, 3); err != nil {
		return err
	}
	if err := reportDeployment(test, "created"); err != nil {
		return err
	}
	for _, replicas := range []int32{20, 3} {
		if err := scaleDeployment(test, replicas); err != nil {
			return err
		}
		if err := waitUntilRolledOut(test, replicas); err != nil {
			return err
		}
		if err := reportDeployment(test, fmt.Sprintf("scaled to %d", replicas)); err != nil {
			return err
		}
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deployment, err := deployments.Get(test.ctx, deploymentName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		deployment.Spec.Template.Spec.Containers[0].Image = "nginx:1.30"
		_, err = deployments.Update(test.ctx, deployment, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("changing the image: %w", err)
	}
	if err := waitUntilRolledOut(test, 3); err != nil {
		return err
	}
	if err := reportDeployment(test, "rolled out"); err != nil {
		return err
	}
	return deleteDeployment(test)
}

func webDeployment(replicas int32, image string) *appsv1.Deployment {
	labels := map[string]string{"app": deploymentName}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: deploymentName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		},
	}
}

func scaleDeployment(test *testContext, replicas int32) error {
	deployments := test.client.AppsV1().Deployments(test.namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := deployments.GetScale(test.ctx, deploymentName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		_, err = deployments.UpdateScale(test.ctx, deploymentName, scale, metav1.UpdateOptions{})
		return err
	})
}

// waitUntilRolledOut waits for what `kubectl rollout status` waits for, and then for the Pods
// themselves: exactly `replicas` of them, none terminating, every one bound.
func waitUntilRolledOut(test *testContext, replicas int32) error {
	what := fmt.Sprintf("deployment %s rolled out with %d replicas", deploymentName, replicas)
	return test.waitFor(what, func() (bool, error) {
		deployment, err := test.client.AppsV1().Deployments(test.namespace).Get(test.ctx, deploymentName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status := deployment.Status
		if deployment.Generation > status.ObservedGeneration || status.UpdatedReplicas != replicas ||
			status.Replicas != replicas || status.AvailableReplicas != replicas {
			return false, nil
		}
		pods, err := webPods(test)
		if err != nil {
			return false, err
		}
		return len(pods) == int(replicas), nil
	})
}

// webPods are the Deployment's Pods, all of them, terminating ones too.
func webPods(test *testContext) ([]corev1.Pod, error) {
	list, err := test.client.CoreV1().Pods(test.namespace).List(test.ctx,
		metav1.ListOptions{LabelSelector: "app=" + deploymentName})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// reportDeployment reports the ReplicaSets (by image, with their replicas) and the Pods (by image,
// phase and whether they are bound to one of the test's nodes).
func reportDeployment(test *testContext, when string) error {
	sets, err := test.client.AppsV1().ReplicaSets(test.namespace).List(test.ctx,
		metav1.ListOptions{LabelSelector: "app=" + deploymentName})
	if err != nil {
		return err
	}
	var setLines []string
	for _, set := range sets.Items {
		setLines = append(setLines, fmt.Sprintf("%s=%d", set.Spec.Template.Spec.Containers[0].Image, *set.Spec.Replicas))
	}
	sort.Strings(setLines)
	pods, err := webPods(test)
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for _, pod := range pods {
		bound := strings.HasPrefix(pod.Spec.NodeName, "e2e-node-")
		counts[fmt.Sprintf("%s %s bound=%t", pod.Spec.Containers[0].Image, pod.Status.Phase, bound)]++
	}
	var podLines []string
	for line, count := range counts {
		podLines = append(podLines, fmt.Sprintf("%d×(%s)", count, line))
	}
	sort.Strings(podLines)
	test.report("deployment %s: replicasets [%s], pods [%s]", when, strings.Join(setLines, " "),
		strings.Join(podLines, " "))
	return nil
}

// deleteDeployment deletes the Deployment in the foreground, so the garbage collector removes its
// ReplicaSets and Pods before the Deployment itself goes.
func deleteDeployment(test *testContext) error {
	foreground := metav1.DeletePropagationForeground
	err := test.client.AppsV1().Deployments(test.namespace).Delete(test.ctx, deploymentName,
		metav1.DeleteOptions{PropagationPolicy: &foreground})
	if err != nil {
		return err
	}
	err = test.waitFor("the deployment, its replicasets and pods gone", func() (bool, error) {
		_, err := test.client.AppsV1().Deployments(test.namespace).Get(test.ctx, deploymentName, metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		sets, err := test.client.AppsV1().ReplicaSets(test.namespace).List(test.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, err := webPods(test)
		return err == nil && len(sets.Items) == 0 && len(pods) == 0, err
	})
	if err != nil {
		return err
	}
	test.report("deployment deleted in the foreground: no replicaset, no pod left")
	return nil
}
