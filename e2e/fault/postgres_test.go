package fault

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sless.kube5s.ru/sless/internal/testenv"
)

// cluster is a private PostgreSQL cluster that a test may stop and start.
type cluster struct {
	t    *testing.T
	bin  string
	dir  string
	port string
	cred *syscall.Credential
}

// newCluster initializes and starts a private cluster, removed when t ends.
// As root it runs as the postgres user, since PostgreSQL refuses root.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		testenv.Unavailable(t, "no initdb under /usr/lib/postgresql/*/bin")
	}
	c := &cluster{t: t, bin: filepath.Dir(bins[len(bins)-1]), port: testenv.FreePort(t)}
	dir, err := os.MkdirTemp("", "sless-fault-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Unavailable(t, "running PostgreSQL as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.run("initdb", "-D", c.data(), "-A", "trust", "-U", "postgres", "--no-sync")
	c.start()
	t.Cleanup(func() { c.pgctl("stop", "-m", "immediate") })
	c.psql("CREATE DATABASE sless")
	return c
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

// URL is the cluster's database for sless.
func (c *cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%s/sless?sslmode=disable", c.port)
}

func (c *cluster) run(name string, args ...string) {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func (c *cluster) pgctl(args ...string) {
	c.t.Helper()
	c.run("pg_ctl", append([]string{"-D", c.data(), "-w", "-t", "120"}, args...)...)
}

// start starts the cluster on its port, listening on loopback only.
func (c *cluster) start() {
	c.t.Helper()
	c.pgctl("start", "-l", filepath.Join(c.dir, "log"),
		"-o", fmt.Sprintf("-p %s -c listen_addresses=127.0.0.1 -k %s -c fsync=off", c.port, c.dir))
}

// stop stops the cluster at once, as a crash of the database would.
func (c *cluster) stop() {
	c.t.Helper()
	c.pgctl("stop", "-m", "immediate")
}

func (c *cluster) psql(sql string) {
	c.t.Helper()
	c.run("psql", "-h", "127.0.0.1", "-p", c.port, "-U", "postgres", "-d", "postgres", "-c", sql)
}

// waitDown waits until the cluster refuses connections.
func (c *cluster) waitDown(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "PostgreSQL to be down", func() bool {
		cmd := exec.Command(filepath.Join(c.bin, "pg_isready"), "-h", "127.0.0.1", "-p", c.port)
		return cmd.Run() != nil
	})
}
