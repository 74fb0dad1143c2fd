package crane

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// configKeychain reads the credentials of a registry from a docker
// config.json, the format of Kubernetes image pull secrets
// (.dockerconfigjson): {"auths": {"registry.example.com": {"auth":
// base64("user:password")}}}, or "username" and "password", or
// "identitytoken". It reads the file at every lookup, so that a rotated
// secret applies without a restart. Credential helpers are not run.
type configKeychain struct{ path string }

type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// Resolve implements authn.Keychain.
func (k configKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	data, err := os.ReadFile(k.path)
	if err != nil {
		return nil, fmt.Errorf("reading the registry credentials: %w", err)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("reading the registry credentials in %s: %w", k.path, err)
	}
	want := target.RegistryStr()
	for key, a := range cfg.Auths {
		if registryOfKey(key) != want {
			continue
		}
		c := authn.AuthConfig{Username: a.Username, Password: a.Password,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("the credentials of %s in %s: \"auth\" is not base64 of user:password", key, k.path)
			}
			c.Username, c.Password = user, pass
		}
		return authn.FromConfig(c), nil
	}
	return authn.Anonymous, nil
}

// registryOfKey is the registry an "auths" key names: a host[:port], or a
// URL such as https://index.docker.io/v1/.
func registryOfKey(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	if key == "index.docker.io" || key == "docker.io" {
		return name.DefaultRegistry
	}
	return key
}
