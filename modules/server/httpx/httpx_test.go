package httpx_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/triggers"
)

func init() { gin.SetMode(gin.TestMode) }

// decode runs DecodeJSON on body into v and returns the error message a
// client would get.
func decode(t *testing.T, body string, v any) string {
	t.Helper()
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	err := httpx.DecodeJSON(c, v)
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDecodeJSONTypeErrorsUseJSONTerms(t *testing.T) {
	tests := []struct {
		name, body string
		into       func() any
		want       string
	}{
		{"embedded spec field", `{"timeout_seconds": "30"}`, func() any { return &functions.Function{} },
			`invalid JSON body: field "timeout_seconds" must be a whole number, not a string`},
		{"fraction for a whole number", `{"memory_mb": 1.5}`, func() any { return &functions.Function{} },
			`invalid JSON body: field "memory_mb" must be a whole number, not 1.5`},
		{"array body", `[{"name": "x"}]`, func() any { return &functions.Function{} },
			`invalid JSON body: the body must be an object, not an array`},
		{"map value", `{"env": {"A": 1}}`, func() any { return &functions.Function{} },
			`invalid JSON body: each value of field "env" must be a string, not a number`},
		{"map", `{"env": ["A"]}`, func() any { return &functions.Function{} },
			`invalid JSON body: field "env" must be an object, not an array`},
		{"nested struct", `{"status": {"phase": 3}}`, func() any { return &functions.Function{} },
			`invalid JSON body: field "status.phase" must be a string, not a number`},
		{"job run_id", `{"run_id": "1"}`, func() any { return &triggers.Job{} },
			`invalid JSON body: field "run_id" must be a whole number, not a string`},
		{"twice embedded", `{"prewarm_seconds": true}`, func() any { return &triggers.Trigger{} },
			`invalid JSON body: field "prewarm_seconds" must be a whole number, not a boolean`},
		{"pointer to bool", `{"enabled": "yes"}`, func() any { return &triggers.Trigger{} },
			`invalid JSON body: field "enabled" must be a boolean, not a string`},
		{"pointer to int", `{"max_retries": {}}`, func() any { return &triggers.Trigger{} },
			`invalid JSON body: field "max_retries" must be a whole number, not an object`},
		{"time given a number", `{"created_at": 5}`, func() any { return &functions.Function{} },
			`invalid JSON body: times must be RFC 3339 strings such as "2026-01-02T15:04:05Z"`},
		{"time given other text", `{"created_at": "yesterday"}`, func() any { return &triggers.Job{} },
			`invalid JSON body: times must be RFC 3339 strings such as "2026-01-02T15:04:05Z"`},
		{"string given an object", `{"name": {}}`, func() any { return &triggers.Trigger{} },
			`invalid JSON body: field "name" must be a string, not an object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decode(t, tt.body, tt.into()); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestDecodeJSONAcceptsValidBody(t *testing.T) {
	var fn functions.Function
	if msg := decode(t, `{"name": "a", "timeout_seconds": 5, "env": {"A": "b"}}`, &fn); msg != "" {
		t.Fatalf("got error %s", msg)
	}
	if got, _ := json.Marshal(fn.Env); fn.TimeoutSeconds != 5 || string(got) != `{"A":"b"}` {
		t.Errorf("got timeout %d env %s, want 5 and {\"A\":\"b\"}", fn.TimeoutSeconds, got)
	}
}

// TestEmptyListIsAnArray: a page without items is [], never null, as the
// OpenAPI document's list schemas say.
func TestEmptyListIsAnArray(t *testing.T) {
	b, err := json.Marshal(httpx.NewListResponse[string](nil, false, func(s string) string { return s }))
	if err != nil || string(b) != `{"items":[]}` {
		t.Errorf("an empty page: %s, %v; want {\"items\":[]}", b, err)
	}
}
