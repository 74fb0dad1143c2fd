package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// object is a JSON object of the document; encoding/json sorts its keys, so
// the document's bytes depend only on its content.
type object = map[string]any

// schemas turns Go types into JSON Schemas (the dialect of OpenAPI 3.1) as
// encoding/json encodes them: a named struct becomes a component, referenced
// wherever it is used, embedded structs without a JSON name lend their
// fields to the outer object, omitempty and omitzero fields are optional.
type schemas struct {
	docs       *sourceDocs
	components object
	// names maps a struct type to its component name; types missing from
	// it are named after their Go name.
	names map[reflect.Type]string
	// byName catches two types that would share a component.
	byName map[string]reflect.Type
	// requests are the types sent as request bodies: only their read-only
	// fields are required, since the server fills the others in.
	requests map[reflect.Type]bool
	err      error
}

func newSchemas(docs *sourceDocs) *schemas {
	return &schemas{docs: docs, components: object{}, names: map[reflect.Type]string{}, byName: map[string]reflect.Type{},
		requests: map[reflect.Type]bool{}}
}

// fieldKey names a field for the overrides below: the Go package's name,
// the declaring struct's Go name, the field's JSON name.
func fieldKey(owner reflect.Type, jsonName string) string {
	pkg := owner.PkgPath()
	return pkg[strings.LastIndex(pkg, "/")+1:] + "." + baseName(owner) + "." + jsonName
}

// baseName is a type's Go name without its type arguments.
func baseName(t reflect.Type) string {
	name, _, _ := strings.Cut(t.Name(), "[")
	return name
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// ref returns the schema of t, registering the components it needs.
func (s *schemas) ref(t reflect.Type) object {
	switch t {
	case timeType:
		return object{"type": "string", "format": "date-time"}
	case rawType:
		return object{"description": "any JSON value"}
	}
	if e, ok := enums[t]; ok {
		return object{"type": "string", "enum": e}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.ref(t.Elem())
	case reflect.String:
		return object{"type": "string"}
	case reflect.Bool:
		return object{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return object{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return object{"type": "number"}
	case reflect.Slice, reflect.Array:
		return object{"type": "array", "items": s.ref(t.Elem())}
	case reflect.Map:
		return object{"type": "object", "additionalProperties": s.ref(t.Elem())}
	case reflect.Interface:
		return object{}
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		name := s.names[t]
		if name == "" {
			name = baseName(t)
		}
		if other, ok := s.byName[name]; ok && other != t {
			s.fail(fmt.Errorf("types %v and %v would both be the schema %q; name one in the names table", other, t, name))
		}
		if _, ok := s.byName[name]; !ok {
			s.byName[name] = t
			s.components[name] = object{} // a placeholder against recursion
			sc := s.object(t)
			if d := s.docs.typeDoc(t); d != "" {
				sc["description"] = d
			}
			s.components[name] = sc
		}
		return object{"$ref": "#/components/schemas/" + name}
	}
	s.fail(fmt.Errorf("type %v has no JSON Schema", t))
	return object{}
}

func (s *schemas) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// object is the schema of struct t's fields: its own and those of the
// structs it embeds without a JSON name. JSON never has other fields.
func (s *schemas) object(t reflect.Type) object {
	props := object{}
	var required []string
	s.fields(t, t, props, &required)
	sc := object{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sc["required"] = required
	}
	return sc
}

func (s *schemas) fields(top, t reflect.Type, props object, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				s.fields(top, ft, props, required)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := fieldKey(t, name)
		var sc object
		if e, ok := fieldEnums[key]; ok {
			sc = object{"type": "string", "enum": e}
		} else {
			sc = s.ref(f.Type)
		}
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if !optional && f.Type.Kind() == reflect.Slice {
			// A nil slice encodes as null.
			sc = object{"anyOf": []any{sc, object{"type": "null"}}}
		}
		readOnly := readOnlyFields[key]
		if d := s.docs.fieldDoc(t, f.Name); d != "" || readOnly {
			if readOnly {
				d = strings.TrimSpace(d + " Set by the server; ignored in requests.")
			}
			if _, isRef := sc["$ref"]; isRef {
				// A $ref's siblings are allowed in OpenAPI 3.1's dialect.
				sc = object{"$ref": sc["$ref"]}
			}
			sc["description"] = d
		}
		if readOnly {
			sc["readOnly"] = true
		}
		props[name] = sc
		if !optional && (readOnly || !s.requests[top]) {
			*required = append(*required, name)
		}
	}
}
