// Package discovery is how the CLI finds a server running on the same
// machine without configuration: the server writes its endpoint into its
// data directory, next to the API token it generated, and the CLI reads both
// from the default data directory (or SLESS_DATA_DIR). The server holds the
// data directory's lock (TakeLock) while it runs, which makes it the only
// one there and tells the CLI whether the recorded server still runs.
package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File names inside the data directory.
const (
	// TokenFile holds the generated API token (mode 0600).
	TokenFile = "api-token"
	// EndpointFile holds Info while the server runs.
	EndpointFile = "server.json"
)

// Info is what a running server publishes.
type Info struct {
	Endpoint string `json:"endpoint"`
	PID      int    `json:"pid"`
}

// DefaultDataDir returns the per-user data directory: $XDG_DATA_HOME/sless,
// else ~/.local/share/sless.
func DefaultDataDir() (string, error) {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "sless"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the home directory: %w", err)
	}
	return filepath.Join(home, ".local", "share", "sless"), nil
}

// Write publishes info in dataDir.
func Write(dataDir string, info Info) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, EndpointFile), data, 0o600)
}

// Remove withdraws what Write published.
func Remove(dataDir string) { os.Remove(filepath.Join(dataDir, EndpointFile)) }

// Read returns the endpoint and token of the server whose data directory is
// dataDir. A discovery file whose server was killed, so that it could not
// remove it, is an error that says so.
func Read(dataDir string) (endpoint, token string, err error) {
	info, err := readInfo(dataDir)
	if err != nil {
		return "", "", err
	}
	if !Running(dataDir) {
		return "", "", fmt.Errorf("the sless server recorded in %s (pid %d, %s) is not running: it was stopped without cleaning up; start it again with `sless server`", filepath.Join(dataDir, EndpointFile), info.PID, info.Endpoint)
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, TokenFile))
	if err != nil {
		return info.Endpoint, "", fmt.Errorf("reading the API token (set SLESS_TOKEN if the server was given one): %w", err)
	}
	return info.Endpoint, strings.TrimSpace(string(tok)), nil
}

// readInfo reads the discovery file of dataDir.
func readInfo(dataDir string) (Info, error) {
	var info Info
	data, err := os.ReadFile(filepath.Join(dataDir, EndpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("no running server found in %s (start one with `sless server`, or set SLESS_ENDPOINT and SLESS_TOKEN)", dataDir)
	}
	if err != nil {
		return info, fmt.Errorf("reading the address of the server in %s: %w", dataDir, err)
	}
	if err := json.Unmarshal(data, &info); err != nil || info.Endpoint == "" {
		return info, fmt.Errorf("%s is corrupt; restart the server or set SLESS_ENDPOINT", filepath.Join(dataDir, EndpointFile))
	}
	return info, nil
}
