package python

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"sless.kube5s.ru/sless/internal/tempdir"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/runtimes"
)

const (
	// maxCompiledSource is the largest source file compiled ahead; a larger
	// one is compiled by the import that loads it, as before.
	maxCompiledSource = 1 << 20
	// maxPyc bounds a .pyc the compiler answers: it is confined because
	// it parses what users send, and must not make the server allocate
	// without limit either.
	maxPyc = 64 << 20
	// compilerIdle is how long the compiler process waits for the next
	// build before it is stopped.
	compilerIdle = time.Minute
)

// Precompile implements runtime.Precompiler: it writes an unchecked
// hash-based .pyc (PEP 552) beside every Python source of dir outside
// DepsDir (pip compiled those), so that no cold start compiles the code: the
// instances' code directory is read-only, where the import system cannot
// leave what it compiles. A source that does not compile and a __pycache__
// that is not a directory (a symbolic link included) are skipped; a .pyc
// the code brought is replaced. The compiler is one long-lived
// `python -I -S` process (see runtimes/python3.11/compile.py), confined by
// ctx's runtime.Confiner when it has one, that compiles what it is given and
// never runs it; builds take turns with it.
func (p *Provider) Precompile(ctx context.Context, dir string) error {
	sources, err := pythonSources(dir)
	if err != nil || len(sources) == 0 {
		return err
	}
	c := &p.compiler
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		c.idle.Stop()
	}
	if err := c.start(ctx, p); err != nil {
		return err
	}
	defer func() {
		if c.cmd == nil {
			return
		}
		if c.idle == nil {
			c.idle = time.AfterFunc(compilerIdle, c.closeIdle)
		} else {
			c.idle.Reset(compilerIdle)
		}
	}()
	// A compiler stuck on a source must not hold the build past its deadline.
	proc := c.cmd.Process
	stop := context.AfterFunc(ctx, func() { proc.Kill() })
	defer stop()
	for _, src := range sources {
		if err := ctx.Err(); err != nil {
			c.close()
			return err
		}
		pyc, err := c.compile(src)
		if err != nil {
			c.close()
			return fmt.Errorf("compiling %s: %w", relPath(dir, src), err)
		}
		if len(pyc) > 0 {
			if err := writePyc(src, c.tag, pyc); err != nil {
				return fmt.Errorf("writing the bytecode of %s: %w", relPath(dir, src), err)
			}
		}
	}
	return nil
}

// pythonSources lists the regular .py files of dir, outside dir/DepsDir and
// __pycache__ directories, of at most maxCompiledSource bytes.
func pythonSources(dir string) ([]string, error) {
	var sources []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "__pycache__" || path == filepath.Join(dir, DepsDir)):
			return filepath.SkipDir
		case !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".py"):
			return nil
		}
		info, err := d.Info()
		if err == nil && info.Size() <= maxCompiledSource {
			sources = append(sources, path)
		}
		return err
	})
	return sources, err
}

// writePyc writes pyc as the bytecode the import system looks for beside
// src, unless __pycache__ is not a directory. It replaces a .pyc shipped
// with the code: the import system would ignore one that does not match
// the source (a timestamp one from another checkout) and compile again.
func writePyc(src, tag string, pyc []byte) error {
	cache := filepath.Join(filepath.Dir(src), "__pycache__")
	if err := os.Mkdir(cache, 0o755); errors.Is(err, fs.ErrExist) {
		if fi, err := os.Lstat(cache); err != nil || !fi.IsDir() {
			return nil // a file or a symbolic link: the code's own
		}
	} else if err != nil {
		return err
	}
	target := filepath.Join(cache, strings.TrimSuffix(filepath.Base(src), ".py")+"."+tag+".pyc")
	f, err := os.CreateTemp(cache, ".sless-*.pyc")
	if err != nil {
		return err
	}
	_, err = f.Write(pyc)
	err = errors.Join(err, f.Chmod(0o644), f.Close())
	if err == nil {
		// A rename replaces a symbolic link, never what it points to.
		err = os.Rename(f.Name(), target)
	}
	if err != nil {
		os.Remove(f.Name())
		if fi, lerr := os.Lstat(target); lerr == nil && fi.IsDir() {
			return nil // a directory by that name: the code's own
		}
	}
	return err
}

func relPath(dir, path string) string {
	if rel, err := filepath.Rel(dir, path); err == nil {
		return rel
	}
	return filepath.Base(path)
}

// compiler is the process behind Precompile; mu serializes its use.
type compiler struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	release func() // of the confinement
	in      io.WriteCloser
	out     *bufio.Reader
	tag     string      // the interpreter's cache tag, e.g. cpython-311
	idle    *time.Timer // closes the process after compilerIdle without a build
}

// start starts the process unless it runs; c.mu is held.
func (c *compiler) start(ctx context.Context, p *Provider) error {
	if c.cmd != nil {
		return nil
	}
	python, _, err := p.Interpreter(ctx)
	if err != nil {
		return err
	}
	// Not CommandContext: the process outlives the build that starts it.
	cmd := exec.Command(python, "-I", "-S", "-c", string(runtimes.PythonCompiler))
	cmd.Env = []string{}
	cmd.Stderr = io.Discard // SyntaxWarnings
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	release := func() {}
	if conf := runtime.ConfinerFrom(ctx); conf != nil {
		// Its only writable directory is an empty one of its own.
		dir, err := tempdir.Make("", "compile-")
		if err != nil {
			return fmt.Errorf("starting the Python compiler: %w", err)
		}
		cmd.Dir = dir
		confRelease, err := conf.Confine(cmd, dir)
		if err != nil {
			os.Remove(dir)
			return fmt.Errorf("confining the Python compiler: %w", err)
		}
		release = func() { confRelease(); os.RemoveAll(dir) }
	}
	in, err := cmd.StdinPipe()
	if err == nil {
		var stdout io.ReadCloser
		if stdout, err = cmd.StdoutPipe(); err == nil {
			c.out = bufio.NewReader(stdout)
			err = cmd.Start()
		}
	}
	if err != nil {
		release()
		return fmt.Errorf("starting the Python compiler: %w", err)
	}
	c.cmd, c.in, c.release = cmd, in, release
	tag, err := c.out.ReadString('\n')
	if err != nil {
		c.close()
		return fmt.Errorf("starting the Python compiler: %w", err)
	}
	c.tag = strings.TrimSpace(tag)
	return nil
}

// compile sends one source and returns the answer; c.mu is held.
func (c *compiler) compile(src string) ([]byte, error) {
	source, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], uint32(len(source)))
	if _, err := c.in.Write(head[:]); err != nil {
		return nil, err
	}
	if _, err := c.in.Write(source); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c.out, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxPyc {
		return nil, fmt.Errorf("the compiler answered %d bytes, more than the limit of %d", n, maxPyc)
	}
	pyc := make([]byte, n)
	_, err = io.ReadFull(c.out, pyc)
	return pyc, err
}

// close ends the process, if it runs; the next Precompile starts another.
// c.mu is held.
func (c *compiler) close() {
	if c.cmd == nil {
		return
	}
	c.in.Close()
	c.cmd.Process.Kill()
	c.cmd.Wait()
	c.release()
	c.cmd = nil
}

// closeIdle ends the process after compilerIdle without a build.
func (c *compiler) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.close()
}
