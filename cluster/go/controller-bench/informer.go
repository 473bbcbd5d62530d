// The informer: what client-go's reflector and shared informer do for a Kubernetes resource,
// done directly on etcd's gRPC API. It lists the whole prefix into a client-go cache.Indexer
// (paged, every page at the first page's revision), then watches the prefix from the next
// revision, applies puts and deletes to the indexer and enqueues the set key of every changed
// key. A watch that falls behind compaction relists and enqueues what the relist changed.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/tools/cache"
)

// ownerIndexName is the indexer's index from a replica to its set's name.
const ownerIndexName = "owner"

// listPageSize is the limit of each page of a list, as a Kubernetes reflector pages its lists.
const listPageSize = 1000

// listPageTimeout bounds one page of a list, so a member that stops answering is noticed.
const listPageTimeout = 30 * time.Second

// watchRestartDelay spaces out restarts of a watch that keeps failing for reasons other than
// compaction, so that an unreachable store does not become a busy loop.
const watchRestartDelay = 200 * time.Millisecond

// cachedObject is one key as the indexer holds it. Objects in the indexer are never changed in
// place: an update stores a new one, so workers can read them without locks.
type cachedObject struct {
	Key         string
	Value       []byte
	ModRevision int64
}

// cachedObjectKey is the indexer's key function: an object's key is its etcd key.
func cachedObjectKey(object any) (string, error) {
	cached, isCachedObject := object.(*cachedObject)
	if !isCachedObject {
		return "", fmt.Errorf("the indexer holds *cachedObject, not %T", object)
	}
	return cached.Key, nil
}

// newObjectIndexer makes the indexer with the "owner" index: a replica's set name.
func newObjectIndexer(layout keyLayout) cache.Indexer {
	ownerIndex := func(object any) ([]string, error) {
		key, err := cachedObjectKey(object)
		if err != nil {
			return nil, err
		}
		if owner, isReplica := layout.ownerOfReplica(key); isReplica {
			return []string{owner}, nil
		}
		return nil, nil
	}
	return cache.NewIndexer(cachedObjectKey, cache.Indexers{ownerIndexName: ownerIndex})
}

// informer keeps indexer equal to the store's keys under prefix and tells enqueue about changes.
type informer struct {
	client  *clientv3.Client
	prefix  string
	layout  keyLayout
	indexer cache.Indexer
	enqueue func(setKey string)
	logger  *log.Logger
	relists atomic.Int64
}

// enqueueSetOf enqueues the set key a changed key maps to, if any.
func (inf *informer) enqueueSetOf(key string) {
	if setKey, mapsToSet := inf.layout.setKeyToReconcile(key); mapsToSet {
		inf.enqueue(setKey)
	}
}

// listAtOneRevision reads every key under the prefix, page by page, every page at the first
// page's revision so the pages form one consistent snapshot. A snapshot compacted away while
// being read is started over at a newer revision.
func (inf *informer) listAtOneRevision(ctx context.Context) ([]any, int64, error) {
	for {
		objects, revision, err := inf.listPages(ctx)
		if errors.Is(err, rpctypes.ErrCompacted) {
			inf.logger.Printf("list at revision %d was compacted while read; listing again", revision)
			continue
		}
		return objects, revision, err
	}
}

func (inf *informer) listPages(ctx context.Context) ([]any, int64, error) {
	rangeEnd := clientv3.GetPrefixRangeEnd(inf.prefix)
	pageStart := inf.prefix
	var revision int64
	var objects []any
	for {
		options := []clientv3.OpOption{clientv3.WithRange(rangeEnd), clientv3.WithLimit(listPageSize)}
		if revision != 0 {
			options = append(options, clientv3.WithRev(revision))
		}
		pageContext, cancel := context.WithTimeout(ctx, listPageTimeout)
		page, err := inf.client.Get(pageContext, pageStart, options...)
		cancel()
		if err != nil {
			return nil, revision, err
		}
		if revision == 0 {
			revision = page.Header.Revision
		}
		for _, kv := range page.Kvs {
			objects = append(objects, &cachedObject{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision})
		}
		if !page.More || len(page.Kvs) == 0 {
			return objects, revision, nil
		}
		pageStart = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
}

// initialSync fills the indexer from one list and enqueues every set key it maps to, as a shared
// informer's initial Add events do. It answers the list's revision and the number of keys.
func (inf *informer) initialSync(ctx context.Context) (int64, int, error) {
	objects, revision, err := inf.listAtOneRevision(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := inf.indexer.Replace(objects, strconv.FormatInt(revision, 10)); err != nil {
		return 0, 0, err
	}
	for _, object := range objects {
		inf.enqueueSetOf(object.(*cachedObject).Key)
	}
	return revision, len(objects), nil
}

// relist lists again after the watch fell behind compaction, replaces the indexer's contents
// and enqueues every key that was added, changed or deleted in between.
func (inf *informer) relist(ctx context.Context) (int64, error) {
	objects, revision, err := inf.listAtOneRevision(ctx)
	if err != nil {
		return 0, err
	}
	changedKeys := inf.keysChangedBy(objects)
	if err := inf.indexer.Replace(objects, strconv.FormatInt(revision, 10)); err != nil {
		return 0, err
	}
	for _, key := range changedKeys {
		inf.enqueueSetOf(key)
	}
	inf.relists.Add(1)
	inf.logger.Printf("relisted at revision %d: %d keys, %d changed", revision, len(objects), len(changedKeys))
	return revision, nil
}

// keysChangedBy compares a fresh list with the indexer: keys gone, new, or at another revision.
func (inf *informer) keysChangedBy(objects []any) []string {
	fresh := make(map[string]*cachedObject, len(objects))
	for _, object := range objects {
		cached := object.(*cachedObject)
		fresh[cached.Key] = cached
	}
	var changed []string
	for _, key := range inf.indexer.ListKeys() {
		if _, stillThere := fresh[key]; !stillThere {
			changed = append(changed, key)
		}
	}
	for key, object := range fresh {
		previous, existed, _ := inf.indexer.GetByKey(key)
		if !existed || previous.(*cachedObject).ModRevision != object.ModRevision {
			changed = append(changed, key)
		}
	}
	return changed
}

// run watches from the revision after listedRevision until ctx is done, relisting whenever the
// watch reports compaction and resuming after the last revision seen when it ends otherwise.
func (inf *informer) run(ctx context.Context, listedRevision int64) {
	seenRevision := listedRevision
	for ctx.Err() == nil {
		lastRevision, compacted := inf.watchFrom(ctx, seenRevision+1)
		seenRevision = max(seenRevision, lastRevision)
		if compacted {
			seenRevision = inf.relistUntilDone(ctx, seenRevision)
			continue
		}
		if ctx.Err() == nil {
			inf.logger.Printf("watch ended at revision %d; watching again", seenRevision)
			sleepOrDone(ctx, watchRestartDelay)
		}
	}
}

// relistUntilDone relists until it succeeds or ctx is done; it answers the revision to watch after.
func (inf *informer) relistUntilDone(ctx context.Context, seenRevision int64) int64 {
	for ctx.Err() == nil {
		revision, err := inf.relist(ctx)
		if err == nil {
			return revision
		}
		if ctx.Err() == nil {
			inf.logger.Printf("relist failed: %v", err)
			sleepOrDone(ctx, watchRestartDelay)
		}
	}
	return seenRevision
}

// watchFrom applies one watch's events to the indexer until the watch ends. It answers the last
// revision the watch has fully delivered and whether it ended because of compaction.
func (inf *informer) watchFrom(ctx context.Context, startRevision int64) (int64, bool) {
	// Like kube-apiserver's watches, require a leader: a member cut off from the others ends the
	// watch instead of silently serving nothing, and the next watch may reach a healthy member.
	watchContext, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	lastRevision := startRevision - 1
	responses := inf.client.Watch(watchContext, inf.prefix,
		clientv3.WithPrefix(), clientv3.WithRev(startRevision), clientv3.WithProgressNotify())
	for response := range responses {
		if response.CompactRevision != 0 {
			inf.logger.Printf("watch from revision %d was compacted at %d", startRevision, response.CompactRevision)
			return lastRevision, true
		}
		if err := response.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return lastRevision, true
			}
			if ctx.Err() == nil {
				inf.logger.Printf("watch error: %v", err)
			}
			return lastRevision, false
		}
		lastRevision = inf.applyWatchResponse(response, lastRevision)
	}
	return lastRevision, false
}

// applyWatchResponse stores one response's events and answers the last revision it covered. A
// progress notification (no events) means everything up to its header's revision was delivered;
// an event response's header may be ahead of events still to come, so only events count there.
func (inf *informer) applyWatchResponse(response clientv3.WatchResponse, lastRevision int64) int64 {
	if response.IsProgressNotify() {
		return max(lastRevision, response.Header.Revision)
	}
	for _, event := range response.Events {
		key := string(event.Kv.Key)
		var err error
		if event.Type == clientv3.EventTypeDelete {
			err = inf.indexer.Delete(&cachedObject{Key: key})
		} else {
			err = inf.indexer.Update(&cachedObject{Key: key, Value: event.Kv.Value, ModRevision: event.Kv.ModRevision})
		}
		if err != nil {
			inf.logger.Printf("indexer refused %s: %v", key, err)
		}
		inf.enqueueSetOf(key)
		lastRevision = max(lastRevision, event.Kv.ModRevision)
	}
	return lastRevision
}

// sleepOrDone waits for delay, or less if ctx is done first.
func sleepOrDone(ctx context.Context, delay time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
