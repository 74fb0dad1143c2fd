package app

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sless.kube5s.ru/sless/internal/discovery"
	"sless.kube5s.ru/sless/internal/durable"
)

// ensureToken returns the configured token, else the one generated on an
// earlier start, else a new one that it stores with mode 0600, durably (a
// power cut must not take a token that clients were given). generated
// reports that a new token was written.
func ensureToken(c Config) (token, path string, generated bool, err error) {
	if c.APIToken != "" {
		return c.APIToken, "", false, nil
	}
	path = filepath.Join(c.DataDir, discovery.TokenFile)
	data, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(data)); t != "" {
			return t, path, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", false, fmt.Errorf("reading the API token: %w", err)
	}
	buf := make([]byte, 32)
	rand.Read(buf)
	token = base64.RawURLEncoding.EncodeToString(buf)
	if err := durable.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", "", false, fmt.Errorf("storing the generated API token: %w", err)
	}
	return token, path, true, nil
}
