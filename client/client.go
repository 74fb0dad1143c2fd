// Package client is the Go client of the sless REST API v1, used by the CLI
// and the Terraform provider.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"sless.kube5s.ru/sless/internal/discovery"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
)

// Client calls one sless server. It is safe for concurrent use.
type Client struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:8080.
	Endpoint string
	// Token is the API token sent as a bearer token.
	Token string
	// HTTP is the HTTP client; nil means one with a 60 s timeout.
	HTTP *http.Client
}

// FromEnv returns a client for SLESS_ENDPOINT and SLESS_TOKEN, as Resolve
// finds it; its errors name those variables.
func FromEnv() (*Client, error) {
	return resolve(os.Getenv("SLESS_ENDPOINT"), os.Getenv("SLESS_TOKEN"), "SLESS_ENDPOINT", "SLESS_TOKEN")
}

// Resolve returns a client for endpoint and token, which may be empty. With
// no endpoint it finds the server running from the data directory
// (SLESS_DATA_DIR, else the default one) and its generated token; with an
// endpoint but no token it takes the generated token only when the endpoint
// names that same server. An endpoint without a scheme (HOST:PORT) is http.
// Its errors call the settings "endpoint" and "token".
func Resolve(endpoint, token string) (*Client, error) {
	return resolve(endpoint, token, "endpoint", "token")
}

// resolve is Resolve, naming the settings endpointName and tokenName in its
// errors.
func resolve(endpoint, token, endpointName, tokenName string) (*Client, error) {
	dir := os.Getenv("SLESS_DATA_DIR")
	if dir == "" {
		var err error
		if dir, err = discovery.DefaultDataDir(); err != nil {
			return nil, err
		}
	}
	if endpoint == "" {
		found, foundToken, err := discovery.Read(dir)
		if err != nil {
			return nil, err
		}
		endpoint = found
		if token == "" {
			token = foundToken
		}
	} else {
		var err error
		if endpoint, err = parseEndpoint(endpoint); err != nil {
			return nil, fmt.Errorf("%s %w", endpointName, err)
		}
		if token == "" {
			// Only to the local server: its token goes nowhere else.
			if found, foundToken, err := discovery.Read(dir); err == nil && sameServer(found, endpoint) {
				token = foundToken
			}
		}
	}
	if token == "" {
		return nil, fmt.Errorf("no API token for %s: set %s", endpoint, tokenName)
	}
	return &Client{Endpoint: endpoint, Token: token}, nil
}

// parseEndpoint returns the base URL of the server that an endpoint setting
// names, as a URL or as HOST:PORT, without a trailing slash. Its error
// starts with the quoted setting, for the caller to prefix with its name.
func parseEndpoint(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not a server address: use http://HOST:PORT, https://HOST or HOST:PORT", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// sameServer reports whether the base URLs a and b reach the same server on
// this machine: the same scheme, port and path, and the same host, with the
// loopback and unspecified addresses and localhost all meaning this machine.
func sameServer(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil || ua.Scheme != ub.Scheme || port(ua) != port(ub) || strings.TrimRight(ua.Path, "/") != strings.TrimRight(ub.Path, "/") {
		return false
	}
	return ua.Hostname() == ub.Hostname() || (local(ua.Hostname()) && local(ub.Hostname()))
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

func local(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// APIError is an error response of the API.
type APIError struct {
	StatusCode int
	Message    string
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Message, e.StatusCode) }

// IsNotFound reports whether err is an API 404.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound
}

// decodeError turns an error response into an *APIError.
func decodeError(code int, status string, body []byte) error {
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
		eb.Error = strings.TrimSpace(string(body))
		if eb.Error == "" {
			eb.Error = status
		}
	}
	return &APIError{StatusCode: code, Message: eb.Error}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 60 * time.Second}
}

// send sends an authenticated request to path (below the endpoint) with an
// optional body through hc and returns the answer with its body read.
func (c *Client) send(ctx context.Context, hc *http.Client, method, path string, body io.Reader, contentType string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Endpoint+path, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("no sless server is listening at %s (is it running? SLESS_ENDPOINT picks another): %w", c.Endpoint, err)
		}
		return nil, nil, fmt.Errorf("calling sless at %s: %w", c.Endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer of %s %s: %w", method, path, err)
	}
	return resp, data, nil
}

// do sends a request to path (below the endpoint) with an optional body and
// decodes a JSON answer into out (when out is non-nil).
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	resp, data, err := c.send(ctx, c.httpClient(), method, path, body, contentType)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return decodeError(resp.StatusCode, resp.Status, data)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
		}
	}
	return nil
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	return c.do(ctx, method, path, body, ct, out)
}

// Whoami returns the namespace of the client's token.
func (c *Client) Whoami(ctx context.Context) (string, error) {
	var out struct {
		Namespace string `json:"namespace"`
	}
	err := c.doJSON(ctx, http.MethodGet, "/v1/whoami", nil, &out)
	return out.Namespace, err
}

// objPath is the API path of the kind's collection in namespace ns, or of
// the object name in it.
func objPath(kind, ns, name string) string {
	p := "/v1/namespaces/" + url.PathEscape(ns) + "/" + kind
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// listAll follows the pages of a list call.
func listAll[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	var all []T
	after := ""
	for {
		var page struct {
			Items    []T    `json:"items"`
			Continue string `json:"continue"`
		}
		p := path + "?limit=" + fmt.Sprint(validation.MaxPageSize)
		if after != "" {
			p += "&continue=" + url.QueryEscape(after)
		}
		if err := c.doJSON(ctx, http.MethodGet, p, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Continue == "" {
			return all, nil
		}
		after = page.Continue
	}
}

// CreateFunction creates fn in its namespace.
func (c *Client) CreateFunction(ctx context.Context, fn *functions.Function) (*functions.Function, error) {
	var out functions.Function
	return &out, c.doJSON(ctx, http.MethodPost, objPath("functions", fn.Namespace, ""), fn, &out)
}

// UpdateFunction replaces the spec of fn.
func (c *Client) UpdateFunction(ctx context.Context, fn *functions.Function) (*functions.Function, error) {
	var out functions.Function
	return &out, c.doJSON(ctx, http.MethodPut, objPath("functions", fn.Namespace, fn.Name), fn, &out)
}

// GetFunction returns one function.
func (c *Client) GetFunction(ctx context.Context, ns, name string) (*functions.Function, error) {
	var out functions.Function
	return &out, c.doJSON(ctx, http.MethodGet, objPath("functions", ns, name), nil, &out)
}

// ListFunctions returns every function of a namespace, following pages.
func (c *Client) ListFunctions(ctx context.Context, ns string) ([]*functions.Function, error) {
	return listAll[*functions.Function](ctx, c, objPath("functions", ns, ""))
}

// DeleteFunction deletes a function with its triggers and jobs and returns
// what was deleted.
func (c *Client) DeleteFunction(ctx context.Context, ns, name string) (*functions.Deletion, error) {
	var out functions.Deletion
	return &out, c.do(ctx, http.MethodDelete, objPath("functions", ns, name), nil, "", &out)
}

// UploadCode uploads a zip as the function's code.
func (c *Client) UploadCode(ctx context.Context, ns, name string, zip []byte) (*functions.Function, error) {
	var out functions.Function
	return &out, c.do(ctx, http.MethodPost, objPath("functions", ns, name)+"/upload", bytes.NewReader(zip), "application/zip", &out)
}

// Runtime is one runtime a server knows, as GET /v1/runtimes describes it.
type Runtime struct {
	Name           string `json:"name"`
	DefaultHandler string `json:"default_handler"`
	// DependencyFile is the manifest whose dependencies builds install.
	DependencyFile string `json:"dependency_file,omitempty"`
}

// ListRuntimes returns the runtimes the server knows.
func (c *Client) ListRuntimes(ctx context.Context) ([]Runtime, error) {
	var out struct {
		Items []Runtime `json:"items"`
	}
	return out.Items, c.doJSON(ctx, http.MethodGet, "/v1/runtimes", nil, &out)
}

// InvokeURL returns the URL that invokes a function over HTTP.
func (c *Client) InvokeURL(ns, name string) string {
	return c.Endpoint + "/fn/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

// WaitSettled polls a function until its status describes generation gen (or
// a later one) and is Ready or Failed, calling progress whenever the phase or
// message changes. It returns the settled function; the caller checks its
// phase.
func (c *Client) WaitSettled(ctx context.Context, ns, name string, gen int64, progress func(*functions.Function)) (*functions.Function, error) {
	var last functions.Status
	return poll(ctx, "function "+ns+"/"+name, func() (*functions.Function, error) { return c.GetFunction(ctx, ns, name) },
		func(fn *functions.Function) (bool, string) {
			if fn.Status.Phase != last.Phase || fn.Status.Message != last.Message {
				last = fn.Status
				if progress != nil {
					progress(fn)
				}
			}
			settled := fn.Status.ObservedGeneration >= gen &&
				(fn.Status.Phase == functions.PhaseReady || fn.Status.Phase == functions.PhaseFailed)
			return settled, "phase " + string(fn.Status.Phase)
		})
}

// poll calls get, backing off from 25 ms to 1 s, until done reports true or
// ctx ends; done also describes the state for the timeout's error.
func poll[T any](ctx context.Context, what string, get func() (T, error), done func(T) (bool, string)) (T, error) {
	interval := 25 * time.Millisecond
	for {
		v, err := get()
		if err != nil {
			return v, err
		}
		ok, state := done(v)
		if ok {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("waiting for %s: %w (%s)", what, context.Cause(ctx), state)
		case <-time.After(interval):
		}
		interval = min(interval*2, time.Second)
	}
}

// InvokeResult is a function's answer to Invoke.
type InvokeResult struct {
	InvocationID string
	StatusCode   int
	Header       http.Header
	Body         []byte
}

// Invoke runs a function once with body as its event, through the
// authenticated API (it works whether or not the function is exposed on /fn).
// A function's error status is a result, not an error.
func (c *Client) Invoke(ctx context.Context, ns, name string, body []byte) (*InvokeResult, error) {
	hc := *c.httpClient()
	hc.Timeout = 0 // the function's own timeout bounds the call
	resp, data, err := c.send(ctx, &hc, http.MethodPost, objPath("functions", ns, name)+"/invoke", bytes.NewReader(body), "application/json")
	if err != nil {
		return nil, err
	}
	id := resp.Header.Get("X-Sless-Invocation-Id")
	if id == "" {
		// Refused before an invocation existed (authentication, routing).
		return nil, decodeError(resp.StatusCode, resp.Status, data)
	}
	return &InvokeResult{InvocationID: id, StatusCode: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// ListInvocations returns a page of the invocations of function name that
// q selects (q.Function is not used), newest first, and the continue token
// of the next page.
func (c *Client) ListInvocations(ctx context.Context, ns, name string, q invoke.Query) ([]*invoke.Record, string, error) {
	v := url.Values{}
	for k, s := range map[string]string{"status": q.Status, "trigger_kind": q.TriggerKind, "trigger_name": q.TriggerName, "continue": q.Continue} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	var page struct {
		Items    []*invoke.Record `json:"items"`
		Continue string           `json:"continue"`
	}
	err := c.doJSON(ctx, http.MethodGet, objPath("functions", ns, name)+"/invocations?"+v.Encode(), nil, &page)
	return page.Items, page.Continue, err
}

// GetInvocation returns one invocation with its logs.
func (c *Client) GetInvocation(ctx context.Context, ns, id string) (*invoke.Record, error) {
	var out invoke.Record
	return &out, c.doJSON(ctx, http.MethodGet, objPath("invocations", ns, id), nil, &out)
}

// Metrics returns the series of namespace ns in the Prometheus text format,
// as the server's /metrics has them (GET /v1/namespaces/{ns}/metrics).
func (c *Client) Metrics(ctx context.Context, ns string) ([]byte, error) {
	path := "/v1/namespaces/" + url.PathEscape(ns) + "/metrics"
	resp, data, err := c.send(ctx, c.httpClient(), http.MethodGet, path, nil, "")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, decodeError(resp.StatusCode, resp.Status, data)
	}
	return data, nil
}
