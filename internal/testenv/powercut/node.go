package powercut

import (
	"context"
	"math"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node that tells the model about every change before
// it makes it. Changes run one at a time under the model's lock, so the
// model and the backing directory always agree.
type node struct {
	fs.LoopbackNode
	m *model
}

var (
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// backing returns the node's path in the backing directory.
func (n *node) backing() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	dir := n.backing()
	if err := n.m.recordDir(dir); err != nil {
		return nil, nil, 0, errno(err)
	}
	p := filepath.Join(dir, name)
	var st syscall.Stat_t
	existed := syscall.Lstat(p, &st) == nil
	if existed && flags&syscall.O_TRUNC != 0 && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		if err := n.m.beforeWritePath(p, 0, math.MaxInt64); err != nil {
			return nil, nil, 0, errno(err)
		}
	}
	ch, fh, fuseFlags, e := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	f, e := n.wrap(fh)
	if e != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, nil, 0, e
	}
	if !existed {
		n.m.created(f.ino)
	}
	return ch, f, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if flags&syscall.O_TRUNC != 0 {
		if err := n.m.beforeWritePath(n.backing(), 0, math.MaxInt64); err != nil {
			return nil, 0, errno(err)
		}
	}
	fh, fuseFlags, e := n.LoopbackNode.Open(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	f, e := n.wrap(fh)
	if e != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, 0, e
	}
	return f, fuseFlags, 0
}

// wrap turns the loopback's file handle into one that tells the model
// about writes and fsyncs.
func (n *node) wrap(fh fs.FileHandle) (*file, syscall.Errno) {
	lf := fh.(*fs.LoopbackFile)
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, errno(err)
	}
	return &file{lf: lf, fd: fd, ino: st.Ino, m: n.m}, 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, e := n.LoopbackNode.OpendirHandle(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{inner: fh, n: n}, fuseFlags, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	dir := n.backing()
	if err := n.m.recordDir(dir); err != nil {
		return nil, errno(err)
	}
	ch, e := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if e != 0 {
		return nil, e
	}
	ino, err := inode(filepath.Join(dir, name))
	if err != nil {
		return nil, errno(err)
	}
	n.m.mkdired(ino)
	return ch, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if err := n.m.recordDir(n.backing()); err != nil {
		return nil, errno(err)
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if err := n.m.recordDir(n.backing()); err != nil {
		return nil, errno(err)
	}
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

// Link refuses: the model keeps one directory entry per file.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Tmpfile refuses (callers fall back to a named file): a file created
// with O_TMPFILE is named later with link(2), which Link refuses.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	dir := n.backing()
	if err := n.m.recordDir(dir); err != nil {
		return errno(err)
	}
	p := filepath.Join(dir, name)
	if err := n.buryFile(p); err != nil {
		return errno(err)
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

// buryFile keeps the inode of the regular file at p, if there is one.
func (n *node) buryFile(p string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil // the operation reports a missing name itself
	}
	return n.m.bury(p, st.Ino)
}

// Rmdir moves the empty directory to the graveyard instead of removing
// it, so that its inode number is not reused while the model names it.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	dir := n.backing()
	if err := n.m.recordDir(dir); err != nil {
		return errno(err)
	}
	p := filepath.Join(dir, name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return errno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	if err := n.m.recordDir(p); err != nil {
		return errno(err)
	}
	entries, err := readEntries(p)
	if err != nil {
		return errno(err)
	}
	if len(entries) > 0 {
		return syscall.ENOTEMPTY
	}
	return errno(syscall.Rename(p, filepath.Join(n.m.grave, "d"+strconv.FormatUint(st.Ino, 10))))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	for _, dir := range []string{n.backing(), np.backing()} {
		if err := n.m.recordDir(dir); err != nil {
			return errno(err)
		}
	}
	if err := n.buryFile(filepath.Join(np.backing(), newName)); err != nil {
		return errno(err)
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		var err error
		if f, ok := fh.(*file); ok {
			err = n.m.beforeWrite(f.ino, f.fd, int64(size), math.MaxInt64)
		} else {
			err = n.m.beforeWritePath(n.backing(), int64(size), math.MaxInt64)
		}
		if err != nil {
			return errno(err)
		}
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// CopyFileRange refuses, so that the kernel copies with reads and writes,
// which the model sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// file is an open file: the loopback's, with writes and fsyncs told to the
// model. It offers no passthrough fd, so every write reaches Write.
type file struct {
	lf  *fs.LoopbackFile
	fd  int
	ino uint64
	m   *model
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileWritever  = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
)

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.m.beforeWrite(f.ino, f.fd, off, off+int64(len(data))); err != nil {
		return 0, errno(err)
	}
	return f.lf.Write(ctx, data, off)
}

func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	var joined []byte
	for _, d := range data {
		joined = append(joined, d...)
	}
	return f.Write(ctx, joined, off)
}

// Fsync makes the file's content durable in the model; the backing file
// is not fsynced (the machine does not lose power, the model does).
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return errno(f.m.synced(f.ino, f.fd))
}

func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

// Setattr changes the file; node.Setattr told the model.
func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.m.beforeWrite(f.ino, f.fd, int64(off), int64(off+size)); err != nil {
		return errno(err)
	}
	return f.lf.Allocate(ctx, off, size, mode)
}

// dirHandle is an open directory: the loopback's, with fsync told to the
// model.
type dirHandle struct {
	inner fs.FileHandle
	n     *node
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.inner.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.inner.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

// Fsyncdir makes the directory's entries durable in the model.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.n.m.mu.Lock()
	defer d.n.m.mu.Unlock()
	return errno(d.n.m.syncDir(d.n.backing()))
}
