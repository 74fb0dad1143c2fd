package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/modules/storage"
	"sless.kube5s.ru/sless/modules/storage/blobfs"
	"sless.kube5s.ru/sless/modules/storage/blobs3"
)

// blobSpec is a parsed blob URL: a directory or an S3 configuration.
type blobSpec struct {
	dir string
	s3  *blobs3.Config
}

func parseBlobURL(c *Config) (blobSpec, error) {
	raw := c.BlobURL
	switch {
	case strings.HasPrefix(raw, "s3://"):
		s3cfg, err := blobs3.ParseURL(raw)
		if err != nil {
			return blobSpec{}, err
		}
		s3cfg.AccessKey, s3cfg.SecretKey = c.S3AccessKey, c.S3SecretKey
		if s3cfg.AccessKey == "" && s3cfg.SecretKey == "" {
			// Fall back to the AWS variables that S3 tooling shares.
			if err := s3cfg.CredentialsFromEnv(os.Getenv); err != nil {
				return blobSpec{}, err
			}
		}
		s3cfg.TempDir = filepath.Join(c.DataDir, "tmp")
		return blobSpec{s3: &s3cfg}, nil
	case strings.HasPrefix(raw, "file://"):
		return blobSpec{dir: strings.TrimPrefix(raw, "file://")}, nil
	case strings.HasPrefix(raw, "file:"):
		return blobSpec{dir: strings.TrimPrefix(raw, "file:")}, nil
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return blobSpec{}, fmt.Errorf("scheme %q is not supported; use s3:// or file:", scheme)
	}
	return blobSpec{dir: raw}, nil
}

// newBlobs picks the blob store implementation from the configuration. An
// S3 store checks its bucket (creating it when missing) at start.
func newBlobs(lc fx.Lifecycle, c Config) (storage.Blobs, error) {
	spec, err := parseBlobURL(&c)
	if err != nil {
		return nil, err
	}
	if spec.s3 == nil {
		return blobfs.New(spec.dir)
	}
	s, err := blobs3.New(*spec.s3)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: s.EnsureBucket})
	return s, nil
}
