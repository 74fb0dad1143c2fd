package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitmqNodeTimeout bounds a private node's boot (about 5 s on an idle
// machine, a minute on a loaded one) and its shutdown.
const rabbitmqNodeTimeout = 3 * time.Minute

// rabbitmqServerScripts are where rabbitmq-server is looked for: the
// script itself first, since the one on the PATH of Debian's package
// switches to the rabbitmq user, who cannot use a test's temporary
// directory.
var rabbitmqServerScripts = []string{"/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server"}

// RabbitMQNode is a RabbitMQ broker of one test's own, which the test may
// stop and start again (the shared broker must not be restarted). It keeps
// its data across restarts, as a restarted production broker does: durable
// queues and persistent messages survive.
type RabbitMQNode struct {
	// URL is the amqp:// URL of the node's default vhost, as guest.
	URL string

	t      testing.TB
	script string
	env    []string
	// proc is the running node, nil while it is stopped.
	proc *process
	// logs has the output of every start.
	logs *SyncBuffer
}

// StartRabbitMQNode starts a RabbitMQ node in a temporary directory and
// stops it when t ends. The node is named uniquely, listens on loopback
// ports of its own (AMQP and Erlang distribution), has a cookie of its own
// and reads none of the machine's RabbitMQ configuration; it registers
// with the machine's epmd, as any node does, which other nodes do not
// notice. A missing rabbitmq-server makes t Unavailable.
func StartRabbitMQNode(t testing.TB) *RabbitMQNode {
	t.Helper()
	script := findRabbitMQServer()
	if script == "" {
		Unavailable(t, "RabbitMQ: rabbitmq-server, needed to start a broker of the test's own, is not installed")
	}
	dir := t.TempDir()
	amqpPort, distPort := FreePort(t), FreePort(t)
	files := map[string]string{
		"home/.erlang.cookie": randomHex(20),
		"rabbitmq-env.conf":   "",
		"rabbitmq.conf":       "listeners.tcp.default = 127.0.0.1:" + amqpPort + "\n",
		"enabled_plugins":     "[].\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		// Erlang refuses a cookie that others can read.
		if err := os.WriteFile(path, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	n := &RabbitMQNode{
		URL:    "amqp://guest:guest@127.0.0.1:" + amqpPort + "/",
		t:      t,
		script: script,
		logs:   &SyncBuffer{},
		env: append(withoutRabbitMQEnv(os.Environ()),
			"HOME="+filepath.Join(dir, "home"),
			"RABBITMQ_NODENAME=sless-test-"+randomHex(6)+"@localhost",
			"RABBITMQ_DIST_PORT="+distPort,
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
			"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
			"ERL_EPMD_ADDRESS=127.0.0.1",
			"ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}",
		),
	}
	t.Cleanup(func() {
		if n.proc != nil {
			if err := n.stop(); err != nil {
				t.Errorf("stop the RabbitMQ node: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("RabbitMQ node output:\n%s", n.logs)
		}
	})
	n.Start()
	return n
}

// Start starts the stopped node and waits until it accepts connections.
func (n *RabbitMQNode) Start() {
	n.t.Helper()
	if n.proc != nil {
		n.t.Fatal("the RabbitMQ node is running already")
	}
	begin := time.Now()
	cmd := exec.Command(n.script)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	proc, err := startProcess(cmd)
	if err != nil {
		n.t.Fatalf("start the RabbitMQ node: %v", err)
	}
	n.proc = proc
	deadline := time.Now().Add(rabbitmqNodeTimeout)
	for {
		conn, err := amqp.Dial(n.URL)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the RabbitMQ node is not ready after %v: %v\n%s", rabbitmqNodeTimeout, err, n.logs)
		}
		select {
		case <-proc.exited:
			n.t.Fatalf("the RabbitMQ node exited during startup: %v\n%s", proc.err, n.logs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.t.Logf("RabbitMQ node ready in %v", time.Since(begin).Round(time.Millisecond))
}

// Stop stops the node as an operator's restart does (SIGTERM: connections
// are closed, unacknowledged messages go back to their queues) and waits
// until it has exited.
func (n *RabbitMQNode) Stop() {
	n.t.Helper()
	if err := n.stop(); err != nil {
		n.t.Fatalf("stop the RabbitMQ node: %v", err)
	}
}

// Restart stops the node and starts it again on the same data.
func (n *RabbitMQNode) Restart() {
	n.t.Helper()
	n.Stop()
	n.Start()
}

// QueueCounts is RabbitMQVhost.QueueCounts for the node's default vhost.
func (n *RabbitMQNode) QueueCounts(queue string) (ready, unacked int, err error) {
	// The rabbitmqctl next to the server script: the one on the PATH may
	// switch users, losing the environment that names the node.
	return queueCounts(filepath.Join(filepath.Dir(n.script), "rabbitmqctl"), n.env, "/", queue)
}

// stop stops the node, if it runs.
func (n *RabbitMQNode) stop() error {
	if n.proc == nil {
		return errors.New("it is not running")
	}
	// The script passes SIGTERM on to the node and waits for it.
	proc := n.proc
	n.proc = nil
	return proc.stopWithin(rabbitmqNodeTimeout)
}

// findRabbitMQServer returns the first of rabbitmqServerScripts that
// exists, or "".
func findRabbitMQServer() string {
	for _, s := range rabbitmqServerScripts {
		if path, err := exec.LookPath(s); err == nil {
			return path
		}
	}
	return ""
}

// withoutRabbitMQEnv is env without RabbitMQ's and Erlang's settings,
// which would point the node at the machine's broker.
func withoutRabbitMQEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "ERL_") {
			out = append(out, kv)
		}
	}
	return out
}
