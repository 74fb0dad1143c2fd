// Package openapi generates the OpenAPI 3.1 document of sless's REST API
// (docs/openapi.json, which the server serves at /v1/openapi.json) from the
// table of operations in api.go and the Go types of the requests and
// responses, whose doc comments become the descriptions.
//
// The document cannot drift from the code: the schemas are reflected from
// the types the handlers encode, TestDocumentIsCurrent fails while
// docs/openapi.json differs from what Generate makes (hack/generate.sh
// regenerates it), and app's TestOpenAPIMatchesRoutes fails while a gin
// route of the server is missing from the table, or the table has one the
// server does not serve.
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sless.kube5s.ru/sless/modules/server/httpx"
)

// Operation is one route of the API as the document describes it.
type Operation struct {
	// Method is an HTTP method, or "ANY" for a route gin serves for every
	// method (/fn).
	Method string
	// Path is the gin route pattern: ":name" parameters, a trailing
	// "*path" catch-all.
	Path string
	ID   string
	Tag  string
	// Summary is one line; Description may say more.
	Summary, Description string
	// Public operations need no token.
	Public bool
	// Query lists the names of the query parameters (keys of
	// queryParameters).
	Query []string
	// Body is the request body: nil for none, a media value for a body
	// that is not JSON, else a value of the Go type the handler decodes.
	Body any
	// Status is the status of success; Result its body: nil for none, a
	// media value, or a value of the Go type the handler encodes.
	Status int
	Result any
	// ResultHeaders names the response headers of success (keys of
	// headers).
	ResultHeaders []string
	// Errors are the statuses of failure besides those of every
	// authenticated route (401) and every namespaced one (400, 403).
	Errors []int
}

// media describes a body that is not JSON of a Go type.
type media struct {
	description string
	content     object
}

// Methods returns the HTTP methods of op: for ANY, those gin registers
// with Any (CONNECT included, which /fn refuses and the document leaves
// out since OpenAPI has no such operation).
func (op Operation) Methods() []string {
	if op.Method == "ANY" {
		return []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodHead,
			http.MethodOptions, http.MethodDelete, http.MethodConnect, http.MethodTrace}
	}
	return []string{op.Method}
}

// OpenAPIPath is op's path in the document's syntax: {name} parameters.
func (op Operation) OpenAPIPath() string {
	parts := strings.Split(op.Path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// pathParams are op's path parameters in order.
func (op Operation) pathParams() []string {
	var names []string
	for p := range strings.SplitSeq(op.Path, "/") {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			names = append(names, p[1:])
		}
	}
	return names
}

// Generate returns the document, indented, with the descriptions read from
// the Go source under root (the module's root directory).
func Generate(root string) ([]byte, error) {
	docs := newSourceDocs(root)
	s := newSchemas(docs)
	for t, name := range schemaNames {
		s.names[t] = name
	}
	for _, op := range Operations {
		if op.Body != nil {
			if _, ok := op.Body.(media); !ok {
				s.requests[reflect.TypeOf(op.Body)] = true
			}
		}
	}
	paths := object{}
	for _, op := range Operations {
		item, _ := paths[op.OpenAPIPath()].(object)
		if item == nil {
			item = object{}
			paths[op.OpenAPIPath()] = item
		}
		for _, m := range op.Methods() {
			if m == http.MethodConnect {
				continue
			}
			o := operation(s, op)
			if len(op.Methods()) > 1 {
				o["operationId"] = op.ID + strings.ToUpper(m[:1]) + strings.ToLower(m[1:])
			}
			item[strings.ToLower(m)] = o
		}
	}
	errorRef := s.ref(reflect.TypeFor[httpx.ErrorBody]())
	responses := object{}
	for code, desc := range errorResponses {
		responses[errorResponseName(code)] = object{"description": desc,
			"content": object{"application/json": object{"schema": errorRef}}}
	}
	params := object{}
	for name, p := range pathParameters {
		params[name] = object{"name": name, "in": "path", "required": true, "description": p, "schema": object{"type": "string"}}
	}
	for name, p := range queryParameters {
		params[name] = object{"name": name, "in": "query", "description": p.description, "schema": p.schema}
	}
	hdrs := object{}
	for name, h := range headers {
		hdrs[name] = object{"description": h, "schema": object{"type": "string"}}
	}
	doc := object{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
		"info": object{
			"title":       "sless",
			"version":     "v1",
			"description": apiDescription,
		},
		"tags":     tags,
		"paths":    paths,
		"security": []any{object{"bearer": []any{}}},
		"components": object{
			"securitySchemes": object{"bearer": object{"type": "http", "scheme": "bearer",
				"description": "An API token: the server's own (an admin of every namespace), or one made with POST /v1/tokens, " +
					"which acts in one namespace (or only invokes one function)."}},
			"schemas":    s.components,
			"responses":  responses,
			"parameters": params,
			"headers":    hdrs,
		},
	}
	if s.err != nil {
		return nil, s.err
	}
	if docs.err != nil {
		return nil, docs.err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encoding the document: %w", err)
	}
	return buf.Bytes(), nil
}

// errorResponseName is the component of the responses with status code.
func errorResponseName(code int) string {
	return strings.ReplaceAll(http.StatusText(code), " ", "")
}

func operation(s *schemas, op Operation) object {
	o := object{"operationId": op.ID, "summary": op.Summary, "tags": []any{op.Tag}}
	if op.Description != "" {
		o["description"] = op.Description
	}
	if op.Public {
		o["security"] = []any{}
	}
	var params []any
	for _, p := range op.pathParams() {
		params = append(params, object{"$ref": "#/components/parameters/" + p})
	}
	for _, q := range op.Query {
		params = append(params, object{"$ref": "#/components/parameters/" + q})
	}
	if params != nil {
		o["parameters"] = params
	}
	if op.Body != nil {
		if m, ok := op.Body.(media); ok {
			o["requestBody"] = object{"description": m.description, "content": m.content}
		} else {
			o["requestBody"] = object{"required": true,
				"content": object{"application/json": object{"schema": s.ref(reflect.TypeOf(op.Body))}}}
		}
	}
	ok := object{"description": http.StatusText(op.Status)}
	switch r := op.Result.(type) {
	case nil:
	case media:
		ok["description"] = r.description
		ok["content"] = r.content
	default:
		ok["content"] = object{"application/json": object{"schema": s.ref(reflect.TypeOf(op.Result))}}
	}
	if len(op.ResultHeaders) > 0 {
		h := object{}
		for _, name := range op.ResultHeaders {
			h[name] = object{"$ref": "#/components/headers/" + name}
		}
		ok["headers"] = h
	}
	responses := object{strconv.Itoa(op.Status): ok}
	codes := slices.Clone(op.Errors)
	if !op.Public {
		codes = append(codes, http.StatusUnauthorized)
	}
	if slices.Contains(op.pathParams(), "ns") && !op.Public {
		codes = append(codes, http.StatusBadRequest, http.StatusForbidden)
	}
	if !op.Public || strings.HasPrefix(op.Path, "/fn/") {
		codes = append(codes, http.StatusInternalServerError)
	}
	for _, c := range codes {
		if _, ok := errorResponses[c]; !ok {
			s.fail(fmt.Errorf("operation %s: no error response %d", op.ID, c))
			continue
		}
		responses[strconv.Itoa(c)] = object{"$ref": "#/components/responses/" + errorResponseName(c)}
	}
	o["responses"] = responses
	return o
}
