package blobs3_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobs3"
	"sless.kube5s.ru/sless/modules/storage/blobtest"
)

// config returns the Config of a new bucket on srv.
func config(t *testing.T, srv testenv.S3Server) blobs3.Config {
	t.Helper()
	cfg, err := blobs3.ParseURL(srv.NewBucketURL())
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	cfg.AccessKey, cfg.SecretKey = srv.AccessKey, srv.SecretKey
	cfg.TempDir = t.TempDir()
	return cfg
}

func newStore(t *testing.T, cfg blobs3.Config) *blobs3.Store {
	t.Helper()
	s, err := open(t, cfg)
	if err != nil {
		t.Fatalf("New(%v) + EnsureBucket: %v", cfg, err)
	}
	return s
}

// open is New followed by EnsureBucket, as the server does at start.
func open(t *testing.T, cfg blobs3.Config) (*blobs3.Store, error) {
	s, err := blobs3.New(cfg)
	if err != nil {
		return nil, err
	}
	return s, s.EnsureBucket(t.Context())
}

func TestConformance(t *testing.T) {
	srv := testenv.S3(t)
	blobtest.Run(t, func(t *testing.T) storage.Blobs {
		return newStore(t, config(t, srv))
	})
}

// TestPrefix checks that stores sharing a bucket under different prefixes
// keep their blobs apart, and where the objects go.
func TestPrefix(t *testing.T) {
	srv := testenv.S3(t)
	cfg := config(t, srv)
	cfg.Prefix = "a"
	a := newStore(t, cfg)
	cfg.Prefix = "b/"
	b := newStore(t, cfg)
	blob, err := a.Put(t.Context(), strings.NewReader("only in a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(t.Context(), blob.SHA256); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Stat in the other prefix: error = %v, want ErrNotFound", err)
	}
	client := newClient(t, srv)
	want := "a/sha256/" + blob.SHA256
	if _, err := client.StatObject(t.Context(), cfg.Bucket, want, minio.StatObjectOptions{}); err != nil {
		t.Errorf("object %s: %v", want, err)
	}
}

func newClient(t *testing.T, srv testenv.S3Server) *minio.Client {
	t.Helper()
	client, err := minio.New(srv.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Region: srv.Region,
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func TestNewCreatesBucket(t *testing.T) {
	srv := testenv.S3(t)
	cfg := config(t, srv)
	client := newClient(t, srv)
	if ok, err := client.BucketExists(t.Context(), cfg.Bucket); err != nil || ok {
		t.Fatalf("bucket %s before New: exists=%t, %v; want missing", cfg.Bucket, ok, err)
	}
	newStore(t, cfg)
	if ok, err := client.BucketExists(t.Context(), cfg.Bucket); err != nil || !ok {
		t.Fatalf("bucket %s after New: exists=%t, %v; want it created", cfg.Bucket, ok, err)
	}
	// A second store on the now existing bucket, and several racing to create
	// another one, as replicas starting together do.
	newStore(t, cfg)
	race := config(t, srv)
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() {
			_, err := open(t, race)
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("concurrent New on a missing bucket: %v", err)
		}
	}
}

func TestWrongCredentials(t *testing.T) {
	srv := testenv.S3(t)
	for _, tc := range []struct{ name, access, secret string }{
		{"wrong secret", srv.AccessKey, "wrong-secret-key-0123456789"},
		{"unknown access key", "nobody", "wrong-secret-key-0123456789"},
		{"anonymous", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, srv)
			cfg.AccessKey, cfg.SecretKey = tc.access, tc.secret
			_, err := open(t, cfg)
			if err == nil {
				t.Fatal("New with wrong credentials succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, "check the access key, secret key and region") || !strings.Contains(msg, cfg.Bucket) {
				t.Errorf("error %q does not name the bucket and hint at the credentials", msg)
			}
			if tc.secret != "" && strings.Contains(msg, tc.secret) {
				t.Errorf("error %q contains the secret key", msg)
			}
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	if _, err := blobs3.New(blobs3.Config{}); err == nil || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("New(Config{}) error = %v, want one about the bucket", err)
	}
}

func TestConfigStringRedactsSecret(t *testing.T) {
	cfg := blobs3.Config{Bucket: "b", AccessKey: "AKIDEXAMPLE", SecretKey: "wJalrXUtnFEMI/K7MDENG"}
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, &cfg)} {
		if strings.Contains(s, cfg.SecretKey) {
			t.Errorf("%q contains the secret key", s)
		}
	}
}

func TestCredentialsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name               string
		env                map[string]string
		wantAccess, secret string
		wantErr            string
	}{
		{name: "none"},
		{
			name:       "sless",
			env:        map[string]string{"SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "s", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
			wantAccess: "a", secret: "s",
		},
		{
			name:       "aws",
			env:        map[string]string{"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
			wantAccess: "x", secret: "y",
		},
		{
			name:    "half a pair",
			env:     map[string]string{"SLESS_S3_ACCESS_KEY": "a", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
			wantErr: "SLESS_S3_ACCESS_KEY is set but SLESS_S3_SECRET_KEY is not",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg blobs3.Config
			err := cfg.CredentialsFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.AccessKey != tc.wantAccess || cfg.SecretKey != tc.secret {
				t.Errorf("got %q/%q, %v; want %q/%q", cfg.AccessKey, cfg.SecretKey, err, tc.wantAccess, tc.secret)
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want blobs3.Config
	}{
		{"s3://blobs", blobs3.Config{Bucket: "blobs", UseSSL: true}},
		{"s3://blobs/sless/code", blobs3.Config{Bucket: "blobs", Prefix: "sless/code", UseSSL: true}},
		{"s3://blobs?region=eu-west-1", blobs3.Config{Bucket: "blobs", Region: "eu-west-1", UseSSL: true}},
		{
			"s3://blobs/p/?endpoint=127.0.0.1:7070&region=us-east-1&insecure=true",
			blobs3.Config{Bucket: "blobs", Prefix: "p/", Endpoint: "127.0.0.1:7070", Region: "us-east-1", PathStyle: true},
		},
		{
			"s3://blobs?endpoint=minio.example.com&path_style=false",
			blobs3.Config{Bucket: "blobs", Endpoint: "minio.example.com", UseSSL: true},
		},
		{"s3://blobs?path_style=1&insecure=0", blobs3.Config{Bucket: "blobs", PathStyle: true, UseSSL: true}},
	} {
		got, err := blobs3.ParseURL(tc.url)
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %v, %v; want %v", tc.url, got, err, tc.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, wantErr string }{
		{"https://blobs", `scheme is "https"`},
		{"blobs", `scheme is ""`},
		{"s3://", "no bucket"},
		{"s3:blobs", "no bucket"},
		{"s3://Bad_Bucket", `bucket "Bad_Bucket"`},
		{"s3://blobs?endpont=x", `unknown parameter "endpont"`},
		{"s3://blobs?region=a&region=b", `parameter "region" given 2 times`},
		{"s3://blobs?path_style=maybe", `parameter "path_style": "maybe" is not a boolean`},
		{"s3://blobs?insecure=yes", `parameter "insecure": "yes" is not a boolean`},
		{"s3://blobs?endpoint=", `parameter "endpoint" is empty`},
		{"s3://blobs?endpoint=http://host:9000", `parameter "endpoint": "http://host:9000" is not HOST[:PORT]`},
		{"s3://blobs?endpoint=host/path", `parameter "endpoint"`},
		{"s3://blobs?a=%zz", "query"},
		{"s3://blobs#frag", "fragment"},
		{"s3://AKIDEXAMPLE:wJalrXUtnFEMI@blobs", "credentials must not be in the URL"},
		{"s3://AKIDEXAMPLE:wJalrXUtnFEMI@blobs:x:y/%zz", "parse URL"},
	} {
		_, err := blobs3.ParseURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseURL(%q) error = %v, want it to contain %q", tc.url, err, tc.wantErr)
			continue
		}
		if strings.Contains(err.Error(), "wJalrXUtnFEMI") {
			t.Errorf("ParseURL(%q) error %q contains the secret", tc.url, err)
		}
	}
}
