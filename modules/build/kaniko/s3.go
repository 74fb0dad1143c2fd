package kaniko

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Contexts keeps build contexts where build pods download them. S3Contexts
// implements it.
type Contexts interface {
	// Put stores the context of size bytes read from r under key,
	// replacing any.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// URL returns a URL that downloads the context at key with a plain GET,
	// without credentials, until ttl has passed.
	URL(ctx context.Context, key string, ttl time.Duration) (string, error)
	// Delete removes every context whose key starts with prefix; none is
	// not an error.
	Delete(ctx context.Context, prefix string) error
}

// S3Config says where S3Contexts keeps the contexts: the bucket (and
// prefix) of the blob store, whose fields these are.
type S3Config struct {
	// Endpoint is the server's HOST[:PORT]; build pods reach it by the
	// same name, since a presigned URL is signed for its host.
	Endpoint string
	// Bucket holds the contexts, below Prefix + "kaniko/".
	Bucket, Prefix string
	// Region is the bucket's region ("" asks the server once).
	Region string
	// AccessKey and SecretKey sign the requests and the URLs.
	AccessKey, SecretKey string
	// UseSSL selects https; PathStyle addresses the bucket as a path.
	UseSSL, PathStyle bool
}

// S3Contexts is Contexts in an S3 bucket, with minio-go. Build pods get
// presigned URLs, so that no S3 credential ever reaches them: kaniko runs
// the function's install step (a package's setup.py, npm scripts) in its
// own container, where it could read anything kaniko has.
type S3Contexts struct {
	client *minio.Client
	bucket string
	prefix string // ends in "kaniko/"
}

var _ Contexts = (*S3Contexts)(nil)

// NewS3Contexts returns contexts in c's bucket; it contacts no server.
func NewS3Contexts(c S3Config) (*S3Contexts, error) {
	if c.Bucket == "" {
		return nil, errors.New("the S3 bucket of the build contexts is not set")
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(c.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure:       c.UseSSL,
		Region:       c.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("the S3 client of the build contexts, for %s: %w", c.Endpoint, err)
	}
	prefix := c.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &S3Contexts{client: client, bucket: c.Bucket, prefix: prefix + "kaniko/"}, nil
}

// Put implements Contexts.
func (s *S3Contexts) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, r, size, minio.PutObjectOptions{ContentType: "application/gzip"})
	if err != nil {
		return fmt.Errorf("storing build context %s in S3: %w", key, err)
	}
	return nil
}

// URL implements Contexts with a presigned GET.
func (s *S3Contexts) URL(ctx context.Context, key string, ttl time.Duration) (string, error) {
	u, err := s.client.PresignedGetObject(ctx, s.bucket, s.prefix+key, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("presigning the URL of build context %s: %w", key, err)
	}
	return u.String(), nil
}

// Delete implements Contexts.
func (s *S3Contexts) Delete(ctx context.Context, prefix string) error {
	var errs []error
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("listing build contexts %s in S3: %w", prefix, obj.Err)
		}
		if err := s.client.RemoveObject(ctx, s.bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("removing build context %s from S3: %w", strings.TrimPrefix(obj.Key, s.prefix), err))
		}
	}
	return errors.Join(errs...)
}
