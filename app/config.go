package app

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"sless.kube5s.ru/sless/internal/discovery"
	kanikosettings "sless.kube5s.ru/sless/modules/build/kaniko/settings"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// EnvPrefix starts the environment variable of every setting: the setting
// "data-dir" is read from SLESS_DATA_DIR.
const EnvPrefix = "SLESS_"

// Config is the server's configuration. Every field is a setting that can be
// given as a flag (--data-dir), an environment variable (SLESS_DATA_DIR) or a
// key of the config file (data-dir: ...), in that order of precedence.
type Config struct {
	// Mode is embedded (default: desired state in the database, local
	// builds and instances) or kubernetes (custom resources, controllers
	// in the elected leader, image builds, Deployments; the cluster build
	// only).
	Mode string
	// Kubeconfig is the kubeconfig of the kubernetes mode's API server;
	// default: KUBECONFIG, else ~/.kube/config, else the cluster the server
	// runs in.
	Kubeconfig string
	// LeaderElect elects one replica of the kubernetes mode to run the
	// controllers and trigger runners; default true (false for a single
	// replica only).
	LeaderElect bool
	// LeaderElectionNamespace holds the leader election's Lease; default:
	// the namespace of the server's pod.
	LeaderElectionNamespace string
	// PublicURL is the server's address as users reach it; with it the
	// kubernetes mode writes every function's /fn URL into its Function's
	// status. Default none.
	PublicURL string
	// IngressNamespace is the sless server's namespace, where the
	// kubernetes mode keeps the Ingresses of http triggers (an Ingress
	// routes to Services of its own namespace only); default sless.
	IngressNamespace string
	// IngressService is the sless server's Service in IngressNamespace,
	// whose port named http the Ingresses of http triggers route /fn to;
	// default sless.
	IngressService string
	// InstanceRuntimeClass runs the kubernetes mode's function pods with
	// this RuntimeClass (gVisor, Kata); default none, the cluster's default.
	InstanceRuntimeClass string
	// Listen is the API and /fn address; default 127.0.0.1:8080.
	Listen string
	// DataDir holds the database, blobs, artifacts and the generated token;
	// default $XDG_DATA_HOME/sless or ~/.local/share/sless.
	DataDir string
	// APIToken is the bearer token of the API; default: generated on first
	// start and stored in DataDir/api-token.
	APIToken string
	// DatabaseURL selects the database; default: SQLite file DataDir/sless.db.
	DatabaseURL string
	// BlobURL selects the blob store; default: files under DataDir/blobs.
	BlobURL string
	// S3AccessKey and S3SecretKey are the credentials of an s3:// BlobURL.
	S3AccessKey, S3SecretKey string
	// LogLevel is debug, info, warn or error; default info.
	LogLevel string
	// LogFormat is text or json; default text.
	LogFormat string
	// BuildTimeout bounds one build; default 10m.
	BuildTimeout time.Duration
	// BuildLimits bound uploaded archives; defaults 50 MiB, 250 MiB, 10,000.
	BuildLimits safezip.Limits
	// Builder turns uploads into artifacts: local (the embedded mode's, and
	// its only one: its executor runs directories) or, in the cluster mode,
	// crane (images layered onto the runtime base images; the default there)
	// or kaniko. Default: the mode's.
	Builder string
	// ImageRepository receives the images of the crane and kaniko
	// builders, e.g. registry.example.com/sless/functions; required by them.
	ImageRepository string
	// ImageBaseImages overrides base images, RUNTIME=REF pairs separated by
	// commas; default: <registry of ImageRepository>/sless-runtime-<runtime>:<version>.
	ImageBaseImages string
	// ImageInsecure allows plain HTTP to the registries; default false
	// (loopback registries always may use it with crane).
	ImageInsecure bool
	// ImageDockerConfig is a docker config.json (an image pull secret's
	// .dockerconfigjson) with the registries' credentials; default none.
	ImageDockerConfig string
	// ImagePlatform is the images' platform, linux/amd64 (default) or
	// linux/arm64.
	ImagePlatform string
	// KanikoNamespace runs the kaniko builder's Jobs; default sless-builds.
	KanikoNamespace string
	// KanikoImage is kaniko's executor image, versioned; default
	// kanikosettings.DefaultImage.
	KanikoImage string
	// KanikoFetchImage is an image with curl, which downloads a build's
	// context; default kanikosettings.DefaultFetchImage.
	KanikoFetchImage string
	// KanikoRegistrySecret is a Secret of KanikoNamespace (type
	// kubernetes.io/dockerconfigjson) with the registries' credentials
	// kaniko uses; default none.
	KanikoRegistrySecret string
	// KanikoCPU and KanikoMemory are kaniko's CPU request and memory
	// request and limit; defaults 1 and 2Gi.
	KanikoCPU, KanikoMemory string
	// IdleTimeout stops instances idle this long; default 5m.
	IdleTimeout time.Duration
	// Prestart is the number of generic processes kept ready per runtime;
	// default 1.
	Prestart int
	// QueueDepth bounds the invocations of one function waiting for
	// capacity; default 100.
	QueueDepth int
	// MaxRequestBytes caps invocation request bodies; default 6 MiB.
	MaxRequestBytes int64
	// MaxResultBytes caps invocation response bodies; default 6 MiB.
	MaxResultBytes int64
	// InvocationRetention is how long invocations are kept; default 7 days.
	InvocationRetention time.Duration
	// JournalSync is how often the invocation journal is fsynced: a power
	// loss loses at most this much of the newest records; 0 fsyncs before
	// every answer. Default 100ms.
	JournalSync time.Duration
	// JournalMaxBytes bounds the invocation journal, which grows while the
	// database does not take records; past it /fn refuses invocations.
	// Default 1 GiB.
	JournalMaxBytes int64
	// ServerCPUs is how many CPUs the server's own code runs on at once
	// (GOMAXPROCS); default 0: GOMAXPROCS when set, else half of the CPUs,
	// and every CPU while API writes or many invocations are in flight.
	ServerCPUs int
	// Sandbox is auto, require or off; default auto (see
	// modules/runtime/sandbox).
	Sandbox string
	// SandboxUIDs is the range FIRST-LAST of the uids (and gids) given to
	// instances and dependency installs, one each; default 200000-265535.
	SandboxUIDs string
	// InstanceTmpMB is the size of a confined instance's /tmp; default 64.
	InstanceTmpMB int
	// InstancePids limits the processes and threads of an instance; default
	// 256, plus one per concurrent invocation.
	InstancePids int
	// Zygote is auto (default: fork the instances of the runtimes that can
	// be forked from a zygote per runtime and namespace, where the sandbox
	// runs in the root mode with memory and pids cgroups) or off.
	Zygote string
	// InstanceEgress is the least restricted egress of every instance: all
	// (default: each function has its own) or public (for every function).
	InstanceEgress string
	// AuthWebhookURL, when set, asks this identity service (TokenReview) about
	// the tokens that are neither the server's nor stored; default: none.
	AuthWebhookURL string
	// AuthWebhookToken is sent as the bearer token of each review; default none.
	AuthWebhookToken string
	// AuthWebhookTimeout bounds one review; default 5s.
	AuthWebhookTimeout time.Duration
	// AuthWebhookCacheTTL and AuthWebhookNegativeCacheTTL are how long an
	// acceptance and a refusal are reused; defaults 2m and 10s.
	AuthWebhookCacheTTL, AuthWebhookNegativeCacheTTL time.Duration
	// TraceOTLPURL, when set, is the OTLP/HTTP traces endpoint spans are
	// exported to (http://collector:4318/v1/traces); default: none, no
	// export.
	TraceOTLPURL string
	// TraceOTLPHeaders are sent with every export, NAME=VALUE[,NAME=VALUE...];
	// default none.
	TraceOTLPHeaders string
	// TraceSampleRatio is the share of new traces exported, 0 to 1; default 1.
	TraceSampleRatio float64
	// MetricsPushURL, when set, receives the metrics in the Prometheus text
	// format every MetricsPushInterval (VictoriaMetrics'
	// /api/v1/import/prometheus); default: none, no push.
	MetricsPushURL string
	// MetricsPushInterval is the time between pushes, 1s to 1h; default 15s.
	MetricsPushInterval time.Duration
}

// setting is one configuration value with its flag, variable and file key.
type setting struct {
	name  string
	usage string
	// secret values are never printed.
	secret bool
}

// settings lists every setting; the README's table follows this list.
var settings = []setting{
	{name: "mode", usage: "embedded (desired state in the database, local builds and instances) or kubernetes (custom resources, controllers in the elected leader, image builds, Deployments; the cluster build only)"},
	{name: "kubeconfig", usage: "kubeconfig of the kubernetes mode's API server (default: KUBECONFIG, else ~/.kube/config, else the cluster the server runs in)"},
	{name: "leader-elect", usage: "in the kubernetes mode, elect one replica to run the controllers and trigger runners (false: for a single replica only)"},
	{name: "leader-election-namespace", usage: "namespace of the kubernetes mode's leader election Lease (default: the server's pod's)"},
	{name: "public-url", usage: "the server's address as users reach it, such as https://sless.example.com; the kubernetes mode shows each function's /fn URL in its Function's status (default: none)"},
	{name: "ingress-namespace", usage: "the server's namespace, where the kubernetes mode makes the Ingresses of http triggers that ask for one"},
	{name: "ingress-service", usage: "the server's Service in ingress-namespace, whose port named http the Ingresses of http triggers route /fn to"},
	{name: "instance-runtime-class", usage: "RuntimeClass of the kubernetes mode's function pods, such as gvisor (default: none, the cluster's default runtime)"},
	{name: "listen", usage: "address of the API and of /fn"},
	{name: "data-dir", usage: "directory of the database, blobs, artifacts and generated token (default $XDG_DATA_HOME/sless, else ~/.local/share/sless)"},
	{name: "api-token", usage: "bearer token of the API (default: generated on first start into <data-dir>/api-token)", secret: true},
	{name: "database-url", usage: "postgres://... for PostgreSQL, sqlite:PATH for SQLite (default: SQLite file <data-dir>/sless.db)"},
	{name: "blob-url", usage: "s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=R&insecure=true for S3, file:DIR for files (default: <data-dir>/blobs)"},
	{name: "s3-access-key", usage: "access key of an s3:// blob URL", secret: true},
	{name: "s3-secret-key", usage: "secret key of an s3:// blob URL", secret: true},
	{name: "log-level", usage: "debug, info, warn or error"},
	{name: "log-format", usage: "text or json"},
	{name: "build-timeout", usage: "longest a build (dependency installation) may take"},
	{name: "build-max-zip-bytes", usage: "largest accepted upload"},
	{name: "build-max-extracted-bytes", usage: "largest total size of the files in an upload"},
	{name: "build-max-entries", usage: "most entries an upload may hold"},
	{name: "builder", usage: "what builds uploads: local (the embedded mode's only builder) or, in the cluster mode, crane or kaniko (default: the mode's)"},
	{name: "image-repository", usage: "repository the crane and kaniko builders push function images to, e.g. registry.example.com/sless/functions"},
	{name: "image-base-images", usage: "base images of the crane and kaniko builders, RUNTIME=REF[,RUNTIME=REF...] (default: <registry of image-repository>/sless-runtime-<runtime>:<version>)"},
	{name: "image-insecure", usage: "let the crane and kaniko builders use plain HTTP with the registries (loopback ones always may with crane)"},
	{name: "image-docker-config", usage: "docker config.json with the registries' credentials, as in an image pull secret (default: none)"},
	{name: "image-platform", usage: "platform of the images the crane and kaniko builders make: linux/amd64 or linux/arm64"},
	{name: "kaniko-namespace", usage: "Kubernetes namespace of the kaniko builder's Jobs, which needs the baseline Pod Security profile"},
	{name: "kaniko-image", usage: "kaniko executor image of the kaniko builder, with a version tag or a digest"},
	{name: "kaniko-fetch-image", usage: "image with curl on its PATH that downloads a kaniko build's context, with a version tag or a digest"},
	{name: "kaniko-registry-secret", usage: "Secret of kaniko-namespace, of type kubernetes.io/dockerconfigjson, with the registries' credentials kaniko pushes and pulls with (default: none)"},
	{name: "kaniko-cpu", usage: "CPU request of a kaniko build"},
	{name: "kaniko-memory", usage: "memory request and limit of a kaniko build"},
	{name: "idle-timeout", usage: "instances idle this long stop, down to a function's min_instances"},
	{name: "prestart", usage: "interpreters kept started per runtime in use, so that cold starts skip the interpreter's start (0: off)"},
	{name: "queue-depth", usage: "most invocations of one function that wait for a free instance; more get 503"},
	{name: "max-request-bytes", usage: "largest invocation request body; larger gets 413"},
	{name: "max-result-bytes", usage: "largest invocation response body; larger gets 502"},
	{name: "invocation-retention", usage: "how long invocation records are kept (0: forever)"},
	{name: "journal-sync", usage: "how often the invocation journal is fsynced; a power loss loses at most this much of the newest invocation records (0: fsync before every answer, slower)"},
	{name: "journal-max-bytes", usage: "largest size of the invocation journal, which holds the records the database has not taken yet; beyond it /fn answers 503"},
	{name: "server-cpus", usage: "CPUs the server's own code runs on at once (0: GOMAXPROCS when set, else half of the CPUs, leaving the rest to the instances, and every CPU while API writes or many invocations are in flight)"},
	{name: "sandbox", usage: "confine instances and dependency installs: auto (where the machine allows it), require (refuse to start without), off"},
	{name: "sandbox-uids", usage: "range FIRST-LAST of the uids given to confined processes, one each"},
	{name: "instance-tmp-mb", usage: "size in MiB of a confined instance's private /tmp"},
	{name: "instance-pids", usage: "most processes and threads of an instance (plus one per concurrent invocation)"},
	{name: "zygote", usage: "fork python instances from a zygote per namespace, so that they share the imported interpreter's memory: auto (where the sandbox runs in the root mode with memory and pids cgroups) or off"},
	{name: "instance-egress", usage: "what every instance may reach: all (each function's own egress setting) or public (no loopback or private ranges, for every function; refuses to start where that cannot be enforced)"},
	{name: "auth-webhook-url", usage: "http(s) URL of an identity service that reviews the tokens the server does not know (Kubernetes TokenReview shape; default: none)"},
	{name: "auth-webhook-token", usage: "bearer token sent to the identity service with each review", secret: true},
	{name: "auth-webhook-timeout", usage: "longest the identity service may take to answer; a token it does not answer in time gets 503"},
	{name: "auth-webhook-cache-ttl", usage: "how long the identity service's acceptance of a token is reused"},
	{name: "auth-webhook-negative-cache-ttl", usage: "how long the identity service's refusal of a token is reused"},
	{name: "trace-otlp-url", usage: "OTLP/HTTP traces endpoint to export spans to, with its path, e.g. http://collector:4318/v1/traces (default: none, no export)"},
	{name: "trace-otlp-headers", usage: "headers sent with every span export, NAME=VALUE[,NAME=VALUE...] (an API key of the tracing backend)", secret: true},
	{name: "trace-sample-ratio", usage: "share of new traces exported, 0 to 1 (a request's traceparent decides for its own trace)"},
	{name: "metrics-push-url", usage: "URL the metrics are pushed to in the Prometheus text format, e.g. http://victoriametrics:8428/api/v1/import/prometheus (default: none, no push)", secret: true},
	{name: "metrics-push-interval", usage: "time between pushes of the metrics, 1s to 1h"},
}

// AddFlags registers the settings as flags of fs, writing into cfg, plus
// --config for the config file.
func AddFlags(fs *pflag.FlagSet, cfg *Config) {
	lim := safezip.DefaultLimits()
	*cfg = Config{Mode: "embedded", LeaderElect: true, IngressNamespace: "sless", IngressService: "sless", Listen: "127.0.0.1:8080", LogLevel: "info", LogFormat: "text", BuildTimeout: 10 * time.Minute, BuildLimits: lim,
		IdleTimeout: 5 * time.Minute, Prestart: 1, QueueDepth: 100, MaxRequestBytes: 6 << 20, MaxResultBytes: 6 << 20, InvocationRetention: 7 * 24 * time.Hour,
		ImagePlatform: "linux/amd64", KanikoNamespace: "sless-builds", KanikoImage: kanikosettings.DefaultImage,
		KanikoFetchImage: kanikosettings.DefaultFetchImage, KanikoCPU: kanikosettings.DefaultCPU, KanikoMemory: kanikosettings.DefaultMemory, JournalSync: journal.DefaultSyncInterval, JournalMaxBytes: journal.DefaultMaxBytes,
		Sandbox: "auto", SandboxUIDs: "200000-265535", InstanceTmpMB: 64, InstancePids: 256, InstanceEgress: "all", Zygote: "auto",
		AuthWebhookTimeout: 5 * time.Second, AuthWebhookCacheTTL: 2 * time.Minute, AuthWebhookNegativeCacheTTL: 10 * time.Second,
		TraceSampleRatio: 1, MetricsPushInterval: 15 * time.Second}
	fs.String("config", "", "YAML file of settings, keyed by flag name (env SLESS_CONFIG)")
	vars := map[string]any{
		"mode": &cfg.Mode, "kubeconfig": &cfg.Kubeconfig, "leader-elect": &cfg.LeaderElect,
		"leader-election-namespace": &cfg.LeaderElectionNamespace, "public-url": &cfg.PublicURL,
		"ingress-namespace": &cfg.IngressNamespace, "ingress-service": &cfg.IngressService,
		"instance-runtime-class": &cfg.InstanceRuntimeClass, "listen": &cfg.Listen,
		"data-dir": &cfg.DataDir, "api-token": &cfg.APIToken,
		"database-url": &cfg.DatabaseURL, "blob-url": &cfg.BlobURL,
		"s3-access-key": &cfg.S3AccessKey, "s3-secret-key": &cfg.S3SecretKey,
		"log-level": &cfg.LogLevel, "log-format": &cfg.LogFormat,
		"build-timeout": &cfg.BuildTimeout, "build-max-zip-bytes": &cfg.BuildLimits.MaxCompressedBytes,
		"build-max-extracted-bytes": &cfg.BuildLimits.MaxExtractedBytes, "build-max-entries": &cfg.BuildLimits.MaxEntries,
		"builder": &cfg.Builder, "image-repository": &cfg.ImageRepository, "image-base-images": &cfg.ImageBaseImages,
		"image-insecure": &cfg.ImageInsecure, "image-docker-config": &cfg.ImageDockerConfig, "image-platform": &cfg.ImagePlatform,
		"kaniko-namespace": &cfg.KanikoNamespace, "kaniko-image": &cfg.KanikoImage, "kaniko-fetch-image": &cfg.KanikoFetchImage,
		"kaniko-registry-secret": &cfg.KanikoRegistrySecret, "kaniko-cpu": &cfg.KanikoCPU, "kaniko-memory": &cfg.KanikoMemory,
		"idle-timeout": &cfg.IdleTimeout, "prestart": &cfg.Prestart, "queue-depth": &cfg.QueueDepth,
		"max-request-bytes": &cfg.MaxRequestBytes, "max-result-bytes": &cfg.MaxResultBytes, "invocation-retention": &cfg.InvocationRetention,
		"journal-sync": &cfg.JournalSync, "journal-max-bytes": &cfg.JournalMaxBytes,
		"server-cpus": &cfg.ServerCPUs, "sandbox": &cfg.Sandbox, "sandbox-uids": &cfg.SandboxUIDs,
		"instance-tmp-mb": &cfg.InstanceTmpMB, "instance-pids": &cfg.InstancePids, "instance-egress": &cfg.InstanceEgress, "zygote": &cfg.Zygote,
		"auth-webhook-url": &cfg.AuthWebhookURL, "auth-webhook-token": &cfg.AuthWebhookToken,
		"auth-webhook-timeout": &cfg.AuthWebhookTimeout, "auth-webhook-cache-ttl": &cfg.AuthWebhookCacheTTL,
		"auth-webhook-negative-cache-ttl": &cfg.AuthWebhookNegativeCacheTTL,
		"trace-otlp-url":                  &cfg.TraceOTLPURL, "trace-otlp-headers": &cfg.TraceOTLPHeaders,
		"trace-sample-ratio": &cfg.TraceSampleRatio,
		"metrics-push-url":   &cfg.MetricsPushURL, "metrics-push-interval": &cfg.MetricsPushInterval,
	}
	for _, s := range settings {
		usage := fmt.Sprintf("%s (env %s)", s.usage, envName(s.name))
		switch p := vars[s.name].(type) {
		case *string:
			fs.StringVar(p, s.name, *p, usage)
		case *bool:
			fs.BoolVar(p, s.name, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, s.name, *p, usage)
		case *int:
			fs.IntVar(p, s.name, *p, usage)
		case *int64:
			fs.Var((*byteSize)(p), s.name, usage)
		case *float64:
			fs.Float64Var(p, s.name, *p, usage)
		default:
			panic("app: setting without a variable: " + s.name) // a programming error caught by every test
		}
	}
}

// parseBaseImages parses RUNTIME=REF[,RUNTIME=REF...].
func parseBaseImages(s string) (map[string]string, error) {
	images := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		rt, ref, ok := strings.Cut(pair, "=")
		if !ok || rt == "" || ref == "" {
			return nil, fmt.Errorf("%q is not RUNTIME=REF", pair)
		}
		if _, dup := images[rt]; dup {
			return nil, fmt.Errorf("runtime %s is given twice", rt)
		}
		images[rt] = ref
	}
	return images, nil
}

func envName(setting string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(setting, "-", "_"))
}

// byteSize is an int64 flag that accepts "50MiB", "250 MB" or a plain number.
type byteSize int64

func (b *byteSize) String() string { return humanize.IBytes(uint64(*b)) }
func (b *byteSize) Type() string   { return "bytes" }
func (b *byteSize) Set(s string) error {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%q is not a size such as 50MiB", s)
	}
	*b = byteSize(n)
	return nil
}

// Resolve fills the settings not given as flags from the environment, then
// from the config file, and validates the result. Errors name the setting
// and where its bad value came from.
func Resolve(fs *pflag.FlagSet, cfg *Config, getenv func(string) string) error {
	file, err := readConfigFile(fs, getenv)
	if err != nil {
		return err
	}
	for _, s := range settings {
		f := fs.Lookup(s.name)
		if f.Changed {
			continue
		}
		if v := getenv(envName(s.name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("%s: %w", envName(s.name), err)
			}
			continue
		}
		if v, ok := file.values[s.name]; ok {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("config file %s: %s: %w", file.path, s.name, err)
			}
		}
	}
	return cfg.validate()
}

type configFile struct {
	path   string
	values map[string]string
}

func readConfigFile(fs *pflag.FlagSet, getenv func(string) string) (configFile, error) {
	path, _ := fs.GetString("config")
	if path == "" {
		path = getenv(EnvPrefix + "CONFIG")
	}
	cf := configFile{path: path, values: map[string]string{}}
	if path == "" {
		return cf, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cf, fmt.Errorf("reading the config file: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return cf, fmt.Errorf("config file %s: %w", path, err)
	}
	for k, v := range raw {
		if !slices.ContainsFunc(settings, func(s setting) bool { return s.name == k }) {
			return cf, fmt.Errorf("config file %s: unknown setting %q", path, k)
		}
		switch v.(type) {
		case map[string]any, []any, nil:
			return cf, fmt.Errorf("config file %s: setting %q must be a single value", path, k)
		}
		cf.values[k] = fmt.Sprint(v)
	}
	return cf, nil
}

func (c *Config) validate() error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (%s): %s", setting, envName(setting), fmt.Sprintf(format, args...)))
	}
	if !slices.Contains([]string{"embedded", "kubernetes"}, c.Mode) {
		bad("mode", "%q is not one of embedded, kubernetes", c.Mode)
	}
	if c.LeaderElectionNamespace != "" {
		if errs := k8svalidation.IsDNS1123Label(c.LeaderElectionNamespace); len(errs) > 0 {
			bad("leader-election-namespace", "%q is not a namespace name: %s", c.LeaderElectionNamespace, strings.Join(errs, "; "))
		}
	}
	if errs := k8svalidation.IsDNS1123Label(c.IngressNamespace); len(errs) > 0 {
		bad("ingress-namespace", "%q is not a namespace name: %s", c.IngressNamespace, strings.Join(errs, "; "))
	}
	if errs := k8svalidation.IsDNS1035Label(c.IngressService); len(errs) > 0 {
		bad("ingress-service", "%q is not a Service name: %s", c.IngressService, strings.Join(errs, "; "))
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("public-url", "%q is not an http:// or https:// address such as https://sless.example.com", c.PublicURL)
		}
	}
	if c.InstanceRuntimeClass != "" {
		if errs := k8svalidation.IsDNS1123Subdomain(c.InstanceRuntimeClass); len(errs) > 0 {
			bad("instance-runtime-class", "%q is not a RuntimeClass name: %s", c.InstanceRuntimeClass, strings.Join(errs, "; "))
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q is not a host:port address", c.Listen)
	}
	if c.DataDir == "" {
		dir, err := discovery.DefaultDataDir()
		if err != nil {
			bad("data-dir", "no default: %v; set it", err)
		}
		c.DataDir = dir
	}
	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			bad("data-dir", "%v", err)
		}
		c.DataDir = abs
	}
	if c.APIToken != "" && len(c.APIToken) < 16 {
		bad("api-token", "must be at least 16 characters")
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "sqlite:" + filepath.Join(c.DataDir, "sless.db")
	}
	if _, _, err := sqldb.ParseURL(c.DatabaseURL); err != nil {
		bad("database-url", "%v", err)
	}
	if c.BlobURL == "" {
		c.BlobURL = "file:" + filepath.Join(c.DataDir, "blobs")
	}
	if _, err := parseBlobURL(c); err != nil {
		bad("blob-url", "%v", err)
	}
	if c.Mode == "kubernetes" {
		// Every replica serves the API and /fn: what they record and keep
		// must be shared.
		if d, _, _ := sqldb.ParseURL(c.DatabaseURL); d != sqldb.Postgres {
			bad("database-url", "the kubernetes mode keeps invocations in PostgreSQL, which every replica shares: give a postgres:// URL")
		}
		if spec, err := parseBlobURL(c); err == nil && spec.s3 == nil {
			bad("blob-url", "the kubernetes mode keeps code in S3, which every replica and the builds share: give an s3:// URL")
		}
		if c.APIToken == "" && c.AuthWebhookURL == "" {
			bad("api-token", "the kubernetes mode needs a token that every replica shares (or an auth webhook): a generated one would be each replica's own")
		}
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		bad("log-level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if !slices.Contains([]string{"text", "json"}, c.LogFormat) {
		bad("log-format", "%q is not one of text, json", c.LogFormat)
	}
	if c.BuildTimeout <= 0 {
		bad("build-timeout", "must be positive")
	}
	if c.BuildLimits.MaxCompressedBytes <= 0 {
		bad("build-max-zip-bytes", "must be positive")
	}
	if c.BuildLimits.MaxExtractedBytes <= 0 {
		bad("build-max-extracted-bytes", "must be positive")
	}
	if c.BuildLimits.MaxEntries <= 0 {
		bad("build-max-entries", "must be positive")
	}
	if !slices.Contains([]string{"", "local", "crane", "kaniko"}, c.Builder) {
		bad("builder", "%q is not one of local, crane, kaniko", c.Builder)
	}
	if _, err := parseBaseImages(c.ImageBaseImages); err != nil {
		bad("image-base-images", "%v", err)
	}
	if !slices.Contains([]string{"linux/amd64", "linux/arm64"}, c.ImagePlatform) {
		bad("image-platform", "%q is not one of linux/amd64, linux/arm64", c.ImagePlatform)
	}
	if errs := k8svalidation.IsDNS1123Label(c.KanikoNamespace); len(errs) > 0 {
		bad("kaniko-namespace", "%q is not a namespace name: %s", c.KanikoNamespace, strings.Join(errs, "; "))
	}
	if err := kanikosettings.CheckImage(c.KanikoImage); err != nil {
		bad("kaniko-image", "%v", err)
	}
	if err := kanikosettings.CheckImage(c.KanikoFetchImage); err != nil {
		bad("kaniko-fetch-image", "%v", err)
	}
	if errs := k8svalidation.IsDNS1123Subdomain(c.KanikoRegistrySecret); c.KanikoRegistrySecret != "" && len(errs) > 0 {
		bad("kaniko-registry-secret", "%q is not a Secret name: %s", c.KanikoRegistrySecret, strings.Join(errs, "; "))
	}
	if err := kanikosettings.CheckQuantity(c.KanikoCPU, kanikosettings.MinCPU); err != nil {
		bad("kaniko-cpu", "%v", err)
	}
	if err := kanikosettings.CheckQuantity(c.KanikoMemory, kanikosettings.MinMemory); err != nil {
		bad("kaniko-memory", "%v", err)
	}
	if c.Builder == "kaniko" && c.BuildTimeout > kanikosettings.MaxTimeout {
		bad("build-timeout", "the kaniko builder allows at most %s", kanikosettings.MaxTimeout)
	}
	if c.IdleTimeout <= 0 {
		bad("idle-timeout", "must be positive")
	}
	if c.Prestart < 0 || c.Prestart > 16 {
		bad("prestart", "must be between 0 and 16")
	}
	if c.QueueDepth < 1 {
		bad("queue-depth", "must be at least 1")
	}
	if c.MaxRequestBytes <= 0 {
		bad("max-request-bytes", "must be positive")
	}
	if c.MaxResultBytes <= 0 {
		bad("max-result-bytes", "must be positive")
	}
	if c.InvocationRetention < 0 {
		bad("invocation-retention", "must not be negative")
	}
	if c.JournalSync < 0 {
		bad("journal-sync", "must not be negative")
	}
	if c.JournalMaxBytes < 1<<20 {
		bad("journal-max-bytes", "must be at least 1MiB")
	}
	if c.ServerCPUs < 0 {
		bad("server-cpus", "must not be negative")
	}
	if _, err := sandbox.ParseMode(c.Sandbox); err != nil {
		bad("sandbox", "%q is not one of auto, require, off", c.Sandbox)
	}
	if _, _, err := parseUIDRange(c.SandboxUIDs); err != nil {
		bad("sandbox-uids", "%v", err)
	}
	if c.InstanceTmpMB < 1 {
		bad("instance-tmp-mb", "must be at least 1")
	}
	if c.InstancePids < 16 {
		bad("instance-pids", "must be at least 16")
	}
	if !slices.Contains([]string{"auto", "off"}, c.Zygote) {
		bad("zygote", "%q is not one of auto, off", c.Zygote)
	}
	if _, err := runtime.ParseEgress(c.InstanceEgress); err != nil {
		bad("instance-egress", "%q is not one of all, public", c.InstanceEgress)
	}
	if c.AuthWebhookURL != "" {
		if u, err := url.Parse(c.AuthWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("auth-webhook-url", "%q is not an http:// or https:// URL", c.AuthWebhookURL)
		}
	}
	if c.AuthWebhookTimeout <= 0 {
		bad("auth-webhook-timeout", "must be positive")
	}
	if c.AuthWebhookCacheTTL <= 0 {
		bad("auth-webhook-cache-ttl", "must be positive")
	}
	if c.AuthWebhookNegativeCacheTTL <= 0 {
		bad("auth-webhook-negative-cache-ttl", "must be positive")
	}
	if c.TraceOTLPURL != "" {
		if u, err := url.Parse(c.TraceOTLPURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("trace-otlp-url", "%q is not an http:// or https:// URL", c.TraceOTLPURL)
		}
	}
	if _, err := parsePairs(c.TraceOTLPHeaders); err != nil {
		bad("trace-otlp-headers", "%v", err)
	}
	if !(c.TraceSampleRatio >= 0 && c.TraceSampleRatio <= 1) {
		bad("trace-sample-ratio", "%v is not between 0 and 1", c.TraceSampleRatio)
	}
	if c.MetricsPushURL != "" {
		// The URL may hold a password: it is not shown.
		if u, err := url.Parse(c.MetricsPushURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("metrics-push-url", "not an http:// or https:// URL")
		}
	}
	if c.MetricsPushInterval < time.Second || c.MetricsPushInterval > time.Hour {
		bad("metrics-push-interval", "%v is not between 1s and 1h", c.MetricsPushInterval)
	}
	return errors.Join(errs...)
}

// parsePairs parses NAME=VALUE[,NAME=VALUE...].
func parsePairs(s string) (map[string]string, error) {
	pairs := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%q is not NAME=VALUE", pair)
		}
		if _, dup := pairs[k]; dup {
			return nil, fmt.Errorf("%s is given twice", k)
		}
		pairs[k] = strings.TrimSpace(v)
	}
	return pairs, nil
}

// parseUIDRange parses "FIRST-LAST" into the first uid and the count.
func parseUIDRange(s string) (first, count int, err error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || first < 1000 || last < first || last >= 1<<31-1 {
		return 0, 0, fmt.Errorf("%q is not a range FIRST-LAST of uids from 1000 up", s)
	}
	return first, last - first + 1, nil
}
