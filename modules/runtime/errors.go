package runtime

import "errors"

// Error is a failure of an executor or an instance with the message its
// function's caller may be told. Executors return their failures as *Error
// (or wrap one), so that a caller never cuts a message out of an error's
// text.
type Error struct {
	// Kind is the sentinel the failure is, such as ErrStart or ErrCrashed;
	// errors.Is(err, Kind) holds.
	Kind error
	// Public says what happened in the function's terms, for its caller and
	// the invocation's record: no server paths, no Go types, e.g. "exit
	// status 7" or "the body exceeds the limit of 6 MiB".
	Public string
	// Cause is the underlying failure, for the server's log only; nil when
	// there is none. errors.Is and errors.As see it too, which is how
	// ErrNotSent comes with ErrCrashed.
	Cause error
}

// Errorf returns an *Error of kind with the public message public and the
// cause, which may be nil.
func Errorf(kind error, public string, cause error) *Error {
	return &Error{Kind: kind, Public: public, Cause: cause}
}

// Error is the whole message, cause included: for logs.
func (e *Error) Error() string {
	s := e.Kind.Error()
	if e.Public != "" {
		s += ": " + e.Public
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the kind and the cause, so that errors.Is matches both.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// PublicMessage returns the public message of the first *Error in err's
// chain, or fallback when there is none or its message is empty.
func PublicMessage(err error, fallback string) string {
	if e, ok := errors.AsType[*Error](err); ok && e.Public != "" {
		return e.Public
	}
	return fallback
}
