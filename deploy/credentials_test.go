package deploy

import (
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sless.kube5s.ru/sless/modules/storage/blobs3"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// secretData returns the decoded data of the Secret generated from name in
// r.
func secretData(t *testing.T, r rendered, name string) map[string]string {
	t.Helper()
	o := r.generated("Secret", slessNamespace, name)
	if o == nil {
		t.Fatalf("%s: no Secret %s", r.name, name)
	}
	out := map[string]string{}
	data, _ := o.Object["data"].(map[string]any)
	for k, v := range data {
		s, _ := v.(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("%s: Secret %s, key %s: %v", r.name, name, k, err)
		}
		out[k] = string(b)
	}
	return out
}

// TestQuickstartCredentials: credentials.sh writes random credentials
// readable by their owner only, which the three Secrets share
// consistently (sless connects with the passwords PostgreSQL and MinIO are
// given) in the forms the server accepts; running it again keeps them.
func TestQuickstartCredentials(t *testing.T) {
	var quickstart rendered
	for _, r := range renderAll(t) {
		if r.name == "quickstart" {
			quickstart = r
		}
	}
	if quickstart.objs == nil {
		t.Fatal("no quickstart")
	}
	sless, pg, minio := secretData(t, quickstart, "sless"), secretData(t, quickstart, "postgres"), secretData(t, quickstart, "minio")

	if _, _, err := sqldb.ParseURL(sless["SLESS_DATABASE_URL"]); err != nil {
		t.Errorf("SLESS_DATABASE_URL: %v", err)
	}
	u, err := url.Parse(sless["SLESS_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	if u.User.Username() != "sless" || u.Host != "postgres.sless.svc:5432" || strings.TrimPrefix(u.Path, "/") != "sless" {
		t.Errorf("SLESS_DATABASE_URL names user %s, %s, database %s; want sless, postgres.sless.svc:5432 (the Service), sless",
			u.User.Username(), u.Host, u.Path)
	}
	if pw, _ := u.User.Password(); pw != pg["POSTGRES_PASSWORD"] {
		t.Error("SLESS_DATABASE_URL's password is not PostgreSQL's")
	}
	for _, svc := range []struct {
		name string
		port int64
	}{{"postgres", 5432}, {"minio", 9000}} {
		var ports []any
		if o := quickstart.find("Service", slessNamespace, svc.name); o != nil {
			ports, _, _ = unstructured.NestedSlice(o.Object, "spec", "ports")
		}
		if len(ports) != 1 || ports[0].(map[string]any)["port"] != svc.port {
			t.Errorf("Service %s/%s with port %d, which the URLs name, is not in the quickstart", slessNamespace, svc.name, svc.port)
		}
	}
	cfg, err := blobs3.ParseURL(sless["SLESS_BLOB_URL"])
	if err != nil {
		t.Errorf("SLESS_BLOB_URL: %v", err)
	}
	if cfg.Endpoint != "minio.sless.svc:9000" {
		t.Errorf("SLESS_BLOB_URL's endpoint %q; want the MinIO Service, minio.sless.svc:9000", cfg.Endpoint)
	}
	if sless["SLESS_S3_ACCESS_KEY"] != minio["MINIO_ROOT_USER"] || sless["SLESS_S3_SECRET_KEY"] != minio["MINIO_ROOT_PASSWORD"] {
		t.Error("the S3 keys of sless are not MinIO's")
	}
	for what, v := range map[string]string{"the PostgreSQL password": pg["POSTGRES_PASSWORD"],
		"the MinIO password": minio["MINIO_ROOT_PASSWORD"], "the API token": sless["SLESS_API_TOKEN"]} {
		if len(v) < 32 || strings.Trim(v, "0123456789abcdef") != "" {
			t.Errorf("%s %q: want at least 32 random hex digits", what, v)
		}
	}
	if pg["POSTGRES_PASSWORD"] == minio["MINIO_ROOT_PASSWORD"] {
		t.Error("PostgreSQL and MinIO have the same password")
	}

	// Run it in a fresh copy: files of mode 0600 in a 0700 directory,
	// other values than the first copy's, kept by a second run.
	dir := copyDeploy(t)
	runCredentials(t, dir)
	creds := filepath.Join(dir, "quickstart", "credentials")
	before := map[string]string{}
	for _, f := range []string{"", "sless.env", "postgres.env", "minio.env"} {
		st, err := os.Stat(filepath.Join(creds, f))
		if err != nil {
			t.Fatal(err)
		}
		if want := os.FileMode(0o600); st.IsDir() {
			if st.Mode().Perm() != 0o700 {
				t.Errorf("credentials/: mode %v; want 0700", st.Mode().Perm())
			}
		} else if st.Mode().Perm() != want {
			t.Errorf("credentials/%s: mode %v; want %v", f, st.Mode().Perm(), want)
		}
		if f != "" {
			b, _ := os.ReadFile(filepath.Join(creds, f))
			before[f] = string(b)
		}
	}
	if strings.Contains(before["sless.env"], sless["SLESS_API_TOKEN"]) {
		t.Error("two runs of credentials.sh made the same API token")
	}
	out := runCredentials(t, dir)
	if !strings.Contains(out, "keeping") {
		t.Errorf("second run said %q; want that it keeps the credentials", out)
	}
	for f, want := range before {
		if b, _ := os.ReadFile(filepath.Join(creds, f)); string(b) != want {
			t.Errorf("credentials/%s changed on the second run", f)
		}
	}
	// A partial directory is refused rather than completed with passwords
	// that the data no longer has.
	if err := os.Remove(filepath.Join(creds, "minio.env")); err != nil {
		t.Fatal(err)
	}
	cmd := filepath.Join(dir, "quickstart", "credentials.sh")
	if out, err := runScript(cmd); err == nil || !strings.Contains(out, "minio.env is missing") {
		t.Errorf("with credentials/minio.env missing: %v, %q; want a failure naming it", err, out)
	}
}
