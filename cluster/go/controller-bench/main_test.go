// Tests of the pure parts: key mapping, the owner index, and reading a replica set and writing
// it back with a new status while metadata, spec and unknown fields stay as they were.
package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

var testLayout = newKeyLayout("bench/controller/")

func TestChangedKeysMapToTheSetToReconcile(t *testing.T) {
	cases := map[string]string{
		"bench/controller/sets/web":              "bench/controller/sets/web",
		"bench/controller/replicas/web/0003":     "bench/controller/sets/web",
		"bench/controller/replicas/web/garbage":  "bench/controller/sets/web",
		"bench/controller/replicas/no-index-key": "",
		"bench/controller/other/web":             "",
		"elsewhere/sets/web":                     "",
	}
	for key, wanted := range cases {
		setKey, mapped := testLayout.setKeyToReconcile(key)
		if setKey != wanted || mapped != (wanted != "") {
			t.Errorf("setKeyToReconcile(%q) = %q, %v; want %q", key, setKey, mapped, wanted)
		}
	}
}

func TestReplicaKeysAndIndices(t *testing.T) {
	if key := testLayout.replicaKey("web", 7); key != "bench/controller/replicas/web/0007" {
		t.Errorf("replicaKey = %q", key)
	}
	if index, parsed := replicaIndexOf("bench/controller/replicas/web/0012"); !parsed || index != 12 {
		t.Errorf("replicaIndexOf = %d, %v", index, parsed)
	}
	if _, parsed := replicaIndexOf("bench/controller/replicas/web/x"); parsed {
		t.Error("a non-numeric index parsed")
	}
}

func TestOwnerIndexFindsASetsReplicas(t *testing.T) {
	indexer := newObjectIndexer(testLayout)
	for _, key := range []string{
		"bench/controller/sets/web",
		"bench/controller/replicas/web/0000",
		"bench/controller/replicas/web/0001",
		"bench/controller/replicas/queue/0000",
	} {
		if err := indexer.Add(&cachedObject{Key: key, ModRevision: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := indexer.Delete(&cachedObject{Key: "bench/controller/replicas/web/0001"}); err != nil {
		t.Fatal(err)
	}
	controllerForTest := &controller{indexer: indexer}
	replicas, err := controllerForTest.cachedReplicasOf("web")
	if err != nil {
		t.Fatal(err)
	}
	if len(replicas) != 1 || replicas[0].Key != "bench/controller/replicas/web/0000" {
		t.Errorf("web's replicas = %v", replicas)
	}
}

func TestStatusRewriteKeepsEverythingElse(t *testing.T) {
	stored := `{"metadata":{"generation":3,"labels":{"a&b":"<x>"}},"spec":{"replicas":5,"writes":3},"extra":[1,2]}`
	set, err := parseReplicaSet([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if set.statusIsCurrent() {
		t.Error("a set without status counts as current")
	}
	written, err := set.encodeWithCurrentStatus()
	if err != nil {
		t.Fatal(err)
	}
	wanted := `{"extra":[1,2],"metadata":{"generation":3,"labels":{"a&b":"<x>"}},"spec":{"replicas":5,"writes":3},"status":{"observedGeneration":3,"ready":5}}`
	if string(written) != wanted {
		t.Errorf("written\n%s\nwant\n%s", written, wanted)
	}
	reread, err := parseReplicaSet(written)
	if err != nil {
		t.Fatal(err)
	}
	if !reread.statusIsCurrent() {
		t.Error("the written status does not count as current")
	}
	assertSameJSON(t, reread.fields["spec"], set.fields["spec"])
}

func TestStatusIsCurrentNeedsGenerationAndReady(t *testing.T) {
	cases := map[string]bool{
		`{"metadata":{"generation":2},"spec":{"replicas":1},"status":{"observedGeneration":2,"ready":1}}`: true,
		`{"metadata":{"generation":2},"spec":{"replicas":1},"status":{"observedGeneration":1,"ready":1}}`: false,
		`{"metadata":{"generation":2},"spec":{"replicas":2},"status":{"observedGeneration":2,"ready":1}}`: false,
		`{"metadata":{"generation":2},"spec":{"replicas":0},"status":{"observedGeneration":2}}`:           false,
		`{"metadata":{"generation":2},"spec":{"replicas":0},"status":null}`:                               false,
	}
	for value, wanted := range cases {
		set, err := parseReplicaSet([]byte(value))
		if err != nil {
			t.Fatalf("%s: %v", value, err)
		}
		if set.statusIsCurrent() != wanted {
			t.Errorf("statusIsCurrent(%s) = %v", value, !wanted)
		}
	}
}

func TestBadValuesAreInvalidObjects(t *testing.T) {
	for _, value := range []string{
		``, `not json`, `[1]`, `null`, `{}`, `{"spec":{}}`, `{"spec":{"replicas":-1}}`,
		`{"spec":{"replicas":"3"}}`, `{"metadata":"x","spec":{"replicas":1}}`,
		`{"spec":{"replicas":1},"status":{"ready":"no"}}`,
	} {
		if _, err := parseReplicaSet([]byte(value)); !errors.Is(err, errInvalidObject) {
			t.Errorf("parseReplicaSet(%q) = %v; want errInvalidObject", value, err)
		}
	}
}

func assertSameJSON(t *testing.T, got, wanted json.RawMessage) {
	t.Helper()
	var gotValue, wantedValue any
	if err := json.Unmarshal(got, &gotValue); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(wanted, &wantedValue); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotValue, wantedValue) {
		t.Errorf("got %s, want %s", got, wanted)
	}
}
