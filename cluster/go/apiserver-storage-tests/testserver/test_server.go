// Package testserver replaces k8s.io/apiserver's pkg/storage/etcd3/testserver in a copy of that
// module, so that Kubernetes' own storage tests (pkg/storage/etcd3, pkg/storage/cacher, which run
// the generic suite of pkg/storage/testing) run against a store started outside the test process.
//
// The upstream package starts an embedded etcd for every RunEtcd call. This one keeps its API
// (NewTestConfig returns an embed.Config the tests adjust; RunEtcd returns a recorded Kubernetes
// client) and, for every call, starts a fresh cluster of real processes chosen by the environment:
//
//	REVKV_STORAGE_TEST_STORE    "revkv" or "etcd"; unset: the embedded etcd, exactly as upstream
//	REVKV_STORAGE_TEST_BINARY   the revkv or etcd binary to start
//	REVKV_STORAGE_TEST_MEMBERS  members per cluster (default 1)
//
// Of the embed.Config the tests change, WatchProgressNotifyInterval and QuotaBackendBytes reach the
// started members as their flags; the other fields the tests leave at their defaults.
// scripts/kubernetes-storage-tests.sh builds and runs the tests with it.
package testserver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// How long a started cluster may take to answer a linearizable read, and a stopped member to exit.
const (
	clusterReadyTimeout = 60 * time.Second
	memberStopTimeout   = 10 * time.Second
)

// getAvailablePorts returns count TCP ports that were free a moment ago.
func getAvailablePorts(count int) ([]int, error) {
	ports := []int{}
	for i := 0; i < count; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("could not bind to a port: %v", err)
		}
		// Closed only once all are chosen, so that no port is handed out twice.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NewTestConfig returns the configuration the tests adjust, as upstream's does: an embedded etcd's,
// on free ports, with fsync off, logging only errors, in a directory removed after the test.
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true
	ports, err := getAvailablePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("localhost", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("localhost", strconv.Itoa(ports[1]))}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-server"))
	cfg.Dir = t.TempDir()
	os.Chmod(cfg.Dir, 0700)
	return cfg
}

var autoPortLock sync.Mutex

// RunEtcd starts a fresh store for the test (see the package comment) and returns a client of it,
// wrapped in the recorders the tests type-assert. The store is stopped when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()
	if cfg == nil {
		// Upstream holds the lock until the server listens on the ports it chose; so does this.
		autoPortLock.Lock()
		defer autoPortLock.Unlock()
		cfg = NewTestConfig(t)
	}
	var endpoints []string
	switch store := os.Getenv("REVKV_STORAGE_TEST_STORE"); store {
	case "":
		endpoints = runEmbeddedEtcd(t, cfg)
	case "revkv", "etcd":
		endpoints = runExternalCluster(t, cfg, store)
	default:
		t.Fatalf("REVKV_STORAGE_TEST_STORE=%q: want revkv, etcd or nothing", store)
	}
	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	kubernetesRecorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.KV = storagetesting.NewKVRecorder(client.KV, kubernetesRecorder)
	client.Kubernetes = kubernetesRecorder
	return client
}

// runEmbeddedEtcd is upstream's RunEtcd up to the client: the control the others are compared with.
func runEmbeddedEtcd(t testing.TB, cfg *embed.Config) []string {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(clusterReadyTimeout):
		e.Server.Stop()
		t.Fatal("server took too long to start")
	}
	go func() {
		if err := <-e.Err(); err != nil {
			t.Error(err)
		}
	}()
	return e.Server.Cluster().ClientURLs()
}

// member is one started process of a cluster.
type member struct {
	command *exec.Cmd
	logPath string
	exited  chan struct{}
}

// runExternalCluster starts the members of a fresh cluster of store ("revkv" or "etcd"), waits
// until it answers a linearizable read, and returns its client endpoints.
func runExternalCluster(t testing.TB, cfg *embed.Config, store string) []string {
	binary := os.Getenv("REVKV_STORAGE_TEST_BINARY")
	if binary == "" {
		t.Fatal("REVKV_STORAGE_TEST_BINARY is not set: the path of the store's binary")
	}
	count := 1
	if text := os.Getenv("REVKV_STORAGE_TEST_MEMBERS"); text != "" {
		parsed, err := strconv.Atoi(text)
		if err != nil || parsed < 1 || parsed > 7 {
			t.Fatalf("REVKV_STORAGE_TEST_MEMBERS=%q: want 1 to 7", text)
		}
		count = parsed
	}
	// Three ports a member: client (revkv's HTTP API, unused by the tests), peer, and gRPC.
	ports, err := getAvailablePorts(3 * count)
	if err != nil {
		t.Fatal(err)
	}
	directory := t.TempDir()
	var peers, endpoints []string
	for i := 0; i < count; i++ {
		peers = append(peers, fmt.Sprintf("%d=http://127.0.0.1:%d", i+1, ports[3*i+1]))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d", ports[3*i+2]))
	}
	var members []*member
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(func() { stopMembers(t, members) })
	for i := 0; i < count; i++ {
		var arguments []string
		if store == "revkv" {
			arguments = revkvArguments(cfg, i+1, directory, ports[3*i:3*i+3], strings.Join(peers, ","))
		} else {
			arguments = etcdArguments(cfg, i+1, directory, ports[3*i+1:3*i+3], strings.Join(peers, ","))
		}
		members = append(members, startMember(t, binary, arguments, filepath.Join(directory, fmt.Sprintf("member-%d.log", i+1))))
	}
	waitUntilReady(t, endpoints, members)
	return endpoints
}

// revkvArguments are `revkv serve`'s flags for member id of the cluster.
func revkvArguments(cfg *embed.Config, id int, directory string, ports []int, peers string) []string {
	arguments := []string{"serve",
		"--id", strconv.Itoa(id),
		"--data-dir", filepath.Join(directory, fmt.Sprintf("member-%d", id)),
		"--listen-client", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--listen-peer", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--listen-grpc", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--initial-cluster", peers,
	}
	if cfg.WatchProgressNotifyInterval > 0 {
		arguments = append(arguments, "--watch-progress-notify-interval-ms",
			strconv.FormatInt(cfg.WatchProgressNotifyInterval.Milliseconds(), 10))
	}
	if cfg.QuotaBackendBytes > 0 {
		arguments = append(arguments, "--quota-backend-bytes", strconv.FormatInt(cfg.QuotaBackendBytes, 10))
	}
	return arguments
}

// etcdArguments are etcd's flags for member id of the cluster: its defaults but for what the test
// set, and fsync off as upstream's embedded server has it. Members are named by their ids.
func etcdArguments(cfg *embed.Config, id int, directory string, ports []int, peers string) []string {
	arguments := []string{
		"--name", strconv.Itoa(id),
		"--data-dir", filepath.Join(directory, fmt.Sprintf("member-%d", id)),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--initial-cluster", peers,
		"--initial-cluster-state", "new",
		"--unsafe-no-fsync",
		"--log-level", "error",
	}
	if cfg.WatchProgressNotifyInterval > 0 {
		arguments = append(arguments, "--watch-progress-notify-interval", cfg.WatchProgressNotifyInterval.String())
	}
	if cfg.QuotaBackendBytes > 0 {
		arguments = append(arguments, "--quota-backend-bytes", strconv.FormatInt(cfg.QuotaBackendBytes, 10))
	}
	return arguments
}

// startMember starts one process with its output in logPath.
func startMember(t testing.TB, binary string, arguments []string, logPath string) *member {
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	command := exec.Command(binary, arguments...)
	command.Stdout = log
	command.Stderr = log
	if err := command.Start(); err != nil {
		log.Close()
		t.Fatalf("starting %s: %v", binary, err)
	}
	started := &member{command: command, logPath: logPath, exited: make(chan struct{})}
	go func() {
		command.Wait()
		log.Close()
		close(started.exited)
	}()
	return started
}

// waitUntilReady polls until a linearizable read through every endpoint succeeds, failing the test
// with the members' logs if one exits or the deadline passes first.
func waitUntilReady(t testing.TB, endpoints []string, members []*member) {
	deadline := time.Now().Add(clusterReadyTimeout)
	for _, endpoint := range endpoints {
		client, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{endpoint},
			DialTimeout: time.Second,
			Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.FatalLevel)),
		})
		if err != nil {
			t.Fatal(err)
		}
		for {
			for _, m := range members {
				select {
				case <-m.exited:
					client.Close()
					t.Fatalf("a member exited before the cluster was ready:\n%s", memberLogs(members))
				default:
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := client.Get(ctx, "/readiness-probe")
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				client.Close()
				t.Fatalf("the cluster did not answer a read through %s within %s (%v):\n%s",
					endpoint, clusterReadyTimeout, err, memberLogs(members))
			}
			time.Sleep(50 * time.Millisecond)
		}
		client.Close()
	}
}

// stopMembers ends every member (SIGTERM, then SIGKILL after memberStopTimeout) and waits for
// them; a failed test gets the members' logs.
func stopMembers(t testing.TB, members []*member) {
	for _, m := range members {
		m.command.Process.Signal(syscall.SIGTERM)
	}
	for _, m := range members {
		select {
		case <-m.exited:
		case <-time.After(memberStopTimeout):
			m.command.Process.Kill()
			<-m.exited
		}
	}
	if t.Failed() {
		t.Logf("members' logs:\n%s", memberLogs(members))
	}
}

// memberLogs returns the last lines of every member's log.
func memberLogs(members []*member) string {
	var text strings.Builder
	for _, m := range members {
		content, _ := os.ReadFile(m.logPath)
		lines := strings.Split(strings.TrimRight(string(content), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&text, "--- %s\n%s\n", m.logPath, strings.Join(lines, "\n"))
	}
	return text.String()
}
