// Package blobs3 is a storage.Blobs on an S3-compatible object store (AWS S3,
// MinIO, versitygw, ...), using minio-go.
//
// A blob with key K is the object "<Prefix>sha256/K" in the configured
// bucket.
package blobs3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/internal/cas"
)

// Config says where blobs are stored and how to authenticate. The zero value
// of every field but Bucket is a usable default.
type Config struct {
	// Endpoint is the server's host[:port], without scheme. Default
	// "s3.amazonaws.com".
	Endpoint string
	// Bucket holds the blobs; New creates it when missing. Required.
	Bucket string
	// Region is the bucket's region, used to sign requests and to create the
	// bucket. Default empty: minio-go asks the server for the bucket's region
	// (one extra request per bucket, cached) and creates buckets in
	// "us-east-1".
	Region string
	// AccessKey and SecretKey are the static SigV4 credentials. When both are
	// empty, requests are anonymous. ParseURL never sets them; see
	// Config.CredentialsFromEnv. Config.String redacts SecretKey.
	AccessKey string
	SecretKey string
	// UseSSL selects https. Default false (plain http); ParseURL defaults it
	// to true.
	UseSSL bool
	// PathStyle addresses buckets as https://endpoint/bucket rather than
	// https://bucket.endpoint, which S3-compatible servers without wildcard
	// DNS need. Default false: minio-go uses virtual-host style for AWS and
	// path style for other endpoints.
	PathStyle bool
	// Prefix is prepended to every object key so that several stores can
	// share one bucket, e.g. "sless/". A "/" is appended when missing.
	// Default empty: keys start at the bucket's root.
	Prefix string
	// TempDir is where Put spools content while hashing it (the key is the
	// hash, so it is known only after the last byte). Default os.TempDir().
	TempDir string
}

// String describes c for logs and errors, without the secret key.
func (c Config) String() string {
	secret := ""
	if c.SecretKey != "" {
		secret = "REDACTED"
	}
	return fmt.Sprintf("blobs3.Config{Endpoint:%q Bucket:%q Region:%q AccessKey:%q SecretKey:%q UseSSL:%t PathStyle:%t Prefix:%q TempDir:%q}",
		c.Endpoint, c.Bucket, c.Region, c.AccessKey, secret, c.UseSSL, c.PathStyle, c.Prefix, c.TempDir)
}

// GoString is String, so that %#v does not print the secret key either.
func (c Config) GoString() string { return c.String() }

// Environment variables read by Config.CredentialsFromEnv, in order of
// preference.
const (
	EnvAccessKey    = "SLESS_S3_ACCESS_KEY"
	EnvSecretKey    = "SLESS_S3_SECRET_KEY"
	EnvAWSAccessKey = "AWS_ACCESS_KEY_ID"
	EnvAWSSecretKey = "AWS_SECRET_ACCESS_KEY"
)

// CredentialsFromEnv sets AccessKey and SecretKey from the environment, read
// through getenv (os.Getenv in production): SLESS_S3_ACCESS_KEY and
// SLESS_S3_SECRET_KEY, or else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
// Keys are taken as a pair from one source, so the two never mix; a source
// with only one of its two variables set is an error. With no source set,
// c is left unchanged (anonymous unless the caller set keys).
func (c *Config) CredentialsFromEnv(getenv func(string) string) error {
	for _, src := range [][2]string{{EnvAccessKey, EnvSecretKey}, {EnvAWSAccessKey, EnvAWSSecretKey}} {
		access, secret := getenv(src[0]), getenv(src[1])
		switch {
		case access == "" && secret == "":
			continue
		case access == "":
			return fmt.Errorf("blobs3: %s is set but %s is not", src[1], src[0])
		case secret == "":
			return fmt.Errorf("blobs3: %s is set but %s is not", src[0], src[1])
		}
		c.AccessKey, c.SecretKey = access, secret
		return nil
	}
	return nil
}

// Store is a storage.Blobs on one S3 bucket. It is safe for concurrent use.
//
// Cost: Put spools the content to a local temp file (one local write and
// read), then makes one HEAD request and, unless the blob exists, one PUT
// (multipart above 16 MiB). Open, Stat and Delete are one request each.
type Store struct {
	client   *minio.Client
	bucket   string
	region   string
	endpoint string
	prefix   string // ends in "/" or is empty
	tempDir  string
}

var _ storage.Blobs = (*Store)(nil)

// New returns a Store on cfg.Bucket without contacting the server; call
// EnsureBucket before use.
func New(cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("blobs3: no bucket configured")
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.UseSSL,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("blobs3: client for %s: %w", endpoint, err)
	}
	s := &Store{client: client, bucket: cfg.Bucket, region: cfg.Region, endpoint: endpoint, prefix: cfg.Prefix, tempDir: cfg.TempDir}
	if s.prefix != "" && !strings.HasSuffix(s.prefix, "/") {
		s.prefix += "/"
	}
	if s.tempDir == "" {
		s.tempDir = os.TempDir()
	}
	return s, nil
}

// EnsureBucket creates the bucket unless it exists. Wrong credentials are
// reported here, because checking the bucket is a signed request. A
// concurrent creator (another replica starting at the same time) makes
// MakeBucket fail with BucketAlreadyOwnedByYou or BucketAlreadyExists; the
// bucket existing afterwards is all that matters, so that is checked instead
// of the code.
func (s *Store) EnsureBucket(ctx context.Context) error {
	exists, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.bucketErr("checking", withAuthHint(err))
	}
	if exists {
		return nil
	}
	mkErr := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region})
	if mkErr == nil {
		return nil
	}
	if exists, err := s.client.BucketExists(ctx, s.bucket); err == nil && exists {
		return nil
	}
	return s.bucketErr("creating", withAuthHint(mkErr))
}

func (s *Store) bucketErr(doing string, err error) error {
	return fmt.Errorf("blobs3: %s bucket %q at %s: %w", doing, s.bucket, s.endpoint, err)
}

// withAuthHint adds a hint to errors that mean the server rejected the
// credentials, since the S3 messages ("Access Denied.") do not say which of
// the many possible causes it is.
func withAuthHint(err error) error {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return err
	}
	switch resp.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"XAdminUserNotFound": // versitygw's unknown access key, with HTTP 404
	default:
		if resp.StatusCode != http.StatusForbidden {
			return err
		}
	}
	return fmt.Errorf("%w (HTTP %d %s: check the access key, secret key and region)", err, resp.StatusCode, resp.Code)
}

// Put stores the content of r; see storage.Blobs. The content is spooled to
// a temporary file first: the object's name is the content's hash, known only
// after the last byte, and the upload needs a rewindable body of known size.
func (s *Store) Put(ctx context.Context, r io.Reader) (storage.Blob, error) {
	f, b, err := cas.Spool(ctx, s.tempDir, r)
	if err != nil {
		return storage.Blob{}, fmt.Errorf("blobs3: put: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := s.upload(ctx, f, b); err != nil {
		return storage.Blob{}, fmt.Errorf("blobs3: put %s: %w", b.SHA256, err)
	}
	return b, nil
}

// upload sends the spooled file f as blob b unless the object exists already.
func (s *Store) upload(ctx context.Context, f *os.File, b storage.Blob) error {
	key := s.key(b.SHA256)
	_, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err == nil {
		return nil // content-addressed: same key, same content
	}
	if !isNotFound(err) {
		return fmt.Errorf("check existing object: %w", withAuthHint(err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind %s: %w", f.Name(), err)
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, f, b.Size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
	})
	if err != nil {
		return fmt.Errorf("upload: %w", withAuthHint(err))
	}
	return nil
}

// Open returns the blob's content; see storage.Blobs. The reader streams from
// the server and stops working when ctx is done; it is also an io.Seeker and
// io.ReaderAt (a *minio.Object).
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := cas.CheckKey(key); err != nil {
		return nil, fmt.Errorf("blobs3: open: %w", err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.key(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("blobs3: open %s: %w", key, err)
	}
	// GetObject is lazy; Stat sends the request so that a missing blob is
	// reported here rather than on the first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, fmt.Errorf("blobs3: open %s: %w", key, mapErr(err))
	}
	return obj, nil
}

// Stat returns the blob's metadata; see storage.Blobs.
func (s *Store) Stat(ctx context.Context, key string) (storage.Blob, error) {
	if err := cas.CheckKey(key); err != nil {
		return storage.Blob{}, fmt.Errorf("blobs3: stat: %w", err)
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.key(key), minio.StatObjectOptions{})
	if err != nil {
		return storage.Blob{}, fmt.Errorf("blobs3: stat %s: %w", key, mapErr(err))
	}
	return storage.Blob{SHA256: key, Size: info.Size}, nil
}

// Delete removes the blob; see storage.Blobs. S3 deletes of missing objects
// succeed, which makes Delete idempotent without a lookup.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := cas.CheckKey(key); err != nil {
		return fmt.Errorf("blobs3: delete: %w", err)
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.key(key), minio.RemoveObjectOptions{})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("blobs3: delete %s: %w", key, withAuthHint(err))
	}
	return nil
}

// key returns the object name of a valid blob key.
func (s *Store) key(sha string) string {
	return s.prefix + "sha256/" + sha
}

// isNotFound reports whether err is S3's "no such object".
func isNotFound(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && resp.Code == minio.NoSuchKey
}

// mapErr marks a missing object as storage.ErrNotFound, keeping the cause.
func mapErr(err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%w: %w", storage.ErrNotFound, err)
	}
	return withAuthHint(err)
}
