package trstoretest_test

import (
	"testing"

	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/trstoretest"
)

// The in-memory stores that unit tests use honour the contract they stand
// in for.
func TestMemoryTriggers(t *testing.T) {
	trstoretest.RunTriggers(t, func(*testing.T) triggers.Store { return trstoretest.NewTriggers() })
}

func TestMemoryJobs(t *testing.T) {
	trstoretest.RunJobs(t, func(*testing.T) triggers.JobStore { return trstoretest.NewJobs() })
}
