package powercut

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// model records what of the backing directory is durable, so that rollBack
// can rebuild the directory a power cut would leave. Inodes are the backing
// filesystem's inode numbers: an inode the model refers to is never freed
// while the disk is mounted (unlink and rmdir keep it in the graveyard), so
// a number never names two inodes.
type model struct {
	mu sync.Mutex
	// grave holds hard links to the files unlinked or replaced while
	// mounted, and the directories removed, by inode number: a durable
	// directory entry may still name them.
	grave string
	// files holds the files written since mount or their last fsync; a
	// file without a state is as durable as it is on disk.
	files map[uint64]*fileState
	// dirs holds the durable entries of every directory changed since
	// mount: what it held at its last fsync, or at mount.
	dirs map[uint64]map[string]entry
}

// fileState is what of a file's content is durable: its first size bytes,
// where the ranges in saved were overwritten since and hold the durable
// bytes.
type fileState struct {
	size  int64
	saved []extent
}

type extent struct {
	off  int64
	data []byte
}

// entry is a durable directory entry.
type entry struct {
	ino      uint64
	mode     uint32
	uid, gid uint32
	// target is a symbolic link's.
	target string
}

func newModel(grave string) *model {
	return &model{grave: grave, files: map[uint64]*fileState{}, dirs: map[uint64]map[string]entry{}}
}

// recordDir keeps the entries of the directory at path as durable unless
// they are recorded already: called before the directory changes, it
// records what it held since mount.
func (m *model) recordDir(path string) error {
	ino, err := inode(path)
	if err != nil {
		return err
	}
	if _, ok := m.dirs[ino]; ok {
		return nil
	}
	return m.syncDir(path)
}

// syncDir makes the entries of the directory at path durable, as its
// fsync does.
func (m *model) syncDir(path string) error {
	ino, err := inode(path)
	if err != nil {
		return err
	}
	entries, err := readEntries(path)
	if err != nil {
		return err
	}
	m.dirs[ino] = entries
	return nil
}

// created records a file created empty: nothing of its content is durable.
func (m *model) created(ino uint64) { m.files[ino] = &fileState{} }

// mkdired records a directory created empty: none of its entries are
// durable.
func (m *model) mkdired(ino uint64) { m.dirs[ino] = map[string]entry{} }

// beforeWrite saves the durable bytes in [off, end) of the file open as fd
// (inode ino) before they change: a write, a truncation, a hole punched.
func (m *model) beforeWrite(ino uint64, fd int, off, end int64) error {
	st := m.files[ino]
	if st == nil {
		var s syscall.Stat_t
		if err := syscall.Fstat(fd, &s); err != nil {
			return err
		}
		st = &fileState{size: s.Size}
		m.files[ino] = st
	}
	end = min(end, st.size)
	for _, r := range uncovered(st.saved, off, end) {
		data := make([]byte, r[1]-r[0])
		if _, err := readFullAt(fd, data, r[0]); err != nil {
			return fmt.Errorf("saving durable bytes of inode %d: %w", ino, err)
		}
		st.saved = append(st.saved, extent{off: r[0], data: data})
	}
	return nil
}

// beforeWritePath is beforeWrite for a file named by its backing path.
func (m *model) beforeWritePath(path string, off, end int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ino, err := inode(path)
	if err != nil {
		return err
	}
	return m.beforeWrite(ino, int(f.Fd()), off, end)
}

// synced makes the content of the file open as fd durable, as its fsync
// does.
func (m *model) synced(ino uint64, fd int) error {
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil {
		return err
	}
	m.files[ino] = &fileState{size: s.Size}
	return nil
}

// bury keeps the inode of the file at path alive in the graveyard before
// it is unlinked or replaced: a durable entry may still name it.
func (m *model) bury(path string, ino uint64) error {
	grave := filepath.Join(m.grave, fmt.Sprintf("f%d", ino))
	if err := os.Link(path, grave); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// rollBack rebuilds at dst (a path that does not exist, on the backing
// filesystem) the durable state of the tree at backing, moving the files it
// keeps out of backing and the graveyard. backing and the graveyard are
// left to remove.
func (m *model) rollBack(backing, dst string) error {
	// Where every inode is now, and the entries of the directories that
	// did not change since mount (read before any file moves).
	loc := map[uint64]string{}
	for _, root := range []string{backing, m.grave} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			ino, err := inode(path)
			if err != nil {
				return err
			}
			if path != m.grave {
				loc[ino] = path
			}
			if d.IsDir() && path != m.grave {
				if _, ok := m.dirs[ino]; !ok {
					if m.dirs[ino], err = readEntries(path); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	var root syscall.Stat_t
	if err := syscall.Lstat(backing, &root); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	if err := restoreAttrs(dst, entry{mode: root.Mode, uid: root.Uid, gid: root.Gid}); err != nil {
		return err
	}
	b := &builder{m: m, loc: loc, placed: map[uint64]string{}, within: map[uint64]bool{}}
	return b.dir(dst, root.Ino)
}

type builder struct {
	m   *model
	loc map[uint64]string
	// placed is where a file was rebuilt first; a rename not yet durable
	// in both directories leaves it in two, and the second gets a copy.
	placed map[uint64]string
	// within are the directories being built, to stop at a cycle that
	// renames not yet durable can make.
	within map[uint64]bool
}

func (b *builder) dir(dst string, ino uint64) error {
	b.within[ino] = true
	defer delete(b.within, ino)
	entries := b.m.dirs[ino]
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range entries {
			if !yield(name) {
				return
			}
		}
	})
	for _, name := range names {
		e := entries[name]
		p := filepath.Join(dst, name)
		var err error
		switch e.mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			if b.within[e.ino] {
				continue
			}
			if err = os.Mkdir(p, 0o700); err == nil {
				if err = b.dir(p, e.ino); err == nil {
					err = restoreAttrs(p, e)
				}
			}
		case syscall.S_IFREG:
			err = b.file(p, e)
		case syscall.S_IFLNK:
			if err = os.Symlink(e.target, p); err == nil {
				err = os.Lchown(p, int(e.uid), int(e.gid))
			}
		default:
			if err = syscall.Mknod(p, e.mode, 0); err == nil {
				err = restoreAttrs(p, e)
			}
		}
		if err != nil {
			return fmt.Errorf("rebuilding %s: %w", p, err)
		}
	}
	return nil
}

// file moves the file e names to p and gives it its durable content.
func (b *builder) file(p string, e entry) error {
	if first, ok := b.placed[e.ino]; ok {
		return copyFile(first, p)
	}
	src, ok := b.loc[e.ino]
	if !ok {
		return fmt.Errorf("inode %d is gone", e.ino)
	}
	if err := os.Rename(src, p); err != nil {
		return err
	}
	b.placed[e.ino] = p
	st := b.m.files[e.ino]
	if st == nil {
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(st.size); err != nil {
		return err
	}
	for _, x := range st.saved {
		if _, err := f.WriteAt(x.data, x.off); err != nil {
			return err
		}
	}
	return f.Close()
}

// uncovered returns the parts of [off, end) that no extent covers.
func uncovered(saved []extent, off, end int64) [][2]int64 {
	if off >= end {
		return nil
	}
	gaps := [][2]int64{{off, end}}
	for _, x := range saved {
		xs, xe := x.off, x.off+int64(len(x.data))
		var next [][2]int64
		for _, g := range gaps {
			if xe <= g[0] || xs >= g[1] {
				next = append(next, g)
				continue
			}
			if g[0] < xs {
				next = append(next, [2]int64{g[0], xs})
			}
			if xe < g[1] {
				next = append(next, [2]int64{xe, g[1]})
			}
		}
		gaps = next
	}
	return gaps
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func readEntries(dir string) (map[string]entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]entry, len(des))
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil, err
		}
		e := entry{ino: st.Ino, mode: st.Mode, uid: st.Uid, gid: st.Gid}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if e.target, err = os.Readlink(p); err != nil {
				return nil, err
			}
		}
		out[de.Name()] = e
	}
	return out, nil
}

func restoreAttrs(p string, e entry) error {
	if err := os.Lchown(p, int(e.uid), int(e.gid)); err != nil {
		return err
	}
	return syscall.Chmod(p, e.mode&0o7777)
}

func readFullAt(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := syscall.Pread(fd, buf[n:], off+int64(n))
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, io.ErrUnexpectedEOF
		}
		n += k
	}
	return n, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
