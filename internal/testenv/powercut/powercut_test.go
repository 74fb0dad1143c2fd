package powercut_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv/powercut"
)

// write writes data to path (creating it), fsyncing it when sync is set.
func write(t *testing.T, path, data string, flag int, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// want checks the content of path; missing means it must not exist.
func want(t *testing.T, path, content string, missing bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	switch {
	case missing && errors.Is(err, fs.ErrNotExist):
	case missing:
		t.Errorf("%s after the cut: %q, %v; want it gone", filepath.Base(path), data, err)
	case err != nil:
		t.Errorf("%s after the cut: %v; want %q", filepath.Base(path), err, content)
	case string(data) != content:
		t.Errorf("%s after the cut: %q; want %q", filepath.Base(path), data, content)
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		name string
		// setup runs before a first cut, change after it; then the power
		// is cut again and check looks.
		setup, change func(t *testing.T, dir string)
		check         func(t *testing.T, dir string)
	}{{
		name:   "a file written without fsync is gone",
		change: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "data", 0, false) },
		check:  func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "", true) },
	}, {
		name: "a file fsynced in a directory not fsynced is gone",
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f"), "data", 0, true)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "", true) },
	}, {
		name: "a file not fsynced in a directory fsynced is empty",
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f"), "data", 0, false)
			syncDir(t, dir)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "", false) },
	}, {
		name: "a file and its directory fsynced are there",
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f"), "data", 0, true)
			syncDir(t, dir)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "data", false) },
	}, {
		name:  "bytes appended without fsync are gone",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "old", 0, false) },
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f"), "-synced", os.O_APPEND, true)
			write(t, filepath.Join(dir, "f"), "-lost", os.O_APPEND, false)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "old-synced", false) },
	}, {
		name:  "an overwrite and a truncation without fsync are undone",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "0123456789", 0, false) },
		change: func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteAt([]byte("ab"), 2)
			f.Truncate(6)
			f.WriteAt([]byte("xyz"), 5)
			f.Truncate(1)
			f.WriteAt([]byte("QQQQQQQQQQQQ"), 0)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "0123456789", false) },
	}, {
		name:  "a file truncated by O_TRUNC without fsync is restored",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "old", 0, false) },
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f"), "new", os.O_TRUNC, false)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "old", false) },
	}, {
		name:  "a rename over a file without a directory fsync reverts",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "old", 0, false) },
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f.tmp"), "new", 0, true)
			if err := os.Rename(filepath.Join(dir, "f.tmp"), filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, dir string) {
			want(t, filepath.Join(dir, "f"), "old", false)
			want(t, filepath.Join(dir, "f.tmp"), "", true)
		},
	}, {
		name:  "a rename with a directory fsync stays",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "old", 0, false) },
		change: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "f.tmp"), "new", 0, true)
			if err := os.Rename(filepath.Join(dir, "f.tmp"), filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, dir)
		},
		check: func(t *testing.T, dir string) {
			want(t, filepath.Join(dir, "f"), "new", false)
			want(t, filepath.Join(dir, "f.tmp"), "", true)
		},
	}, {
		name: "a rename between directories, only the target fsynced, keeps both",
		setup: func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "a"), 0o755)
			os.Mkdir(filepath.Join(dir, "b"), 0o755)
			write(t, filepath.Join(dir, "a", "f"), "data", 0, false)
		},
		change: func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "a", "f"), filepath.Join(dir, "b", "f")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, filepath.Join(dir, "b"))
		},
		check: func(t *testing.T, dir string) {
			want(t, filepath.Join(dir, "a", "f"), "data", false)
			want(t, filepath.Join(dir, "b", "f"), "data", false)
		},
	}, {
		name:  "an unlink without a directory fsync reverts",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "data", 0, false) },
		change: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "data", false) },
	}, {
		name:  "an unlink with a directory fsync stays",
		setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "data", 0, false) },
		change: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, dir)
		},
		check: func(t *testing.T, dir string) { want(t, filepath.Join(dir, "f"), "", true) },
	}, {
		name: "a directory its parent did not fsync is gone with what it holds",
		change: func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(sub, "f"), "data", 0, true)
			syncDir(t, sub)
		},
		check: func(t *testing.T, dir string) {
			if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("sub after the cut: %v; want it gone", err)
			}
		},
	}, {
		name: "a tree fsynced bottom-up is there",
		change: func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(sub, "f"), "data", 0, true)
			if err := os.Symlink("f", filepath.Join(sub, "link")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, sub)
			syncDir(t, dir)
		},
		check: func(t *testing.T, dir string) {
			want(t, filepath.Join(dir, "sub", "f"), "data", false)
			want(t, filepath.Join(dir, "sub", "link"), "data", false)
		},
	}, {
		name:  "a removed directory comes back without a parent fsync",
		setup: func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "sub"), 0o700) },
		change: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "sub")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, dir string) {
			st, err := os.Stat(filepath.Join(dir, "sub"))
			if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
				t.Errorf("sub after the cut: %v, %v; want a directory with mode 0700", st, err)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := powercut.Mount(t)
			if tt.setup != nil {
				tt.setup(t, d.Dir)
			}
			d.Sync()
			tt.change(t, d.Dir)
			d.Cut()
			tt.check(t, d.Dir)
		})
	}
}

// TestRmdirRefusesNonEmpty: the disk keeps a removed directory's inode,
// but rmdir still refuses a directory that holds something.
func TestRmdirRefusesNonEmpty(t *testing.T) {
	d := powercut.Mount(t)
	sub := filepath.Join(d.Dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "f"), "data", 0, false)
	if err := syscall.Rmdir(sub); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a directory holding a file: %v; want ENOTEMPTY", err)
	}
	if err := os.Remove(filepath.Join(sub, "f")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(sub); err != nil {
		t.Errorf("rmdir of an empty directory: %v", err)
	}
	if _, err := os.Stat(sub); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sub after rmdir: %v; want it gone", err)
	}
}

// TestCutTwice checks that a disk keeps working across cuts and that what
// a cut kept stays.
func TestCutTwice(t *testing.T) {
	d := powercut.Mount(t)
	f := filepath.Join(d.Dir, "f")
	write(t, f, "one", 0, true)
	syncDir(t, d.Dir)
	d.Cut()
	write(t, f, "-two", os.O_APPEND, false)
	d.Cut()
	want(t, f, "one", false)
	write(t, f, "-three", os.O_APPEND, true)
	d.Cut()
	want(t, f, "one-three", false)
}
