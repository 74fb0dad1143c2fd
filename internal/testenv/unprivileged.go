package testenv

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// UnprivilegedUID is the uid (and gid) tests run programs as when they need
// an ordinary user: it has no account on the machine, so no other process
// shares its limits or files.
const UnprivilegedUID = 61234

// AsUnprivileged returns the process attributes that start a program as
// UnprivilegedUID without supplementary groups, dying with the test. Only a
// root test process may use them; others should skip.
func AsUnprivileged() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: UnprivilegedUID, Gid: UnprivilegedUID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
}

// UnprivilegedDir returns a new directory owned by UnprivilegedUID (mode
// 0700) in a parent that user may enter, removed after the test.
func UnprivilegedDir(t testing.TB) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "sless-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "home")
	for _, step := range []error{os.Chmod(parent, 0o755), os.Mkdir(dir, 0o700), os.Chown(dir, UnprivilegedUID, UnprivilegedUID)} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return dir
}

// UnprivilegedCopy copies the program at path into a directory that
// UnprivilegedUID may read (a test binary or a built one usually lives in a
// 0700 directory of root's) and returns the copy's path.
func UnprivilegedCopy(t testing.TB, path string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sless-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(path))
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
