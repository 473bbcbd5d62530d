package main

// Bookmarks of a plain watch: a watch that allows them and whose own objects never change still
// learns how far the store has gone. The apiserver's watch cache sends each such watch a bookmark
// every minute and one 2 s before its timeout (cacheWatcher.nextBookmarkTime), carrying the last
// resourceVersion the cache took from the store's watch. So a short watch is enough to see one,
// and its resourceVersion must have reached every write made while it ran.

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// bookmarkWatchSeconds is the watch's timeout: its bookmark comes 2 s before it.
const bookmarkWatchSeconds = 8

// unwatchedConfigMaps is how many ConfigMaps the step writes outside the watch's selector.
const unwatchedConfigMaps = 3

func periodicBookmarks(test *testContext) error {
	configMaps := test.client.CoreV1().ConfigMaps(test.namespace)
	list, err := configMaps.List(test.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	timeout := int64(bookmarkWatchSeconds)
	watcher, err := configMaps.Watch(test.ctx, metav1.ListOptions{
		ResourceVersion:     list.ResourceVersion,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
		// No object has this name: the watch gets bookmarks and nothing else.
		FieldSelector: "metadata.name=bookmarks-watched",
	})
	if err != nil {
		return err
	}
	defer watcher.Stop()
	lastWrite := uint64(0)
	for index := 0; index < unwatchedConfigMaps; index++ {
		created, err := configMaps.Create(test.ctx, namedConfigMap(fmt.Sprintf("bookmarks-unwatched-%d", index)), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if lastWrite, err = strconv.ParseUint(created.ResourceVersion, 10, 64); err != nil {
			return fmt.Errorf("a ConfigMap's resourceVersion %q: %w", created.ResourceVersion, err)
		}
	}
	bookmarks, lastBookmark, err := receiveBookmarksUntilTimeout(watcher)
	if err != nil {
		return err
	}
	if bookmarks == 0 {
		return fmt.Errorf("a watch allowing bookmarks ended after %d s without one", bookmarkWatchSeconds)
	}
	if lastBookmark < lastWrite {
		return fmt.Errorf("the last bookmark's resourceVersion %d is behind the last write's %d", lastBookmark, lastWrite)
	}
	test.report("watch allowing bookmarks, %d ConfigMaps written outside its selector: no event, "+
		"a bookmark before its timeout at or past the last write", unwatchedConfigMaps)
	return nil
}

// receiveBookmarksUntilTimeout reads watcher until the apiserver ends it, and answers how many
// bookmarks came and the resourceVersion of the last. Any other event is an error: no object the
// watch selects exists.
func receiveBookmarksUntilTimeout(watcher watch.Interface) (int, uint64, error) {
	bookmarks, lastBookmark := 0, uint64(0)
	deadline := time.After(bookmarkWatchSeconds*time.Second + expectationDeadline)
	for {
		select {
		case event, open := <-watcher.ResultChan():
			if !open {
				return bookmarks, lastBookmark, nil
			}
			if event.Type == watch.Error {
				return bookmarks, lastBookmark, fmt.Errorf("the watch answered an error: %v", apierrors.FromObject(event.Object))
			}
			configMap, ok := event.Object.(*corev1.ConfigMap)
			if !ok {
				return bookmarks, lastBookmark, fmt.Errorf("the watch sent a %T", event.Object)
			}
			if event.Type != watch.Bookmark {
				return bookmarks, lastBookmark, fmt.Errorf("the watch sent %s %s, which its selector excludes", event.Type, configMap.Name)
			}
			resourceVersion, err := strconv.ParseUint(configMap.ResourceVersion, 10, 64)
			if err != nil {
				return bookmarks, lastBookmark, fmt.Errorf("a bookmark's resourceVersion %q: %w", configMap.ResourceVersion, err)
			}
			bookmarks, lastBookmark = bookmarks+1, resourceVersion
		case <-deadline:
			return bookmarks, lastBookmark, fmt.Errorf("the watch did not end within %d s and %s", bookmarkWatchSeconds, expectationDeadline)
		}
	}
}
