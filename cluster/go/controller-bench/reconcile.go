// The workers and the reconcile function: client-go's sample-controller loop (Get, reconcile,
// Forget or AddRateLimited, always Done) around the Rust replica controller example's logic.
// Every write is a transaction that compares the revision the cache held, so a stale cache costs
// a conflict and a rate-limited requeue, never a wrong write.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// reconcileTimeout bounds one reconcile, so that shutting down (which waits for the workers)
// cannot hang on a store that stopped answering.
const reconcileTimeout = 10 * time.Second

// errConflict marks a transaction whose compare failed: the cache was stale, and the key is
// requeued to be reconciled again once the watch has caught up.
var errConflict = errors.New("conflict")

// counters are the numbers printed when the program ends.
type counters struct {
	reconciles atomic.Int64
	conflicts  atomic.Int64
	retries    atomic.Int64
	errors     atomic.Int64
}

// controller reconciles replica sets taken from queue, reading from indexer, writing to client.
type controller struct {
	client  *clientv3.Client
	layout  keyLayout
	indexer cache.Indexer
	queue   workqueue.TypedRateLimitingInterface[string]
	counts  *counters
	logger  *log.Logger
}

func newReplicaSetQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "replica-sets"},
	)
}

// runWorker processes keys until the queue is shut down and drained.
func (c *controller) runWorker() {
	for c.processNextWorkItem() {
	}
}

func (c *controller) processNextWorkItem() bool {
	setKey, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(setKey)
	// Reconciles run on their own context, not the one cancelled at shutdown: draining the queue
	// means finishing the work already taken, not failing it.
	ctx, cancel := context.WithTimeout(context.Background(), reconcileTimeout)
	defer cancel()
	c.counts.reconciles.Add(1)
	c.handleReconcileResult(setKey, c.reconcile(ctx, setKey))
	return true
}

// handleReconcileResult forgets a key that is done or cannot be fixed by retrying, and requeues
// it with rate limiting otherwise.
func (c *controller) handleReconcileResult(setKey string, err error) {
	switch {
	case err == nil:
		c.queue.Forget(setKey)
		return
	case errors.Is(err, errInvalidObject):
		// The value has to change before a reconcile can succeed, and that change enqueues it.
		c.counts.errors.Add(1)
		c.logger.Printf("skipping %s: %v", setKey, err)
		c.queue.Forget(setKey)
		return
	case errors.Is(err, errConflict):
		c.counts.conflicts.Add(1)
	default:
		c.counts.errors.Add(1)
		c.logger.Printf("reconciling %s failed: %v", setKey, err)
	}
	c.counts.retries.Add(1)
	c.queue.AddRateLimited(setKey)
}

// reconcile makes one set's replicas what its spec says, then records the generation acted on.
func (c *controller) reconcile(ctx context.Context, setKey string) error {
	name, isSetKey := c.layout.setNameOf(setKey)
	if !isSetKey {
		return nil
	}
	replicas, err := c.cachedReplicasOf(name)
	if err != nil {
		return err
	}
	stored, exists, err := c.indexer.GetByKey(setKey)
	if err != nil {
		return err
	}
	if !exists {
		// The set is gone: so are its replicas.
		for _, replica := range replicas {
			if err := c.deleteAtCachedRevision(ctx, replica); err != nil {
				return err
			}
		}
		return nil
	}
	storedSet := stored.(*cachedObject)
	set, err := parseReplicaSet(storedSet.Value)
	if err != nil {
		return err
	}
	if err := c.createMissingReplicas(ctx, name, set.replicas, replicas); err != nil {
		return err
	}
	if err := c.deleteUnwantedReplicas(ctx, set.replicas, replicas); err != nil {
		return err
	}
	if set.statusIsCurrent() {
		return nil
	}
	return c.writeStatus(ctx, storedSet, set)
}

// cachedReplicasOf answers the replicas the cache holds for set name, through the owner index.
func (c *controller) cachedReplicasOf(name string) ([]*cachedObject, error) {
	indexed, err := c.indexer.ByIndex(ownerIndexName, name)
	if err != nil {
		return nil, err
	}
	replicas := make([]*cachedObject, 0, len(indexed))
	for _, object := range indexed {
		replicas = append(replicas, object.(*cachedObject))
	}
	return replicas, nil
}

// createMissingReplicas creates every index below wanted that the cache does not hold. Each
// create requires the key to be absent; if it exists after all, the cache was stale.
func (c *controller) createMissingReplicas(ctx context.Context, name string, wanted uint32, replicas []*cachedObject) error {
	held := make(map[uint32]bool, len(replicas))
	for _, replica := range replicas {
		if index, parsed := replicaIndexOf(replica.Key); parsed {
			held[index] = true
		}
	}
	for index := uint32(0); index < wanted; index++ {
		if held[index] {
			continue
		}
		key := c.layout.replicaKey(name, index)
		response, err := c.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, name)).
			Commit()
		if err != nil {
			return fmt.Errorf("creating %s: %w", key, err)
		}
		if !response.Succeeded {
			return fmt.Errorf("%w: %s exists but the cache does not hold it", errConflict, key)
		}
	}
	return nil
}

// deleteUnwantedReplicas deletes every cached replica at or above wanted, and any whose index
// does not parse, since no spec can want it.
func (c *controller) deleteUnwantedReplicas(ctx context.Context, wanted uint32, replicas []*cachedObject) error {
	for _, replica := range replicas {
		if index, parsed := replicaIndexOf(replica.Key); parsed && index < wanted {
			continue
		}
		if err := c.deleteAtCachedRevision(ctx, replica); err != nil {
			return err
		}
	}
	return nil
}

// deleteAtCachedRevision deletes a key only if it is still at the revision the cache holds. A
// failed compare on a key that is gone is what was wanted; on a key changed since, a conflict.
// The else branch counts the key in the same round trip, so telling the two apart costs nothing.
func (c *controller) deleteAtCachedRevision(ctx context.Context, object *cachedObject) error {
	response, err := c.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(object.Key), "=", object.ModRevision)).
		Then(clientv3.OpDelete(object.Key)).
		Else(clientv3.OpGet(object.Key, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("deleting %s: %w", object.Key, err)
	}
	if response.Succeeded || keyWasAbsent(response) {
		return nil
	}
	return fmt.Errorf("%w: %s changed since revision %d", errConflict, object.Key, object.ModRevision)
}

// keyWasAbsent reads the count of the else branch's get.
func keyWasAbsent(response *clientv3.TxnResponse) bool {
	if len(response.Responses) == 0 {
		return false
	}
	rangeResponse := response.Responses[0].GetResponseRange()
	return rangeResponse != nil && rangeResponse.Count == 0
}

// writeStatus writes the set back with a current status, only if it is still at the revision
// read; a concurrent spec change makes it a conflict, and the requeue acts on the new spec.
func (c *controller) writeStatus(ctx context.Context, stored *cachedObject, set *replicaSet) error {
	value, err := set.encodeWithCurrentStatus()
	if err != nil {
		return fmt.Errorf("%w: encoding %s: %v", errInvalidObject, stored.Key, err)
	}
	response, err := c.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(stored.Key), "=", stored.ModRevision)).
		Then(clientv3.OpPut(stored.Key, string(value))).
		Commit()
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", stored.Key, err)
	}
	if !response.Succeeded {
		return fmt.Errorf("%w: %s changed since revision %d", errConflict, stored.Key, stored.ModRevision)
	}
	return nil
}
