package runtime_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"sless.kube5s.ru/sless/modules/runtime"
)

func TestErrorKeepsTheCauseOutOfThePublicMessage(t *testing.T) {
	cause := &os.PathError{Op: "fork/exec", Path: "/var/lib/sless/secret/python3", Err: os.ErrPermission}
	err := fmt.Errorf("starting: %w", runtime.Errorf(runtime.ErrStart, "the instance could not be started", cause))
	if !errors.Is(err, runtime.ErrStart) || !errors.Is(err, os.ErrPermission) {
		t.Errorf("errors.Is does not see the kind and the cause of %v", err)
	}
	if got := runtime.PublicMessage(err, "fallback"); got != "the instance could not be started" {
		t.Errorf("PublicMessage = %q", got)
	}
	want := "starting: function instance failed to start: the instance could not be started: fork/exec /var/lib/sless/secret/python3: permission denied"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q (the log's message, with the cause)", err.Error(), want)
	}
}

func TestErrorCarriesNotSentWithCrashed(t *testing.T) {
	err := runtime.Errorf(runtime.ErrCrashed, "the instance stopped", runtime.ErrNotSent)
	if !errors.Is(err, runtime.ErrCrashed) || !errors.Is(err, runtime.ErrNotSent) {
		t.Errorf("%v is not both ErrCrashed and ErrNotSent", err)
	}
}

func TestPublicMessageFallsBack(t *testing.T) {
	for _, err := range []error{
		errors.New("read unix /run/x.sock: connection reset"),
		runtime.Errorf(runtime.ErrCrashed, "", errors.New("cause")),
	} {
		if got := runtime.PublicMessage(err, "the instance failed"); got != "the instance failed" {
			t.Errorf("PublicMessage(%v) = %q, want the fallback", err, got)
		}
	}
}
