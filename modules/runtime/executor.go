package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"sless.kube5s.ru/sless/modules/meta"
)

// Errors of Instances.Acquire, returned wrapped.
var (
	// ErrNotDeployed: the executor runs no version of the function.
	ErrNotDeployed = errors.New("function is not deployed")
	// ErrOverloaded: every instance is busy and no more may start, and the
	// wait queue is full or no capacity freed up within the function's
	// timeout.
	ErrOverloaded = errors.New("function is overloaded")
	// ErrStart: an instance could not be started (the handler does not load,
	// the interpreter is missing); its *Error's Public message says why.
	ErrStart = errors.New("function instance failed to start")
)

// ErrUnavailable is returned (wrapped) by Instances.Acquire and Warm when the
// executor cannot run invocations at all, whatever the function; its
// *Error's Public message says why.
var ErrUnavailable = errors.New("function instances are not available")

// ErrUnsupported is returned (wrapped) by Deployer.Deploy when the executor
// cannot run the target as specified (public egress where it cannot be
// enforced); its *Error's Public message says why. The target is not
// deployed.
var ErrUnsupported = errors.New("this server cannot run the function as specified")

// Target is one deployable version of a function: what an executor needs to
// run its instances.
type Target struct {
	// Namespace and Name are the function's (Key).
	Namespace, Name string
	// Version identifies this version; a Deploy with another Version drains
	// the instances of the previous one.
	Version string
	Runtime string
	// Artifact is the builder's reference (a directory in the embedded mode).
	Artifact string
	Handler  string
	Env      map[string]string
	// Timeout bounds one invocation.
	Timeout time.Duration
	// MemoryMB limits one instance's memory.
	MemoryMB int
	// MinInstances are kept running; MaxInstances are the most that run.
	MinInstances, MaxInstances int
	// Concurrency is the most invocations one instance serves at once.
	Concurrency int
	// Egress is what the instances may reach over the network; empty is
	// EgressAll.
	Egress Egress
	// Suspended scales the function to zero in place: idle instances stop
	// now and none are kept warm (MinInstances is ignored). Invocations that
	// still arrive (jobs, other triggers) start instances as usual.
	Suspended bool
}

// Key returns the key of t's function.
func (t *Target) Key() meta.Key { return meta.Key{Namespace: t.Namespace, Name: t.Name} }

// Egress says what a function's instances may reach over the network.
type Egress string

// The egress settings.
const (
	// EgressAll leaves the network open: the default.
	EgressAll Egress = "all"
	// EgressPublic denies the addresses that reach the host or a private
	// network (loopback, private, link-local, shared, multicast and
	// reserved ranges, the host's own addresses) but DNS to the host's name
	// servers, and abstract unix sockets of other processes. An executor
	// that cannot enforce it refuses to deploy with ErrUnsupported.
	EgressPublic Egress = "public"
)

// ParseEgress parses an egress setting.
func ParseEgress(s string) (Egress, error) {
	switch e := Egress(s); e {
	case EgressAll, EgressPublic:
		return e, nil
	}
	return "", fmt.Errorf("egress %q: want %s or %s", s, EgressAll, EgressPublic)
}

// DeniedPrefixes are the IPv4 and IPv6 ranges that EgressPublic denies
// everywhere: what reaches the host itself, a private or link-local network
// (where cloud metadata services answer), or no single host at all. An
// executor also denies the IPv4 ranges in their IPv4-mapped (::ffff:0:0/96),
// NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms, and what else reaches its
// own hosts. The documentation ranges (192.0.2.0/24, 198.51.100.0/24,
// 203.0.113.0/24, 2001:db8::/32) are not denied: they are assigned to
// nobody, so denying them protects nothing.
var DeniedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network": 0.0.0.0 reaches the host
	netip.MustParsePrefix("10.0.0.0/8"),     // private
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (carrier-grade NAT, VPN overlays)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking, used by proxies for internal addresses
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	netip.MustParsePrefix("::/96"),          // unspecified, loopback, IPv4-compatible
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("fc00::/7"),       // unique local
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// An executor runs function instances: local processes in the embedded
// mode, Deployments in the cluster mode. It has two sides, which the cluster
// mode runs in different places: the control plane's Deployer (the functions
// reconciler's) and the data plane's Instances (/fn's, cron's and jobs').
// Each mode implements both; implementations are safe for concurrent use.

// Deployer is the control-plane side of an executor.
type Deployer interface {
	// Deploy makes t the serving version of its function and reports how
	// far that got. It is idempotent and never waits for instances:
	// instances of an older version are drained in the background,
	// MinInstances are started in the background, and a rollout that is
	// not serving yet is reported so, to be asked about again. A target the
	// executor cannot run fails with ErrUnsupported.
	Deploy(ctx context.Context, t Target) (Rollout, error)
	// Undeploy stops serving the function; in-flight invocations finish,
	// waiting ones fail with ErrNotDeployed. Undeploying an unknown function
	// is not an error.
	Undeploy(ctx context.Context, key meta.Key) error
}

// Rollout is how far a Deploy got.
type Rollout struct {
	// Ready reports that the target's version serves invocations: they
	// reach it (an instance may still have to start for them).
	Ready bool
	// Waiting says what the rollout waits for while not Ready, in the
	// user's terms ("1 of 2 instances started").
	Waiting string
}

// Instances is the data-plane side of an executor.
type Instances interface {
	// Acquire reserves capacity for one invocation of the function on an
	// instance, starting one (a cold start) when needed and allowed, or
	// waiting in a bounded queue. The caller must Release the lease.
	Acquire(ctx context.Context, key meta.Key) (Lease, error)
	// Warm starts an instance of the function in the background unless one
	// is free or starting, so that the invocation expected at until finds it
	// warm: the function keeps an instance running until then, past the
	// idle timeout. It fails with ErrNotDeployed for a function that is not
	// deployed.
	Warm(ctx context.Context, key meta.Key, until time.Time) error
}

// Lease is the right to send one invocation to one instance.
type Lease interface {
	// Target is the version the instance runs.
	Target() *Target
	// ColdStart is how long starting the instance for this invocation took,
	// zero when a warm instance was used. A start may end in Do (the local
	// executor's last step of a start, the handler's load, is answered
	// behind the invocation): until then ColdStart is its time so far, and
	// it is final once Do returns or calls inv.BeforeWrite.
	ColdStart() time.Duration
	// Do sends the invocation and writes the instance's response to w (its
	// status, headers and body; the protocol's X-Sless-* response headers
	// are consumed, not copied). It returns what the platform records. A
	// failure before anything was written to w is returned as an error
	// (ErrStart for a start that ends in Do, ErrTimeout, ErrCrashed,
	// ErrResponseTooLarge, or a *BodyError for a failure reading
	// inv.Request.Body); after that, Result.Err says what happened. The
	// invocation's timeout counts from the end of its start.
	// Cancelling ctx ends the invocation as its deadline does (the handler
	// may still be running, so its instance is recycled).
	Do(ctx context.Context, inv *Invocation, w http.ResponseWriter) (Result, error)
	// Release returns the capacity; call it exactly once, after Do.
	Release()
}

// Errors of Lease.Do, returned wrapped.
var (
	// ErrTimeout: the invocation's deadline passed; the instance is recycled.
	ErrTimeout = errors.New("function timed out")
	// ErrCrashed: the instance closed the connection or exited; it is replaced.
	ErrCrashed = errors.New("function instance crashed")
	// ErrNotSent comes with ErrCrashed when the instance did not take the
	// invocation: it was gone before anything was sent (its connection was
	// closed or refused), or it closed the connection without reading the
	// request. The handler did not run, so the caller may invoke again on
	// another instance; Result.RequestBytes > 0 says that the request body
	// was read, and must be given again.
	ErrNotSent = errors.New("the invocation was not sent")
	// ErrResponseTooLarge: the response's body exceeds the invocation's
	// MaxResponseBytes, or its headers the executor's limit; the instance is
	// fine. The wrapping message says which, in the user's terms.
	ErrResponseTooLarge = errors.New("response too large")
)

// Invocation is one request to a function instance.
type Invocation struct {
	// ID is the invocation id.
	ID string
	// Request is the client's request: method, path below the function,
	// query, headers and body. Its context is not used: the deadline is.
	Request *http.Request
	// Path is the path below the function, escaped, starting with "/".
	Path string
	// Deadline is when the invocation times out.
	Deadline time.Time
	// Trigger is the JSON of the X-Sless-Trigger header.
	Trigger []byte
	// Traceparent, when set, is sent as the traceparent header in place of
	// the client's: the invocation's W3C trace context.
	Traceparent string
	// MaxResponseBytes, when positive, caps the response body: a longer
	// declared body fails Do with ErrResponseTooLarge before anything is
	// written, a longer undeclared one is cut at the limit with that error in
	// Result.Err.
	MaxResponseBytes int64
	// BeforeWrite, when set, is called with the result so far (status,
	// handler time, logs, error) after the instance's response headers were
	// copied into the ResponseWriter and before its WriteHeader, so that the
	// caller can add headers of its own.
	BeforeWrite func(res *Result)
}

// Result is what an instance reported about one invocation.
type Result struct {
	StatusCode int
	// RequestBytes and ResponseBytes count bodies.
	RequestBytes, ResponseBytes int64
	// Handler is the time the handler took, as the wrapper measured it.
	Handler time.Duration
	// Logs is what the handler printed, as the wrapper captured it.
	Logs string
	// Error is "<type>: <message>" when the handler raised.
	Error string
	// Err is a failure after the response started (the client went away,
	// the instance died mid-body).
	Err error
}

// InstanceStats is a snapshot of one function's instances as an executor's
// data plane sees them, for metrics.
type InstanceStats struct {
	Key meta.Key
	// Starting, Idle and Busy count the instances by state: being started
	// (a cold start or a prewarm), serving no invocation, serving at least
	// one.
	Starting, Idle, Busy int
	// Queued counts the invocations waiting for capacity.
	Queued int
	// MemoryKills counts the instances killed for exceeding their memory
	// limit, Restarts the instances replaced because they crashed, were
	// killed or timed out, since the function was deployed.
	MemoryKills, Restarts uint64
}

// StatsReporter is implemented by executors whose data plane reports its
// instances. InstanceStats is called at each scrape of the metrics: it
// takes each function's lock briefly and never blocks on an instance.
type StatsReporter interface {
	InstanceStats() []InstanceStats
}

// UndeployNotifier is implemented by executors whose data plane learns that
// a function is no longer deployed (deleted, or left without a build), so
// that what other modules keep per function (metric series) is dropped with
// it. The callbacks run synchronously on the undeploying goroutine and must
// return quickly; register them before the executor starts.
type UndeployNotifier interface {
	OnUndeploy(f func(key meta.Key))
}
