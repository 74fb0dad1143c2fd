// Package httpx holds what every module's REST handlers share: handlers that
// return errors, the typed Error that carries a status and a public message,
// strict JSON decoding, and the Routes contract that modules implement to
// mount their handlers.
package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/auth"
)

// RoutesGroup is the fx value-group tag of Routes.
const RoutesGroup = `group:"httpx.routes"`

// Routes is implemented by modules that serve HTTP. V1 is the /v1 group,
// behind authentication; Root is the engine, for public paths such as /fn.
type Routes interface {
	Register(v1 *gin.RouterGroup, root *gin.Engine)
}

// FastRoute is implemented by Routes whose requests the server's front
// serves itself, before net/http and gin, on the connections they arrive on
// (the data plane's /fn). ServeFast must answer exactly as the gin routes
// of the same paths do; the front hands any request it cannot serve as
// net/http would to net/http, where those gin routes answer it.
type FastRoute interface {
	// FastRoute returns the gin route pattern (the metrics label) that
	// serves path, the request target's path as the client sent it, or ""
	// when the gin routes are to answer it.
	FastRoute(path string) string
	// ServeFast answers r. w frames the response itself: the handler's
	// Connection, Transfer-Encoding and Trailer headers are not sent, and
	// the header is final once WriteHeader is called. abort asks for the
	// connection to be closed instead of ending the response, as
	// panic(http.ErrAbortHandler) does in net/http.
	ServeFast(w http.ResponseWriter, r *http.Request) (abort bool)
}

// Error is an error with an HTTP status and a message safe to show clients.
type Error struct {
	Code int
	// Msg is shown to the client.
	Msg string
	// Err is the internal cause; it is logged, never sent.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted public message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	// Fields lists the invalid fields of a validation error.
	Fields []validation.FieldError `json:"fields,omitempty"`
}

// HandlerFunc is a gin handler that returns an error instead of writing it.
type HandlerFunc func(c *gin.Context) error

// Handle adapts h: a *Error becomes its status and message, a
// *validation.Errors a 400 listing its fields, anything else a logged 500
// with a generic message.
func Handle(log *slog.Logger, h HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := h(c); err != nil {
			WriteError(c, log, err)
		}
	}
}

// WriteError writes err as Handle does.
func WriteError(c *gin.Context, log *slog.Logger, err error) {
	c.Abort()
	writeError(c.Writer, c.Request, log, err)
}

// writeError is WriteError for any handler.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var he *Error
	var ve *validation.Errors
	switch {
	case errors.As(err, &ve):
		WriteErrorBody(w, http.StatusBadRequest, ErrorBody{Error: ve.Error(), Fields: ve.Fields})
	case errors.As(err, &he):
		if he.Code >= 500 {
			log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", he.Code, "error", err)
		}
		WriteErrorBody(w, he.Code, ErrorBody{Error: he.Msg})
	default:
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		WriteErrorBody(w, http.StatusInternalServerError, ErrorBody{Error: "internal server error; the server log has the details"})
	}
}

// WriteAuthError answers a request whose token an auth.Authenticator
// refused or could not check: 401 for a token it does not accept, 503 when
// the identity service does not answer (the request is never let through),
// a logged 500 for anything else.
func WriteAuthError(c *gin.Context, log *slog.Logger, err error) {
	c.Abort()
	WriteAuthErrorHTTP(c.Writer, c.Request, log, err)
}

// WriteAuthErrorHTTP is WriteAuthError for a handler outside gin.
func WriteAuthErrorHTTP(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	switch {
	case errors.Is(err, auth.ErrExpired):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sless", error="invalid_token", error_description="the token has expired"`)
		WriteErrorBody(w, http.StatusUnauthorized, ErrorBody{Error: "the API token has expired"})
	case errors.Is(err, auth.ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sless", error="invalid_token"`)
		WriteErrorBody(w, http.StatusUnauthorized, ErrorBody{Error: "invalid API token"})
	case errors.Is(err, auth.ErrUnavailable):
		log.WarnContext(r.Context(), "cannot check a token", "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "5")
		WriteErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Error: "cannot check the API token: the identity service is unavailable; retry later"})
	default:
		writeError(w, r, log, fmt.Errorf("authenticating: %w", err))
	}
}

// WriteErrorBody answers with code and body, as gin's c.JSON writes them.
func WriteErrorBody(w http.ResponseWriter, code int, body ErrorBody) {
	b, _ := json.Marshal(body) // an ErrorBody always encodes
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// MaxJSONBytes caps JSON request bodies.
const MaxJSONBytes = 1 << 20

// DecodeJSON decodes the request body into v, rejecting unknown fields,
// trailing data and bodies over MaxJSONBytes with a 400 that says what is
// wrong and where.
func DecodeJSON(c *gin.Context, v any) error {
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, MaxJSONBytes+1))
	if err != nil {
		return Errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	if len(body) > MaxJSONBytes {
		return Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", MaxJSONBytes)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return Errorf(http.StatusBadRequest, "request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(http.StatusBadRequest, "invalid JSON body: %s", describeJSONError(err, body, reflect.TypeOf(v)))
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "invalid JSON body: unexpected data after the JSON object")
	}
	return nil
}

// describeJSONError says what is wrong with a body decoded into a value of
// type target, in the API's terms: JSON field paths and JSON types, never Go
// names (encoding/json's messages have both).
func describeJSONError(err error, body []byte, target reflect.Type) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(body, syn.Offset)
		return fmt.Sprintf("%s at line %d, column %d", syn.Error(), line, col)
	case errors.As(err, &typ):
		want, got := jsonType(typ.Type), jsonValue(typ.Value)
		if typ.Field == "" {
			return fmt.Sprintf("the body must be %s, not %s", want, got)
		}
		path, at := jsonPath(target, typ.Field)
		if at != nil && at.Kind() == reflect.Map && at != typ.Type {
			// encoding/json's path stops at the map, not at its key.
			return fmt.Sprintf("each value of field %q must be %s, not %s", path, want, got)
		}
		return fmt.Sprintf("field %q must be %s, not %s", path, want, got)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case errors.As(err, new(*time.ParseError)) || strings.HasPrefix(err.Error(), "Time.UnmarshalJSON"):
		// time.Time's own errors name neither the field nor JSON terms.
		return `times must be RFC 3339 strings such as "2026-01-02T15:04:05Z"`
	}
	// "json: unknown field \"x\"" and friends are clear already.
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonPath turns the path encoding/json reports for a field of t into the
// field's JSON path, and returns the field's type (nil when unknown):
// encoding/json includes the Go names of embedded structs
// ("Spec.timeout_seconds"), whose fields are the outer object's in JSON.
func jsonPath(t reflect.Type, goPath string) (string, reflect.Type) {
	var path []string
	for part := range strings.SplitSeq(goPath, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil {
			path = append(path, part)
			continue
		}
		switch t.Kind() {
		case reflect.Struct:
			if f, ok := t.FieldByName(part); ok && f.Anonymous && jsonName(f) == "" {
				t = f.Type
				continue
			}
			t = fieldType(t, part)
		case reflect.Map, reflect.Slice, reflect.Array:
			t = t.Elem()
		default:
			t = nil
		}
		path = append(path, part)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.Join(path, "."), t
}

// jsonName is the name a struct field's tag gives it, or "".
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// fieldType is the type of t's field (promoted ones included) that JSON
// calls name, or nil.
func fieldType(t reflect.Type, name string) reflect.Type {
	for _, f := range reflect.VisibleFields(t) {
		if !f.Anonymous && (jsonName(f) == name || jsonName(f) == "" && f.Name == name) {
			return f.Type
		}
	}
	return nil
}

// jsonType names the JSON type that decodes into t.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string" // []byte is base64 text
		}
		return "an array"
	case reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// jsonValue names the JSON value encoding/json describes as value: "string",
// "number", "number 1.5" (a number that does not fit), "bool", "array",
// "object".
func jsonValue(value string) string {
	switch {
	case value == "bool":
		return "a boolean"
	case strings.HasPrefix(value, "number "):
		return strings.TrimPrefix(value, "number ")
	case value == "array" || value == "object":
		return "an " + value
	}
	return "a " + value
}

func position(body []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for _, b := range body[:min(int(offset), len(body))] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// AsRoutes annotates a constructor of a Routes implementation so that
// fx.Provide adds its result to RoutesGroup.
func AsRoutes(ctor any) any {
	return fx.Annotate(ctor, fx.As(new(Routes)), fx.ResultTags(RoutesGroup))
}

// ListResponse is the body of every list call: a page of items and, when
// more follow, the token that gets the next page.
type ListResponse[T any] struct {
	Items []T `json:"items"`
	// Continue, when set, is passed as ?continue= to get the next page.
	Continue string `json:"continue,omitempty"`
}

// NewListResponse returns a page of items ordered by name (an empty page
// has an empty list, never null); when more follow, the continue token is
// the last item's name.
func NewListResponse[T any](items []T, more bool, name func(T) string) ListResponse[T] {
	if items == nil {
		items = []T{}
	}
	resp := ListResponse[T]{Items: items}
	if more && len(items) > 0 {
		resp.Continue = name(items[len(items)-1])
	}
	return resp
}

// PageLimit reads the ?limit= of a list call: validation.DefaultPageSize
// when it is absent, a 400 when it is not a number from 1 to
// validation.MaxPageSize.
func PageLimit(c *gin.Context) (int, error) {
	s := c.Query("limit")
	if s == "" {
		return validation.DefaultPageSize, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > validation.MaxPageSize {
		return 0, Errorf(http.StatusBadRequest, "limit must be a number between 1 and %d", validation.MaxPageSize)
	}
	return n, nil
}

// BindNames fills a body's namespace from the URL's :ns and, for an update,
// its name from :name, refusing a body that names others: objects of kind
// ("function") cannot move or be renamed.
func BindNames(c *gin.Context, kind string, ns, name *string, update bool) error {
	// %.64q: a valid name has at most 63 characters, the body's any number.
	if *ns != "" && *ns != c.Param("ns") {
		return Errorf(http.StatusBadRequest, "namespace %.64q in the body does not match %q in the URL", *ns, c.Param("ns"))
	}
	*ns = c.Param("ns")
	if update {
		if *name != "" && *name != c.Param("name") {
			return Errorf(http.StatusBadRequest, "name %.64q in the body does not match %q in the URL; %ss cannot be renamed", *name, c.Param("name"), kind)
		}
		*name = c.Param("name")
	}
	return nil
}
