package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTakeLockRefusesASecondServer(t *testing.T) {
	dir := t.TempDir()
	first, err := TakeLock(dir, Holder{PID: 4242, Listen: "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Stale != nil {
		t.Errorf("fresh directory: stale %+v, want none", first.Stale)
	}
	if !Running(dir) {
		t.Error("Running: false while the lock is held")
	}
	_, err = TakeLock(dir, Holder{PID: 4343, Listen: "127.0.0.1:9090"})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid 4242") || !strings.Contains(err.Error(), "127.0.0.1:8080") {
		t.Fatalf("second lock: got %v, want ErrInUse naming pid 4242 on 127.0.0.1:8080", err)
	}
	first.Unlock()
	first.Unlock()
	if Running(dir) {
		t.Error("Running: true after Unlock")
	}
	second, err := TakeLock(dir, Holder{PID: 4343, Listen: "127.0.0.1:9090"})
	if err != nil {
		t.Fatalf("lock after the first was released: %v", err)
	}
	second.Unlock()
}

func TestTakeLockCleansUpAfterAKilledServer(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Info{Endpoint: "http://127.0.0.1:8080", PID: 4242}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The lock file of a server whose process is gone: nobody holds it.
	if err := os.WriteFile(filepath.Join(dir, LockFile), []byte(`{"pid":4242}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "pid 4242") || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Read of a dead server's file: got %v, want it to say pid 4242 is not running", err)
	}
	l, err := TakeLock(dir, Holder{PID: 4343, Listen: "127.0.0.1:9090"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if l.Stale == nil || l.Stale.PID != 4242 {
		t.Errorf("Stale: got %+v, want the dead server's pid 4242", l.Stale)
	}
	if _, err := os.Stat(filepath.Join(dir, EndpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead server's %s: %v, want it removed", EndpointFile, err)
	}
}

func TestReadFindsARunningServer(t *testing.T) {
	dir := t.TempDir()
	l, err := TakeLock(dir, Holder{PID: os.Getpid(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if err := Write(dir, Info{Endpoint: "http://127.0.0.1:8080", PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint, token, err := Read(dir)
	if err != nil || endpoint != "http://127.0.0.1:8080" || token != "token" {
		t.Errorf("Read: got %q, %q, %v; want the endpoint and token", endpoint, token, err)
	}
}

func TestReadWithoutAServer(t *testing.T) {
	dir := t.TempDir()
	_, _, err := Read(dir)
	if err == nil || !strings.Contains(err.Error(), "no running server found in "+dir) || strings.Contains(err.Error(), "no such file") {
		t.Errorf("Read of a data directory without a server: got %v, want it to say no server was found, in its own words", err)
	}
}
