// The data model shared with revkv's Rust replica controller example: where replica sets and
// replicas live under the prefix, which set a changed key belongs to, and how a replica set's
// JSON value is read and written back with a new status. Everything here is pure, so that
// main_test.go can check it without a store.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// errInvalidObject marks a stored value that is not a replica set. Retrying cannot fix it, so the
// worker logs it, counts it as an error and forgets the key until the value changes again.
var errInvalidObject = errors.New("invalid object")

// keyLayout knows where sets and replicas live under one prefix.
type keyLayout struct {
	setsPrefix     string
	replicasPrefix string
}

func newKeyLayout(prefix string) keyLayout {
	return keyLayout{setsPrefix: prefix + "sets/", replicasPrefix: prefix + "replicas/"}
}

func (layout keyLayout) setKey(name string) string {
	return layout.setsPrefix + name
}

func (layout keyLayout) replicaKey(name string, index uint32) string {
	return layout.replicasPrefix + name + "/" + fmt.Sprintf("%04d", index)
}

// setNameOf answers the set name of a set key, and false for any other key.
func (layout keyLayout) setNameOf(key string) (string, bool) {
	return strings.CutPrefix(key, layout.setsPrefix)
}

// ownerOfReplica answers NAME for a key `replicas/NAME/INDEX`, and false for any other key.
func (layout keyLayout) ownerOfReplica(key string) (string, bool) {
	rest, isReplica := strings.CutPrefix(key, layout.replicasPrefix)
	if !isReplica {
		return "", false
	}
	name, _, hasIndex := strings.Cut(rest, "/")
	return name, hasIndex
}

// setKeyToReconcile maps any changed key to the set key whose reconcile must look at it: a set
// key is its own, a replica's is its owner's. Other keys under the prefix map to nothing.
func (layout keyLayout) setKeyToReconcile(key string) (string, bool) {
	if strings.HasPrefix(key, layout.setsPrefix) {
		return key, true
	}
	if owner, isReplica := layout.ownerOfReplica(key); isReplica {
		return layout.setKey(owner), true
	}
	return "", false
}

// replicaIndexOf reads the index after the last slash of a replica key. A replica whose index
// does not parse is one the spec cannot want, so callers delete it, as the Rust example does.
func replicaIndexOf(key string) (uint32, bool) {
	lastSlash := strings.LastIndexByte(key, '/')
	index, err := strconv.ParseUint(key[lastSlash+1:], 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(index), true
}

// replicaSet is a set's value as read: every top-level field is kept as raw JSON, so that
// writing the status back leaves metadata, spec and any unknown field exactly as they were.
type replicaSet struct {
	fields     map[string]json.RawMessage
	generation uint64
	replicas   uint32
	status     *setStatus
}

// setStatus is what the controller writes: the generation it acted on and the replicas it made.
// Ready is a pointer so that a status without it is told apart from one saying zero.
type setStatus struct {
	ObservedGeneration uint64  `json:"observedGeneration"`
	Ready              *uint32 `json:"ready"`
}

type setMetadata struct {
	Generation uint64 `json:"generation"`
}

// setSpec requires replicas: a spec without it says nothing the controller could act on.
type setSpec struct {
	Replicas *uint32 `json:"replicas"`
}

// parseReplicaSet reads a set's value; anything of another shape is errInvalidObject.
func parseReplicaSet(value []byte) (*replicaSet, error) {
	set := &replicaSet{}
	if err := json.Unmarshal(value, &set.fields); err != nil || set.fields == nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", errInvalidObject, err)
	}
	if raw, present := set.fields["metadata"]; present && !isJSONNull(raw) {
		var metadata setMetadata
		if err := json.Unmarshal(raw, &metadata); err != nil {
			return nil, fmt.Errorf("%w: metadata: %v", errInvalidObject, err)
		}
		set.generation = metadata.Generation
	}
	var spec setSpec
	if err := json.Unmarshal(set.fields["spec"], &spec); err != nil || spec.Replicas == nil {
		return nil, fmt.Errorf("%w: spec.replicas missing or not a count: %v", errInvalidObject, err)
	}
	set.replicas = *spec.Replicas
	if raw, present := set.fields["status"]; present && !isJSONNull(raw) {
		set.status = &setStatus{}
		if err := json.Unmarshal(raw, set.status); err != nil {
			return nil, fmt.Errorf("%w: status: %v", errInvalidObject, err)
		}
	}
	return set, nil
}

func isJSONNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// statusIsCurrent says whether the status already reflects this generation and the wanted
// replicas, in which case writing it again would only cost a revision.
func (set *replicaSet) statusIsCurrent() bool {
	return set.status != nil &&
		set.status.ObservedGeneration >= set.generation &&
		set.status.Ready != nil && *set.status.Ready == set.replicas
}

// encodeWithCurrentStatus answers the value with status replaced by the generation as read and
// ready = spec.replicas; every other field is written back as it was read.
func (set *replicaSet) encodeWithCurrentStatus() ([]byte, error) {
	ready := set.replicas
	status, err := json.Marshal(setStatus{ObservedGeneration: set.generation, Ready: &ready})
	if err != nil {
		return nil, err
	}
	fields := make(map[string]json.RawMessage, len(set.fields)+1)
	for name, raw := range set.fields {
		fields[name] = raw
	}
	fields["status"] = status
	return encodeWithoutHTMLEscaping(fields)
}

// encodeWithoutHTMLEscaping keeps '<', '>' and '&' in kept fields as they were stored; the
// default encoder would rewrite them as \u003c and so change bytes nobody asked to change.
func encodeWithoutHTMLEscaping(value any) ([]byte, error) {
	var buffer bytes.Buffer
	encoder := json.NewEncoder(&buffer)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buffer.Bytes(), []byte("\n")), nil
}
