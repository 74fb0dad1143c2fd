package blobs3

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// urlParams are the query parameters ParseURL understands.
var urlParams = []string{"endpoint", "region", "path_style", "insecure"}

// ParseURL parses a store location of the form
//
//	s3://BUCKET[/PREFIX][?endpoint=HOST:PORT][&region=REGION][&path_style=BOOL][&insecure=BOOL]
//
// into a Config:
//
//   - endpoint: the server; default AWS ("s3.amazonaws.com").
//   - region: default empty (see Config.Region).
//   - path_style: default true when endpoint is given (self-hosted servers
//     rarely have wildcard DNS), false otherwise.
//   - insecure=true: plain http. Default false: https.
//
// ParseURL is pure: credentials are not part of the URL (URLs end up in logs
// and process lists) and are not read from the environment either; the caller
// sets them, typically with Config.CredentialsFromEnv. A URL with user info is
// rejected, and no error repeats the URL, so a misplaced secret is not leaked.
// Unknown or repeated parameters are errors naming the parameter, so typos do
// not silently fall back to defaults.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL
		}
		return Config{}, fmt.Errorf("blobs3: parse URL: %w", err)
	}
	cfg, err := configFromURL(u)
	if err != nil {
		return Config{}, fmt.Errorf("blobs3: parse URL: %w", err)
	}
	return cfg, nil
}

// configFromURL interprets a parsed s3:// URL.
func configFromURL(u *url.URL) (Config, error) {
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("scheme is %q, want s3://BUCKET[/PREFIX]", u.Scheme)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("credentials must not be in the URL; set %s and %s (or %s and %s)",
			EnvAccessKey, EnvSecretKey, EnvAWSAccessKey, EnvAWSSecretKey)
	}
	if u.Opaque != "" || u.Host == "" {
		return Config{}, errors.New("no bucket: want s3://BUCKET[/PREFIX]")
	}
	if u.Fragment != "" {
		return Config{}, errors.New("unexpected #fragment")
	}
	if err := s3utils.CheckValidBucketNameStrict(u.Host); err != nil {
		return Config{}, fmt.Errorf("bucket %q: %w", u.Host, err)
	}
	cfg := Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("query: %w", err)
	}
	if err := applyParams(&cfg, q); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// applyParams sets cfg's fields from the URL's query parameters.
func applyParams(cfg *Config, q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		values := q[name]
		if !slices.Contains(urlParams, name) {
			return fmt.Errorf("unknown parameter %q (known: %s)", name, strings.Join(urlParams, ", "))
		}
		if len(values) > 1 {
			return fmt.Errorf("parameter %q given %d times", name, len(values))
		}
	}
	cfg.Endpoint = q.Get("endpoint")
	if q.Has("endpoint") && cfg.Endpoint == "" {
		return errors.New(`parameter "endpoint" is empty`)
	}
	if strings.Contains(cfg.Endpoint, "://") || strings.Contains(cfg.Endpoint, "/") {
		return fmt.Errorf(`parameter "endpoint": %q is not HOST[:PORT] (no scheme or path; insecure=true selects http)`, cfg.Endpoint)
	}
	cfg.Region = q.Get("region")
	var err error
	if cfg.PathStyle, err = boolParam(q, "path_style", cfg.Endpoint != ""); err != nil {
		return err
	}
	insecure, err := boolParam(q, "insecure", false)
	if err != nil {
		return err
	}
	cfg.UseSSL = !insecure
	return nil
}

// boolParam returns the boolean query parameter name, or def when absent.
func boolParam(q url.Values, name string, def bool) (bool, error) {
	if !q.Has(name) {
		return def, nil
	}
	v, err := strconv.ParseBool(q.Get(name))
	if err != nil {
		return false, fmt.Errorf("parameter %q: %q is not a boolean", name, q.Get(name))
	}
	return v, nil
}
