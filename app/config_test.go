package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func resolve(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	err := Resolve(fs, &cfg, func(k string) string { return env[k] })
	return cfg, err
}

func TestDefaults(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/xdg")
	cfg, err := resolve(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.DataDir != "/xdg/sless" || cfg.DatabaseURL != "sqlite:/xdg/sless/sless.db" ||
		cfg.BlobURL != "file:/xdg/sless/blobs" || cfg.BuildTimeout != 10*time.Minute ||
		cfg.BuildLimits.MaxCompressedBytes != 50<<20 || cfg.BuildLimits.MaxExtractedBytes != 250<<20 || cfg.BuildLimits.MaxEntries != 10000 ||
		cfg.InstanceEgress != "all" || cfg.KanikoNamespace != "sless-builds" || cfg.KanikoImage != "gcr.io/kaniko-project/executor:v1.24.0" ||
		cfg.KanikoCPU != "1" || cfg.KanikoMemory != "2Gi" || cfg.KanikoRegistrySecret != "" {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sless.yaml")
	os.WriteFile(file, []byte("listen: 127.0.0.1:7000\nlog-level: warn\nbuild-max-zip-bytes: 10MiB\nbuild-timeout: 2m\n"), 0o600)
	env := map[string]string{"SLESS_CONFIG": file, "SLESS_LOG_LEVEL": "debug", "SLESS_DATA_DIR": "/env/dir"}
	cfg, err := resolve(t, []string{"--data-dir", "/flag/dir"}, env)
	if err != nil {
		t.Fatal(err)
	}
	// flag > env > file > default
	if cfg.DataDir != "/flag/dir" || cfg.LogLevel != "debug" || cfg.Listen != "127.0.0.1:7000" ||
		cfg.BuildLimits.MaxCompressedBytes != 10<<20 || cfg.BuildTimeout != 2*time.Minute {
		t.Errorf("got %+v", cfg)
	}
}

func TestInvalidSettingsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badFile, []byte("listn: x\n"), 0o600)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad listen", []string{"--listen", "nonsense"}, nil, `listen (SLESS_LISTEN): "nonsense" is not a host:port`},
		{"bad env duration", nil, map[string]string{"SLESS_BUILD_TIMEOUT": "soon"}, "SLESS_BUILD_TIMEOUT"},
		{"bad size", nil, map[string]string{"SLESS_BUILD_MAX_ZIP_BYTES": "lots"}, `SLESS_BUILD_MAX_ZIP_BYTES: "lots" is not a size`},
		{"bad database scheme", []string{"--database-url", "mysql://x"}, nil, `database-url (SLESS_DATABASE_URL): database URL scheme "mysql"`},
		{"bad blob scheme", []string{"--blob-url", "gcs://b"}, nil, `blob-url (SLESS_BLOB_URL): scheme "gcs"`},
		{"bad log level", []string{"--log-level", "loud"}, nil, "log-level"},
		{"short token", []string{"--api-token", "short"}, nil, "api-token (SLESS_API_TOKEN): must be at least 16"},
		{"unknown file key", nil, map[string]string{"SLESS_CONFIG": badFile}, `unknown setting "listn"`},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, nil, "reading the config file"},
		{"negative limit", []string{"--build-max-entries", "-1"}, nil, "build-max-entries"},
		{"unknown builder", []string{"--builder", "docker"}, nil, `builder (SLESS_BUILDER): "docker" is not one of local, crane, kaniko`},
		{"bad base images", []string{"--image-base-images", "python3.11"}, nil, `image-base-images (SLESS_IMAGE_BASE_IMAGES): "python3.11" is not RUNTIME=REF`},
		{"bad platform", []string{"--image-platform", "windows/amd64"}, nil, "image-platform (SLESS_IMAGE_PLATFORM)"},
		{"bad kaniko namespace", []string{"--kaniko-namespace", "Builds"}, nil, `kaniko-namespace (SLESS_KANIKO_NAMESPACE): "Builds" is not a namespace name`},
		{"kaniko latest", []string{"--kaniko-image", "gcr.io/kaniko-project/executor:latest"}, nil, "kaniko-image (SLESS_KANIKO_IMAGE): " +
			`"gcr.io/kaniko-project/executor:latest": name a version`},
		{"fetch image untagged", nil, map[string]string{"SLESS_KANIKO_FETCH_IMAGE": "curlimages/curl"}, "kaniko-fetch-image (SLESS_KANIKO_FETCH_IMAGE)"},
		{"bad registry secret", []string{"--kaniko-registry-secret", "Push_Creds"}, nil, `kaniko-registry-secret (SLESS_KANIKO_REGISTRY_SECRET): "Push_Creds" is not a Secret name`},
		{"bad kaniko cpu", []string{"--kaniko-cpu", "fast"}, nil, `kaniko-cpu (SLESS_KANIKO_CPU): "fast" is not a quantity`},
		{"little kaniko memory", []string{"--kaniko-memory", "100Mi"}, nil, "kaniko-memory (SLESS_KANIKO_MEMORY): 100Mi is less than 256Mi"},
		{"kaniko timeout", []string{"--builder", "kaniko", "--build-timeout", "25h"}, nil, "build-timeout (SLESS_BUILD_TIMEOUT): the kaniko builder allows at most 24h"},
		{"bad webhook url", []string{"--auth-webhook-url", "idp.example:8443/review"}, nil, "auth-webhook-url (SLESS_AUTH_WEBHOOK_URL): \"idp.example:8443/review\" is not an http:// or https:// URL"},
		{"zero webhook timeout", []string{"--auth-webhook-timeout", "0s"}, nil, "auth-webhook-timeout (SLESS_AUTH_WEBHOOK_TIMEOUT): must be positive"},
		{"bad otlp url", []string{"--trace-otlp-url", "collector:4318"}, nil, "trace-otlp-url (SLESS_TRACE_OTLP_URL): \"collector:4318\" is not an http:// or https:// URL"},
		{"bad otlp headers", []string{"--trace-otlp-headers", "api-key"}, nil, "trace-otlp-headers (SLESS_TRACE_OTLP_HEADERS): \"api-key\" is not NAME=VALUE"},
		{"push url with a password is not shown", []string{"--metrics-push-url", "vm:s3cret@host:8428"}, nil, "metrics-push-url (SLESS_METRICS_PUSH_URL): not an http:// or https:// URL"},
		{"push interval too short", []string{"--metrics-push-interval", "10ms"}, nil, "metrics-push-interval (SLESS_METRICS_PUSH_INTERVAL): 10ms is not between 1s and 1h"},
		{"sample ratio above 1", []string{"--trace-sample-ratio", "1.5"}, nil, "trace-sample-ratio (SLESS_TRACE_SAMPLE_RATIO): 1.5 is not between 0 and 1"},
		{"zero negative ttl", nil, map[string]string{"SLESS_AUTH_WEBHOOK_NEGATIVE_CACHE_TTL": "0s"}, "auth-webhook-negative-cache-ttl"},
		{"bad instance egress", nil, map[string]string{"SLESS_INSTANCE_EGRESS": "private"}, `instance-egress (SLESS_INSTANCE_EGRESS): "private" is not one of all, public`},
		{"negative server cpus", nil, map[string]string{"SLESS_SERVER_CPUS": "-1"}, "server-cpus (SLESS_SERVER_CPUS): must not be negative"},
		{"bad zygote", nil, map[string]string{"SLESS_ZYGOTE": "on"}, `zygote (SLESS_ZYGOTE): "on" is not one of auto, off`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--data-dir", dir}, tt.args...)
			_, err := resolve(t, args, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestServerCPUs(t *testing.T) {
	tests := []struct {
		setting   int
		env       string
		available int
		want      int
	}{
		{0, "", 1, 1},
		{0, "", 2, 1},
		{0, "", 3, 2},
		{0, "", 8, 4},
		{0, "6", 6, 6}, // GOMAXPROCS set: the runtime took it already
		{3, "", 8, 3},
		{3, "6", 6, 3},
	}
	for _, tt := range tests {
		if got := serverCPUs(tt.setting, tt.env, tt.available); got != tt.want {
			t.Errorf("serverCPUs(%d, %q, %d) = %d; want %d", tt.setting, tt.env, tt.available, got, tt.want)
		}
	}
}

// TestKubernetesModeSettings: the kubernetes mode's replicas share their
// database, blob store and token, so it refuses the embedded defaults,
// naming each setting; its own settings are checked too.
func TestKubernetesModeSettings(t *testing.T) {
	_, err := resolve(t, []string{"--mode", "kubernetes", "--data-dir", t.TempDir()}, nil)
	for _, want := range []string{
		"database-url (SLESS_DATABASE_URL): the kubernetes mode keeps invocations in PostgreSQL",
		"blob-url (SLESS_BLOB_URL): the kubernetes mode keeps code in S3",
		"api-token (SLESS_API_TOKEN): the kubernetes mode needs a token that every replica shares",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("kubernetes mode with the embedded defaults: %v; want %q", err, want)
		}
	}
	cfg, err := resolve(t, append([]string{"--data-dir", t.TempDir()}, kubernetesArgs...), nil)
	if err != nil {
		t.Fatalf("kubernetes mode with shared services: %v", err)
	}
	if !cfg.LeaderElect || cfg.LeaderElectionNamespace != "" {
		t.Errorf("leader election: %v in %q; want on, in the pod's namespace", cfg.LeaderElect, cfg.LeaderElectionNamespace)
	}
	if cfg.IngressNamespace != "sless" || cfg.IngressService != "sless" {
		t.Errorf("ingresses route to service %q of namespace %q; want sless of sless (deploy/base)", cfg.IngressService, cfg.IngressNamespace)
	}
	for _, c := range []struct{ args, want string }{
		{"--mode=cluster", `mode (SLESS_MODE): "cluster" is not one of embedded, kubernetes`},
		{"--leader-election-namespace=Sless", "leader-election-namespace (SLESS_LEADER_ELECTION_NAMESPACE)"},
		{"--ingress-namespace=", "ingress-namespace (SLESS_INGRESS_NAMESPACE)"},
		{"--ingress-service=1sless", "ingress-service (SLESS_INGRESS_SERVICE)"},
		{"--instance-runtime-class=g_visor", "instance-runtime-class (SLESS_INSTANCE_RUNTIME_CLASS)"},
		{"--public-url=sless.example.com", "public-url (SLESS_PUBLIC_URL)"},
	} {
		if _, err := resolve(t, []string{"--data-dir", t.TempDir(), c.args}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.args, err, c.want)
		}
	}
}
