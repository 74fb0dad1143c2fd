package testenv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvRabbitMQURL names the variable holding the RabbitMQ broker for tests,
// as an amqp:// URL with credentials; its vhost is ignored, since each test
// gets a vhost of its own.
const EnvRabbitMQURL = "SLESS_TEST_RABBITMQ_URL"

// DefaultRabbitMQURL is used when SLESS_TEST_RABBITMQ_URL is empty: the
// broker of the development and CI machines, with its default user.
const DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// rabbitmqctlTimeout bounds one rabbitmqctl command: each starts an Erlang
// VM, about a second; the margin is for loaded CI machines.
const rabbitmqctlTimeout = 30 * time.Second

// RabbitMQVhost is a virtual host of the test broker that belongs to one
// test, so that its queues and a forced close of its connections touch no
// other test.
type RabbitMQVhost struct {
	// Name is the vhost's name.
	Name string
	// URL is the amqp:// URL of the vhost, with the credentials of
	// SLESS_TEST_RABBITMQ_URL.
	URL string
}

// RabbitMQ creates a vhost for t on the test broker, gives the URL's user
// every permission on it, and deletes it, with everything in it, when t
// ends. The vhost is managed with rabbitmqctl, which must control the
// broker of the URL: it runs on the broker's machine, as root or as the
// broker's user. A broker that cannot be reached, or a missing or
// powerless rabbitmqctl, makes the test Unavailable.
func RabbitMQ(t testing.TB) RabbitMQVhost {
	t.Helper()
	raw := cmp.Or(os.Getenv(EnvRabbitMQURL), DefaultRabbitMQURL)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("%s is not an amqp:// URL with a host", EnvRabbitMQURL)
	}
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		Unavailable(t, "RabbitMQ: rabbitmqctl, needed to make vhosts for tests, is not installed: %v", err)
	}
	if err := reachable(u); err != nil {
		Unavailable(t, "RabbitMQ at %s (from %s) is unreachable: %v", u.Redacted(), EnvRabbitMQURL, err)
	}
	name := "sless-test-" + randomHex(6)
	if out, err := rabbitmqctl("add_vhost", name); err != nil {
		Unavailable(t, "RabbitMQ at %s: rabbitmqctl cannot add a vhost (is this the broker's machine, and are we root?): %v\n%s", u.Redacted(), err, out)
	}
	t.Cleanup(func() {
		// Deleting the vhost closes its connections too.
		if out, err := rabbitmqctl("delete_vhost", name); err != nil {
			t.Errorf("delete RabbitMQ vhost %s: %v\n%s", name, err, out)
		}
	})
	user := cmp.Or(u.User.Username(), "guest")
	if out, err := rabbitmqctl("set_permissions", "-p", name, user, ".*", ".*", ".*"); err != nil {
		t.Fatalf("give %s the permissions on RabbitMQ vhost %s: %v\n%s", user, name, err, out)
	}
	u.Path, u.RawPath = "/"+name, ""
	return RabbitMQVhost{Name: name, URL: u.String()}
}

// CloseConnections force-closes every client connection of the vhost, as a
// broker restart or an operator would, with reason as the broker's close
// reason. It returns an error instead of failing a test so that fakes can
// call it from their own goroutines.
func (v RabbitMQVhost) CloseConnections(reason string) error {
	if out, err := rabbitmqctl("close_all_connections", "--vhost", v.Name, reason); err != nil {
		return fmt.Errorf("close the connections of RabbitMQ vhost %s: %w\n%s", v.Name, err, out)
	}
	return nil
}

// QueueCounts returns how many messages of the vhost's queue wait for a
// consumer (ready) and how many are delivered but not acknowledged yet
// (unacked), as the queue itself counts them at the time of the call,
// unlike a passive declare, which counts only the ready ones.
func (v RabbitMQVhost) QueueCounts(queue string) (ready, unacked int, err error) {
	return queueCounts("rabbitmqctl", nil, v.Name, queue)
}

// queueCounts lists the queue of vhost with the rabbitmqctl ctl run in env.
func queueCounts(ctl string, env []string, vhost, queue string) (ready, unacked int, err error) {
	out, err := rabbitmqctlIn(ctl, env, "list_queues", "-p", vhost, "--no-table-headers", "--silent",
		"name", "messages_ready", "messages_unacknowledged")
	if err != nil {
		return 0, 0, fmt.Errorf("list the queues of RabbitMQ vhost %s: %w\n%s", vhost, err, out)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 || f[0] != queue {
			continue
		}
		if ready, err = strconv.Atoi(f[1]); err == nil {
			unacked, err = strconv.Atoi(f[2])
		}
		if err != nil {
			return 0, 0, fmt.Errorf("list the queues of RabbitMQ vhost %s: unexpected line %q", vhost, line)
		}
		return ready, unacked, nil
	}
	return 0, 0, fmt.Errorf("RabbitMQ vhost %s has no queue %q", vhost, queue)
}

// ConnectionNames returns the names that the vhost's client connections
// gave themselves (the connection_name client property), "" for a
// connection without one. rabbitmqctl lists the connections of every
// vhost, so those of others are left out, and so are connections still in
// their handshake, whose vhost is not known yet.
func (v RabbitMQVhost) ConnectionNames() ([]string, error) {
	out, err := rabbitmqctl("list_connections", "--silent", "--formatter", "json", "vhost", "client_properties")
	if err != nil {
		return nil, fmt.Errorf("list the connections of RabbitMQ vhost %s: %w\n%s", v.Name, err, out)
	}
	var conns []struct {
		Vhost            any             `json:"vhost"` // a string, or "none" in the handshake
		ClientProperties json.RawMessage `json:"client_properties"`
	}
	if err := json.Unmarshal(out, &conns); err != nil {
		return nil, fmt.Errorf("list the connections of RabbitMQ vhost %s: %w\n%s", v.Name, err, out)
	}
	names := make([]string, 0, len(conns))
	for _, c := range conns {
		if c.Vhost != v.Name {
			continue
		}
		// Each property is a [name, type, value] triple.
		var props [][]any
		if json.Unmarshal(c.ClientProperties, &props) != nil {
			props = nil
		}
		var name string
		for _, p := range props {
			if len(p) == 3 && p[0] == "connection_name" {
				name, _ = p[2].(string)
			}
		}
		names = append(names, name)
	}
	return names, nil
}

// reachable checks that something listens at the broker's address, so that
// a missing broker skips the test quickly.
func reachable(u *url.URL) error {
	port := cmp.Or(u.Port(), "5672")
	if u.Scheme == "amqps" && u.Port() == "" {
		port = "5671"
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 5*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// rabbitmqctl runs rabbitmqctl with args against the test broker and
// returns its combined output.
func rabbitmqctl(args ...string) ([]byte, error) {
	return rabbitmqctlIn("rabbitmqctl", nil, args...)
}

// rabbitmqctlIn runs the rabbitmqctl ctl with args in env (nil: this
// process's), which names the node and the cookie, and returns its combined
// output.
func rabbitmqctlIn(ctl string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rabbitmqctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctl, args...)
	cmd.Env = env
	return cmd.CombinedOutput()
}
