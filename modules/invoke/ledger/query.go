package ledger

import (
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
)

// Status filters of invoke.Query besides a status code.
const (
	statusSuccess = "success"
	statusError   = "error"
)

// failedStatus is the first status code that counts as an error.
const failedStatus = 400

// triggerKinds are the kinds a query may select.
var triggerKinds = []string{invoke.KindHTTP, invoke.KindCron, invoke.KindRabbitMQ, invoke.KindJob, invoke.KindCLI}

// validateQuery checks the fields of q that a typo can make select nothing,
// so that the caller learns of the typo instead.
func validateQuery(q invoke.Query) error {
	errs := &validation.Errors{Resource: "invocation query"}
	if !validStatus(q.Status) {
		errs.Add("status", "must be %q, %q or an HTTP status code from 100 to 599 (got %q)", statusSuccess, statusError, q.Status)
	}
	if q.TriggerKind != "" && !slices.Contains(triggerKinds, q.TriggerKind) {
		errs.Add("trigger_kind", "must be one of %s (got %q)", strings.Join(triggerKinds, ", "), q.TriggerKind)
	}
	if q.Continue != "" && !isCanonicalUUID(q.Continue) {
		errs.Add("continue", "must be the continue token of a previous page, an invocation id (got %q)", q.Continue)
	}
	return errs.Err()
}

// validStatus reports whether s is one of the status filters of
// invoke.Query.
func validStatus(s string) bool {
	switch s {
	case "", statusSuccess, statusError:
		return true
	}
	_, ok := statusCode(s)
	return ok
}

// statusCode parses a status filter that is one status code.
func statusCode(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 100 && n <= 599
}

// isCanonicalUUID reports whether s is a UUID in the lower-case hyphenated
// form of stored ids: other forms would compare wrongly with them.
func isCanonicalUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

// filter adds q's conditions to tx; q is valid.
func filter(tx *gorm.DB, q invoke.Query) *gorm.DB {
	if q.Function != "" {
		tx = tx.Where("function = ?", q.Function)
	}
	switch q.Status {
	case "":
	case statusSuccess:
		tx = tx.Where("status_code < ?", failedStatus)
	case statusError:
		tx = tx.Where("status_code >= ?", failedStatus)
	default:
		code, _ := statusCode(q.Status)
		tx = tx.Where("status_code = ?", code)
	}
	if q.TriggerKind != "" {
		tx = tx.Where("trigger_kind = ?", q.TriggerKind)
	}
	if q.TriggerName != "" {
		tx = tx.Where("trigger_name = ?", q.TriggerName)
	}
	if q.Continue != "" {
		tx = tx.Where("id < ?", q.Continue)
	}
	return tx
}
