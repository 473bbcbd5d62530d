package main

// The state every step shares: the clients, the namespace, the report, and the one way to wait.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type testContext struct {
	ctx        context.Context
	config     *rest.Config
	options    options
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	extensions apiextensionsclient.Interface
	namespace  string
	// stops what the steps started in the background (the kubelet's part).
	cancelBackground context.CancelFunc
	background       sync.WaitGroup
}

func newTestContext(ctx context.Context, config *rest.Config, opts options) (*testContext, error) {
	client, err := kubernetes.NewForConfig(restConfigFor(config, "revkv-e2e"))
	if err != nil {
		return nil, err
	}
	dynamicClient, err := dynamic.NewForConfig(restConfigFor(config, "revkv-e2e"))
	if err != nil {
		return nil, err
	}
	extensions, err := apiextensionsclient.NewForConfig(restConfigFor(config, "revkv-e2e"))
	if err != nil {
		return nil, err
	}
	backgroundCtx, cancelBackground := context.WithCancel(ctx)
	test := &testContext{
		ctx: backgroundCtx, config: config, options: opts, client: client,
		dynamic: dynamicClient, extensions: extensions, namespace: opts.namespace,
		cancelBackground: cancelBackground,
	}
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, namespace, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", opts.namespace, err)
	}
	// Pods need the namespace's default service account, which the controller manager makes.
	err = test.waitFor("the service account default/"+opts.namespace, func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(opts.namespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	return test, nil
}

func (test *testContext) stop() {
	test.cancelBackground()
	test.background.Wait()
}

// report prints one line of what Kubernetes reported: the lines the two stores must agree on.
func (test *testContext) report(format string, arguments ...any) {
	fmt.Println(strings.TrimSpace(fmt.Sprintf(format, arguments...)))
}

// waitFor polls condition until it holds, fails, or the expectation's deadline passes. Errors the
// apiserver may answer while it is busy (timeouts, throttling, a store election) are retried.
func (test *testContext) waitFor(what string, condition func() (bool, error)) error {
	deadline := time.Now().Add(expectationDeadline)
	var lastError error
	for {
		done, err := condition()
		switch {
		case err == nil && done:
			return nil
		case err != nil && !retriable(err):
			return fmt.Errorf("waiting for %s: %w", what, err)
		case err != nil:
			lastError = err
		}
		if time.Now().After(deadline) {
			if lastError != nil {
				return fmt.Errorf("%s: not within %s (last error: %v)", what, expectationDeadline, lastError)
			}
			return fmt.Errorf("%s: not within %s", what, expectationDeadline)
		}
		select {
		case <-test.ctx.Done():
			return test.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retriable says whether an error means "ask again" rather than "this went wrong".
func retriable(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsInternalError(err) && strings.Contains(err.Error(), "etcdserver")
}
