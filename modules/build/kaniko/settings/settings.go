// Package settings holds the kaniko builder's defaults and the checks of its
// settings, apart from the builder: the server's configuration checks its
// flags with them in every build of the binary, while the builder, which
// links the Kubernetes client libraries, is only in the cluster build.
package settings

import (
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults and bounds of the kaniko builder's settings.
const (
	// DefaultImage is kaniko's last release by its original project
	// (archived since; its maintained forks run with the same flags).
	DefaultImage = "gcr.io/kaniko-project/executor:v1.24.0"
	// DefaultFetchImage runs curl, which downloads the build context.
	DefaultFetchImage = "curlimages/curl:8.11.1"
	DefaultCPU        = "1"
	DefaultMemory     = "2Gi"
	DefaultTimeout    = 10 * time.Minute
	// MaxTimeout bounds the build timeout: the presigned URL of a build
	// context is valid that long, and S3 signs URLs for at most a week.
	MaxTimeout = 24 * time.Hour
	// MinCPU and MinMemory are the least CPU and memory a build gets.
	MinCPU    = "100m"
	MinMemory = "256Mi"
)

// CheckImage reports why ref is not an image reference pinned to a version:
// a tag other than latest (which a missing tag means), or a digest.
func CheckImage(ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("%q is not an image reference: %w", ref, err)
	}
	if t, ok := r.(name.Tag); ok && t.TagStr() == "latest" {
		return fmt.Errorf("%q: name a version (a tag other than latest, or a digest) so that every build runs the same one", ref)
	}
	return nil
}

// CheckQuantity reports why q is not a Kubernetes quantity of at least
// least.
func CheckQuantity(q, least string) error {
	v, err := resource.ParseQuantity(q)
	if err != nil {
		return fmt.Errorf("%q is not a quantity such as %s", q, least)
	}
	if v.Cmp(resource.MustParse(least)) < 0 {
		return fmt.Errorf("%s is less than %s", q, least)
	}
	return nil
}
