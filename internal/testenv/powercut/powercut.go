// Package powercut gives a test a directory that loses, when the test cuts
// the power, every write a power cut would lose: what was not fsynced.
//
// A kill -9 of a process keeps everything it wrote (the page cache
// survives); a power cut keeps only what reached the disk. The directory is
// a FUSE passthrough filesystem over a backing directory that models the
// disk the way a power cut sees it, strictly, as POSIX promises and no
// further:
//
//   - A file's content is durable as of its last fsync (or fdatasync) on
//     any descriptor; bytes written, truncated or punched since are lost.
//   - A directory's entries (the names it holds: creates, mkdirs, renames
//     in and out, unlinks, rmdirs, symlinks) are durable as of the
//     directory's last fsync; a change since is lost. A file created and
//     fsynced in a directory that was not fsynced afterwards is gone; a
//     rename is undone in each directory not fsynced since (in both when
//     neither was, kept twice when only the target was).
//   - What was there at mount, or at the last Sync, is durable. Nothing is
//     ever flushed in the background: the cut can come at the worst moment.
//   - Attributes (mode, owner, times) are kept as they are at the cut.
//   - Hard links are refused (EPERM), and so is O_TMPFILE (EOPNOTSUPP):
//     the model keeps one name per file. syncfs(2) and sync(2) make
//     nothing durable (FUSE does not pass them on); the code under test
//     fsyncs what it needs. File locks are the kernel's own.
//
// Cut is the power cut: the test kills every process that uses the
// directory (kill -9), Cut aborts the FUSE connection and unmounts it,
// rebuilds the backing directory in its durable state, and mounts it again
// with everything in it durable.
// The backing directory is never fsynced: the machine keeps its power, the
// model loses it.
//
// It needs /dev/fuse and root; without either the test skips, unless
// SLESS_REQUIRE_SERVICES=1.
package powercut

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sless.kube5s.ru/sless/internal/testenv"
)

// Disk is a mounted power-cut directory.
type Disk struct {
	// Dir is where the disk is mounted: the directory to use.
	Dir string

	t       testing.TB
	backing string
	base    string
	server  *fuse.Server
	m       *model
}

// Mount mounts a new, empty disk for t and unmounts it when t ends.
//
// It skips under the race detector: a test process that serves the disk
// and also reads or writes it (the journal's and the database's tests do)
// was seen to hang there, the FUSE server's goroutines never scheduled
// while its own client waited on them.
func Mount(t testing.TB) *Disk {
	t.Helper()
	if raceEnabled {
		t.Skip("a power-cut disk served and used by the same process hangs under the race detector")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Unavailable(t, "a power-cut disk needs /dev/fuse: %v", err)
	}
	if os.Getuid() != 0 {
		testenv.Unavailable(t, "a power-cut disk needs root to mount FUSE")
	}
	base := t.TempDir()
	d := &Disk{t: t, base: base, Dir: filepath.Join(base, "mnt"), backing: filepath.Join(base, "backing")}
	for _, dir := range []string{d.Dir, d.backing} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.mount(); err != nil {
		testenv.Unavailable(t, "mounting a power-cut disk: %v", err)
	}
	// Cut needs the connection's abort file: find out now.
	if _, err := d.abortFile(); err != nil {
		d.server.Unmount()
		testenv.Unavailable(t, "a power-cut disk needs fusectl: %v", err)
	}
	t.Cleanup(func() {
		if d.server != nil {
			if err := d.unmount(); err != nil {
				t.Errorf("unmounting the power-cut disk: %v", err)
			}
		}
	})
	return d
}

func (d *Disk) mount() error {
	grave := filepath.Join(d.base, "grave")
	if err := os.Mkdir(grave, 0o700); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(d.backing, &st); err != nil {
		return err
	}
	d.m = newModel(grave)
	root := &fs.LoopbackRoot{Path: d.backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, m: d.m}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	server, err := fs.Mount(d.Dir, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{
		// The server's instances run as other users.
		AllowOther:  true,
		Options:     []string{"default_permissions"},
		DirectMount: true,
		FsName:      "powercut",
		Name:        "powercut",
	}})
	if err != nil {
		return err
	}
	d.server = server
	return nil
}

// unmount cuts the disk off: it aborts its FUSE connection, so that every
// request pending or to come fails at once (a process the sandbox
// confined can keep the connection alive for tens of seconds after it was
// killed, in a mount namespace of its own), and unmounts it. Once it
// returns, no request changes the backing directory any more.
func (d *Disk) unmount() error {
	abort, err := d.abortFile()
	if err != nil {
		return err
	}
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		return fmt.Errorf("aborting the FUSE connection: %w", err)
	}
	// Detached: a process of the test itself (a database it opened) may
	// still hold files of the disk; they fail from now on.
	if err := syscall.Unmount(d.Dir, syscall.MNT_DETACH); err != nil {
		return err
	}
	d.server.Wait()
	d.server = nil
	return nil
}

// fusectl is where the kernel lists FUSE connections.
const fusectl = "/sys/fs/fuse/connections"

// abortFile returns the file that aborts the disk's FUSE connection,
// mounting fusectl when it is not.
func (d *Disk) abortFile() (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(d.Dir, &st); err != nil {
		return "", err
	}
	abort := filepath.Join(fusectl, strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10), "abort")
	if _, err := os.Stat(abort); errors.Is(err, os.ErrNotExist) {
		if err := syscall.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return "", fmt.Errorf("mounting fusectl: %w", err)
		}
	}
	if _, err := os.Stat(abort); err != nil {
		return "", err
	}
	return abort, nil
}

// Sync makes everything on the disk durable, as sync(2) does.
func (d *Disk) Sync() {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	d.m.files = map[uint64]*fileState{}
	d.m.dirs = map[uint64]map[string]entry{}
}

// Cut cuts the power: it unmounts the disk (every process using it must be
// killed first), rolls the backing directory back to its durable state and
// mounts it again. It ends t on failure.
func (d *Disk) Cut() {
	d.t.Helper()
	if err := d.unmount(); err != nil {
		d.t.Fatalf("power cut: unmounting: %v", err)
	}
	rebuilt := filepath.Join(d.base, "rebuilt")
	if err := d.m.rollBack(d.backing, rebuilt); err != nil {
		d.t.Fatalf("power cut: rolling back to the durable state: %v", err)
	}
	for _, dir := range []string{d.backing, d.m.grave} {
		if err := os.RemoveAll(dir); err != nil {
			d.t.Fatalf("power cut: %v", err)
		}
	}
	if err := os.Rename(rebuilt, d.backing); err != nil {
		d.t.Fatalf("power cut: %v", err)
	}
	if err := d.mount(); err != nil {
		d.t.Fatalf("power cut: mounting again: %v", err)
	}
}
