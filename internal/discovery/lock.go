package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is locked (flock) by the server that uses the data directory, for
// as long as its process lives, and holds that server's Holder. The kernel
// releases the lock when the process dies, however it dies, so a held lock
// means a running server. The file itself stays: deleting a locked file
// would let a second server lock a new one.
const LockFile = "server.lock"

// Holder says which server holds a data directory.
type Holder struct {
	PID    int    `json:"pid"`
	Listen string `json:"listen"`
}

// ErrInUse is wrapped by Lock's error when another server holds the data
// directory.
var ErrInUse = errors.New("the data directory is in use by another sless server")

// Lock is a held data directory.
type Lock struct {
	f *os.File
	// Stale is the discovery file that a server which did not stop (killed)
	// left behind; Lock removed it. Nil when there was none.
	Stale *Info
}

// lockRetry is how long Lock keeps trying while the lock is taken: a CLI
// that checks whether a server runs (Running) holds it for an instant.
const lockRetry = 500 * time.Millisecond

// TakeLock makes the calling process the one server of dataDir: it locks
// LockFile and records holder in it, and removes the discovery file of a
// predecessor that was killed (its lock is gone, its file is not). When
// another server holds dataDir the error wraps ErrInUse and names that
// server. The lock lasts until Unlock or the end of the process; the file is
// opened close-on-exec, so instances and builds do not inherit it.
func TakeLock(dataDir string, holder Holder) (*Lock, error) {
	path := filepath.Join(dataDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data directory's lock: %w", err)
	}
	deadline := time.Now().Add(lockRetry)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking the data directory: %w", err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, inUse(dataDir, path)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := &Lock{f: f}
	if info, err := readInfo(dataDir); err == nil {
		l.Stale = &info
	}
	if err := os.Remove(filepath.Join(dataDir, EndpointFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.Unlock()
		return nil, fmt.Errorf("removing a dead server's discovery file: %w", err)
	}
	data, _ := json.Marshal(holder)
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(append(data, '\n'), 0)
	}
	if err != nil {
		l.Unlock()
		return nil, fmt.Errorf("recording the data directory's holder: %w", err)
	}
	return l, nil
}

// inUse is the error for a data directory another server holds, naming it
// when its lock file says who it is, with the endpoint it serves once it
// published one.
func inUse(dataDir, path string) error {
	var h Holder
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &h) != nil || h.PID == 0 {
		return fmt.Errorf("%w (%s): stop it first, or give this server another --data-dir", ErrInUse, dataDir)
	}
	where := "listening on " + h.Listen
	if info, err := readInfo(dataDir); err == nil && info.PID == h.PID {
		where = "serving " + info.Endpoint
	}
	return fmt.Errorf("%w (%s): pid %d, %s; stop it first, or give this server another --data-dir", ErrInUse, dataDir, h.PID, where)
}

// Unlock releases the data directory. It is safe to call more than once.
func (l *Lock) Unlock() {
	if l.f != nil {
		l.f.Close() // closing the last descriptor releases the flock
		l.f = nil
	}
}

// Running reports whether a server holds dataDir. A lock file that cannot be
// opened counts as held: its server may predate the lock.
func Running(dataDir string) bool {
	f, err := os.Open(filepath.Join(dataDir, LockFile))
	if err != nil {
		return true
	}
	defer f.Close()
	// A shared lock taken and dropped at once; a server starting at that
	// instant retries (lockRetry).
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil
}
