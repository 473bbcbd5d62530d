package main

// A CustomResourceDefinition served by the apiserver, and its objects created, listed, changed and
// deleted while a watch started at the first list's resourceVersion sees every change in order.

import (
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

const widgetCount = 5

var widgets = schema.GroupVersionResource{Group: "e2e.revkv.test", Version: "v1", Resource: "widgets"}

func customResources(test *testContext) error {
	if err := createWidgetDefinition(test); err != nil {
		return err
	}
	test.report("customresourcedefinition widgets.e2e.revkv.test established")
	resource := test.dynamic.Resource(widgets).Namespace(test.namespace)
	var list *unstructured.UnstructuredList
	// The apiserver serves a new resource a moment after it reports it established.
	err := test.waitFor("widgets served", func() (bool, error) {
		var err error
		list, err = resource.List(test.ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return err
	}
	watcher, err := resource.Watch(test.ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return err
	}
	defer watcher.Stop()
	for index := 0; index < widgetCount; index++ {
		if _, err := resource.Create(test.ctx, widget(index), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	list, err = resource.List(test.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	test.report("widgets listed: %s", widgetNames(list.Items))
	changed := list.Items[0].DeepCopy()
	if err := unstructured.SetNestedField(changed.Object, int64(100), "spec", "size"); err != nil {
		return err
	}
	if _, err := resource.Update(test.ctx, changed, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if err := resource.Delete(test.ctx, changed.GetName(), metav1.DeleteOptions{}); err != nil {
		return err
	}
	events, err := receiveEvents(watcher, widgetCount+2)
	if err != nil {
		return err
	}
	test.report("widgets watched: %s", strings.Join(events, " "))
	return nil
}

func createWidgetDefinition(test *testContext) error {
	definition := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.e2e.revkv.test"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer"},
						}},
					},
				}},
			}},
		},
	}
	definitions := test.extensions.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := definitions.Create(test.ctx, definition, metav1.CreateOptions{}); err != nil {
		return err
	}
	return test.waitFor("the widget definition established", func() (bool, error) {
		current, err := definitions.Get(test.ctx, definition.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, condition := range current.Status.Conditions {
			if condition.Type == apiextensionsv1.Established {
				return condition.Status == apiextensionsv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

func widget(index int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgets.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   map[string]any{"name": fmt.Sprintf("widget-%d", index)},
		"spec":       map[string]any{"size": int64(index)},
	}}
}

func widgetNames(items []unstructured.Unstructured) string {
	var names []string
	for _, item := range items {
		size, _, _ := unstructured.NestedInt64(item.Object, "spec", "size")
		names = append(names, fmt.Sprintf("%s(size %d)", item.GetName(), size))
	}
	return strings.Join(names, " ")
}

// receiveEvents takes the next count events of watcher as "TYPE:name", in the order they came.
func receiveEvents(watcher watch.Interface, count int) ([]string, error) {
	var events []string
	deadline := time.After(expectationDeadline)
	for len(events) < count {
		select {
		case event, open := <-watcher.ResultChan():
			if !open {
				return events, fmt.Errorf("the watch ended after %d of %d events: %v", len(events), count, events)
			}
			if event.Type == watch.Error {
				return events, fmt.Errorf("the watch answered an error: %v", apierrors.FromObject(event.Object))
			}
			if event.Type == watch.Bookmark {
				continue
			}
			item, ok := event.Object.(*unstructured.Unstructured)
			if !ok {
				return events, fmt.Errorf("the watch sent a %T", event.Object)
			}
			events = append(events, fmt.Sprintf("%s:%s", event.Type, item.GetName()))
		case <-deadline:
			return events, fmt.Errorf("%d of %d events within %s: %v", len(events), count, expectationDeadline, events)
		}
	}
	return events, nil
}
