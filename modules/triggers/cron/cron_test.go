package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/cron"
)

// start is the fake clock's time when a test begins.
var start = time.Date(2025, 1, 1, 10, 0, 30, 0, time.UTC)

func at(hour, minute, second int) time.Time {
	return time.Date(2025, 1, 1, hour, minute, second, 0, time.UTC)
}

func TestParseSchedule(t *testing.T) {
	moscow, err := time.LoadLocation("Europe/Moscow")
	if err != nil {
		t.Fatal(err)
	}
	valid := []struct {
		schedule, timezone string
		want               time.Time
	}{
		{"*/15 * * * *", "", at(10, 15, 0)},
		{"30 9-17 * * MON-FRI", "UTC", time.Date(2025, 1, 1, 10, 30, 0, 0, time.UTC)},
		{"  0 12 1 * *  ", "", time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)},
		{"@yearly", "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@annually", "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@monthly", "", time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"@weekly", "", time.Date(2025, 1, 5, 0, 0, 0, 0, time.UTC)},
		{"@daily", "", time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"@midnight", "", time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"@hourly", "", at(11, 0, 0)},
		{"@every 1s", "", at(10, 0, 31)},
		{"@every 90m", "", at(11, 30, 30)},
		// 10:00:30 UTC is 13:00:30 in Moscow: the next 09:00 there is tomorrow's.
		{"0 9 * * *", "Europe/Moscow", time.Date(2025, 1, 2, 9, 0, 0, 0, moscow)},
		{"@daily", "Europe/Moscow", time.Date(2025, 1, 2, 0, 0, 0, 0, moscow)},
	}
	for _, tc := range valid {
		s, err := cron.ParseSchedule(tc.schedule, tc.timezone)
		if err != nil {
			t.Errorf("ParseSchedule(%q, %q): %v", tc.schedule, tc.timezone, err)
			continue
		}
		got := s.Next(start)
		if !got.Equal(tc.want) {
			t.Errorf("ParseSchedule(%q, %q).Next(%s) = %s, want %s", tc.schedule, tc.timezone, start, got, tc.want)
		}
		if tc.timezone == "Europe/Moscow" && (got.Location().String() != "Europe/Moscow" || got.Hour() != tc.want.Hour()) {
			t.Errorf("ParseSchedule(%q, %q).Next = %s, want it in Moscow time", tc.schedule, tc.timezone, got)
		}
	}

	invalid := []struct {
		schedule, timezone string
		want               []validation.FieldError
	}{
		{"", "", []validation.FieldError{{Field: "schedule", Msg: `"": is required`}}},
		{"* * * *", "", []validation.FieldError{{Field: "schedule", Msg: `"* * * *": has 4 fields; want a 5-field expression`}}},
		{"0 * * * * *", "", []validation.FieldError{{Field: "schedule", Msg: `"0 * * * * *": has 6 fields`}}},
		{"61 * * * *", "", []validation.FieldError{{Field: "schedule", Msg: `"61 * * * *": minute field "61": end of range (61) above maximum (59)`}}},
		{"0 24 * * *", "", []validation.FieldError{{Field: "schedule", Msg: `hour field "24": end of range (24) above maximum (23)`}}},
		{"0 0 0 * *", "", []validation.FieldError{{Field: "schedule", Msg: `day-of-month field "0": beginning of range (0) below minimum (1)`}}},
		{"0 0 * 13 *", "", []validation.FieldError{{Field: "schedule", Msg: `month field "13"`}}},
		{"0 0 * * 8", "", []validation.FieldError{{Field: "schedule", Msg: `day-of-week field "8"`}}},
		{"x * * * *", "", []validation.FieldError{{Field: "schedule", Msg: `minute field "x": "x" is not a number`}}},
		{"*/x * * * *", "", []validation.FieldError{{Field: "schedule", Msg: `minute field "*/x": the step "x" is not a number`}}},
		{"0 0-x * * *", "", []validation.FieldError{{Field: "schedule", Msg: `hour field "0-x": "x" is not a number`}}},
		{"0 -1 * * *", "", []validation.FieldError{{Field: "schedule", Msg: `hour field "-1": "" is not a number`}}},
		{"0 0 * FOO *", "", []validation.FieldError{{Field: "schedule", Msg: `month field "FOO": "FOO" is neither a number nor one of JAN, FEB`}}},
		{"0 0 * * MONDAY", "", []validation.FieldError{{Field: "schedule", Msg: `day-of-week field "MONDAY": "MONDAY" is neither a number nor one of SUN, MON`}}},
		{"99999999999999999999 * * * *", "", []validation.FieldError{{Field: "schedule", Msg: `minute field "99999999999999999999": "99999999999999999999" is out of range`}}},
		{"0 0 30 2 *", "", []validation.FieldError{{Field: "schedule", Msg: `"0 0 30 2 *" never matches a date`}}},
		{"@fortnightly", "", []validation.FieldError{{Field: "schedule", Msg: `unknown descriptor; want a 5-field expression`}}},
		{"@every", "", []validation.FieldError{{Field: "schedule", Msg: `want "@every <duration>"`}}},
		{"@every 0s", "", []validation.FieldError{{Field: "schedule", Msg: `@every 0s: the interval must be at least 1s`}}},
		{"@every 500ms", "", []validation.FieldError{{Field: "schedule", Msg: `@every 500ms: the interval must be at least 1s`}}},
		{"@every -5s", "", []validation.FieldError{{Field: "schedule", Msg: `the interval must be at least 1s`}}},
		{"@every 1500ms", "", []validation.FieldError{{Field: "schedule", Msg: `must be a whole number of seconds`}}},
		{"@every soon", "", []validation.FieldError{{Field: "schedule", Msg: `@every soon: not a duration`}}},
		{"0 9 * * *", "Mars/Olympus_Mons", []validation.FieldError{{Field: "timezone", Msg: `unknown time zone "Mars/Olympus_Mons"`}}},
		{"0 9 * * *", "Local", []validation.FieldError{{Field: "timezone", Msg: `"Local" is not allowed`}}},
		{"CRON_TZ=Europe/Moscow 0 9 * * *", "", []validation.FieldError{{Field: "schedule", Msg: `must not set a time zone; use the timezone field`}}},
		{"TZ=UTC 0 9 * * *", "", []validation.FieldError{{Field: "schedule", Msg: `must not set a time zone`}}},
		{"61 * * * *", "Nowhere", []validation.FieldError{
			{Field: "timezone", Msg: `unknown time zone "Nowhere"`},
			{Field: "schedule", Msg: `minute field "61"`},
		}},
	}
	for _, tc := range invalid {
		_, err := cron.ParseSchedule(tc.schedule, tc.timezone)
		var verr *validation.Errors
		if !errors.As(err, &verr) {
			t.Errorf("ParseSchedule(%q, %q) = %v, want a *validation.Errors", tc.schedule, tc.timezone, err)
			continue
		}
		if len(verr.Fields) != len(tc.want) {
			t.Errorf("ParseSchedule(%q, %q) = %v, want %d field errors", tc.schedule, tc.timezone, err, len(tc.want))
			continue
		}
		for i, f := range verr.Fields {
			if strings.Contains(f.Msg, "strconv") {
				t.Errorf("ParseSchedule(%q, %q): field error %d = %s names Go's strconv", tc.schedule, tc.timezone, i, f.Msg)
			}
			if f.Field != tc.want[i].Field || !strings.Contains(f.Msg, tc.want[i].Msg) {
				t.Errorf("ParseSchedule(%q, %q): field error %d = %s: %s, want %s: ...%s...",
					tc.schedule, tc.timezone, i, f.Field, f.Msg, tc.want[i].Field, tc.want[i].Msg)
			}
		}
	}
}

func TestRunsFireAtScheduledTimes(t *testing.T) {
	h := newHarness(t)
	tr := cronTrigger("every-minute", "* * * * *", func(tr *triggers.Trigger) {
		tr.Payload = json.RawMessage(`{"report":"daily"}`)
	})
	h.apply(t, tr)

	if got := h.rep.wait(t, triggers.EventScheduled, 1)[0].Next; !got.Equal(at(10, 1, 0)) {
		t.Fatalf("first scheduled run = %s, want 10:01:00", got)
	}
	h.tick(t, at(10, 1, 0))
	req := h.inv.wait(t, 1)[0].req
	want := invoke.Request{
		Namespace:   "team",
		Function:    "report",
		Method:      http.MethodPost,
		Header:      http.Header{"Content-Type": {"application/json"}},
		Body:        []byte(`{"report":"daily"}`),
		TriggerKind: invoke.KindCron,
		TriggerName: "every-minute",
		TriggerMeta: map[string]any{"scheduled_at": "2025-01-01T10:01:00Z"},
	}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if fired := h.rep.wait(t, triggers.EventFired, 1)[0]; !fired.At.Equal(at(10, 1, 0)) {
		t.Errorf("fired at %s, want 10:01:00", fired.At)
	}
	h.rep.wait(t, triggers.EventSucceeded, 1)
	if got := h.rep.wait(t, triggers.EventScheduled, 2)[1].Next; !got.Equal(at(10, 2, 0)) {
		t.Errorf("second scheduled run = %s, want 10:02:00", got)
	}

	h.tick(t, at(10, 2, 0))
	if got := h.inv.wait(t, 2)[1].req.TriggerMeta["scheduled_at"]; got != "2025-01-01T10:02:00Z" {
		t.Errorf("second run scheduled_at = %v, want 2025-01-01T10:02:00Z", got)
	}
	h.rep.wait(t, triggers.EventSucceeded, 2)
}

func TestEmptyPayloadIsNull(t *testing.T) {
	h := newHarness(t)
	h.apply(t, cronTrigger("t", "* * * * *"))
	h.tick(t, at(10, 1, 0))
	if got := string(h.inv.wait(t, 1)[0].req.Body); got != "null" {
		t.Errorf("body = %q, want null", got)
	}
}

func TestFailuresAreReported(t *testing.T) {
	tests := []struct {
		name   string
		result func() (*invoke.Response, error)
		want   string
	}{
		{"recorded error", func() (*invoke.Response, error) {
			return &invoke.Response{StatusCode: 500, Error: "ZeroDivisionError: division by zero"}, nil
		}, "ZeroDivisionError: division by zero"},
		{"bare status", func() (*invoke.Response, error) {
			return &invoke.Response{StatusCode: 404}, nil
		}, "the function answered 404 Not Found"},
		{"invoker error", func() (*invoke.Response, error) {
			return nil, errors.New(`function "report" not found`)
		}, `function "report" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.inv.result = tc.result
			h.apply(t, cronTrigger("t", "* * * * *"))
			h.tick(t, at(10, 1, 0))
			if got := h.rep.wait(t, triggers.EventFailed, 1)[0].Message; got != tc.want {
				t.Errorf("failure message = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestForbidSkipsOverlap(t *testing.T) {
	h := newHarness(t)
	release := h.inv.hold()
	h.apply(t, cronTrigger("t", "* * * * *", func(tr *triggers.Trigger) {
		tr.ConcurrencyPolicy = triggers.PolicyForbid
	}))
	h.tick(t, at(10, 1, 0))
	h.inv.wait(t, 1)
	h.tick(t, at(10, 2, 0))
	skipped := h.rep.wait(t, triggers.EventSkipped, 1)[0]
	if want := "skipped: the run of 2025-01-01T10:01:00Z is still running"; skipped.Message != want {
		t.Errorf("skip message = %q, want %q", skipped.Message, want)
	}
	// The loop scheduled 10:03 after skipping: the skipped tick is done with.
	h.clock.waitTimers(t, 1)
	if n := len(h.inv.all()); n != 1 {
		t.Fatalf("%d invocations while the first run was running, want 1", n)
	}

	release()
	h.rep.wait(t, triggers.EventSucceeded, 1)
	h.tick(t, at(10, 3, 0))
	h.inv.wait(t, 2)
}

func TestAllowOverlaps(t *testing.T) {
	for _, policy := range []string{"", triggers.PolicyAllow} {
		t.Run("policy="+policy, func(t *testing.T) {
			h := newHarness(t)
			release := h.inv.hold()
			h.apply(t, cronTrigger("t", "* * * * *", func(tr *triggers.Trigger) { tr.ConcurrencyPolicy = policy }))
			h.tick(t, at(10, 1, 0))
			h.inv.wait(t, 1)
			h.tick(t, at(10, 2, 0))
			calls := h.inv.wait(t, 2)
			if err := calls[0].ctx.Err(); err != nil {
				t.Errorf("first run's context ended when the second started: %v", err)
			}
			release()
			h.rep.wait(t, triggers.EventSucceeded, 2)
		})
	}
}

func TestReplaceCancelsRunningRun(t *testing.T) {
	h := newHarness(t)
	release := h.inv.hold()
	h.apply(t, cronTrigger("t", "* * * * *", func(tr *triggers.Trigger) {
		tr.ConcurrencyPolicy = triggers.PolicyReplace
	}))
	h.tick(t, at(10, 1, 0))
	h.inv.wait(t, 1)
	h.tick(t, at(10, 2, 0))
	calls := h.inv.wait(t, 2)
	waitDone(t, calls[0].ctx, "the replaced run's context")
	if err := calls[1].ctx.Err(); err != nil {
		t.Errorf("the replacing run's context ended: %v", err)
	}
	failed := h.rep.wait(t, triggers.EventFailed, 1)[0]
	if want := "cancelled: replaced by the run of 2025-01-01T10:02:00Z"; failed.Message != want {
		t.Errorf("replaced run's failure = %q, want %q", failed.Message, want)
	}
	release()
	h.rep.wait(t, triggers.EventSucceeded, 1)
}

func TestPrewarm(t *testing.T) {
	h := newHarness(t)
	h.warm.err = errors.New("no capacity")
	h.apply(t, cronTrigger("hourly", "0 * * * *", func(tr *triggers.Trigger) { tr.PrewarmSeconds = 30 }))
	h.rep.wait(t, triggers.EventScheduled, 1)

	h.tick(t, at(10, 59, 29))
	// The prewarm timer (10:59:30) is still pending: nothing was warmed.
	h.clock.waitTimers(t, 1)
	if n := len(h.warm.all()); n != 0 {
		t.Fatalf("warmed %d times before next-prewarm", n)
	}
	h.tick(t, at(10, 59, 30))
	// The instance is kept for the run, past the idle timeout if need be.
	if got := h.warm.wait(t, 1)[0]; got != "team/report 11:00:05" {
		t.Errorf("warmed %s, want team/report until 5s after the run at 11:00:00", got)
	}
	if n := len(h.inv.all()); n != 0 {
		t.Fatalf("invoked %d times at prewarm time", n)
	}
	h.tick(t, at(11, 0, 0))
	h.inv.wait(t, 1)
	h.rep.wait(t, triggers.EventSucceeded, 1)
	h.rep.wait(t, triggers.EventScheduled, 2)
	// A failed prewarm is logged only.
	for _, ev := range h.rep.all() {
		if ev.Kind != triggers.EventScheduled && ev.Kind != triggers.EventFired && ev.Kind != triggers.EventSucceeded {
			t.Errorf("unexpected event %+v", ev)
		}
	}
}

func TestPrewarmLongerThanInterval(t *testing.T) {
	h := newHarness(t)
	h.apply(t, cronTrigger("t", "@every 10s", func(tr *triggers.Trigger) { tr.PrewarmSeconds = 60 }))
	// Warmed right after scheduling, without the clock moving.
	h.warm.wait(t, 1)
	h.tick(t, at(10, 0, 40))
	h.inv.wait(t, 1)
	h.warm.wait(t, 2)
}

func TestLateWakeFiresOnce(t *testing.T) {
	h := newHarness(t)
	h.apply(t, cronTrigger("t", "* * * * *"))
	// The loop wakes five minutes late (a suspended machine, a stalled
	// process): one run, then the next tick after now.
	h.tick(t, at(10, 5, 30))
	if got := h.inv.wait(t, 1)[0].req.TriggerMeta["scheduled_at"]; got != "2025-01-01T10:01:00Z" {
		t.Errorf("late run scheduled_at = %v, want 2025-01-01T10:01:00Z", got)
	}
	if got := h.rep.wait(t, triggers.EventScheduled, 2)[1].Next; !got.Equal(at(10, 6, 0)) {
		t.Errorf("next run after a late wake = %s, want 10:06:00", got)
	}
	h.clock.waitTimers(t, 1)
	if n := len(h.inv.all()); n != 1 {
		t.Errorf("%d runs after a late wake, want 1", n)
	}
}

func TestRestartFiresNoBurst(t *testing.T) {
	tr := cronTrigger("t", "* * * * *")
	later := at(15, 0, 30)

	t.Run("Apply after Remove", func(t *testing.T) {
		h := newHarness(t)
		h.apply(t, tr)
		h.rep.wait(t, triggers.EventScheduled, 1)
		h.runner.Remove(tr.Key())
		h.clock.waitTimers(t, 0)
		h.clock.set(later)
		h.apply(t, tr)
		assertNoBurst(t, h)
	})
	t.Run("new Runner", func(t *testing.T) {
		h := newHarness(t)
		h.apply(t, tr)
		h.rep.wait(t, triggers.EventScheduled, 1)
		stop(t, h.runner)
		h.clock.set(later)
		h.runner = cron.New(h.inv, h.warm, h.rep, discard, cron.WithClock(h.clock))
		t.Cleanup(func() { stop(t, h.runner) })
		h.apply(t, tr)
		assertNoBurst(t, h)
	})
}

// assertNoBurst checks that a trigger restarted at 15:00:30, long after the
// ticks it missed, runs next at 15:01 and only then.
func assertNoBurst(t *testing.T, h *harness) {
	t.Helper()
	if got := h.rep.wait(t, triggers.EventScheduled, 2)[1].Next; !got.Equal(at(15, 1, 0)) {
		t.Errorf("next run after restart = %s, want 15:01:00", got)
	}
	h.clock.waitTimers(t, 1)
	if n := len(h.inv.all()); n != 0 {
		t.Fatalf("%d runs of missed ticks", n)
	}
	h.tick(t, at(15, 1, 0))
	h.inv.wait(t, 1)
	h.rep.wait(t, triggers.EventScheduled, 3)
	h.clock.waitTimers(t, 1)
	if n := len(h.inv.all()); n != 1 {
		t.Errorf("%d runs at 15:01, want 1", n)
	}
}

func TestDisabledTriggerDoesNothing(t *testing.T) {
	h := newHarness(t)
	off := false
	disabled := cronTrigger("off", "* * * * *", func(tr *triggers.Trigger) { tr.Enabled = &off })
	h.apply(t, disabled)
	// A second trigger is the witness that the clock drives the runner.
	h.apply(t, cronTrigger("on", "* * * * *"))
	h.tick(t, at(10, 1, 0))
	h.inv.wait(t, 1)
	h.rep.wait(t, triggers.EventScheduled, 2)
	for _, ev := range h.rep.of(disabled.Key()) {
		t.Errorf("disabled trigger reported %+v", ev)
	}
	if calls := h.inv.all(); len(calls) != 1 || calls[0].req.TriggerName != "on" {
		t.Errorf("invocations = %+v, want one of trigger on", calls)
	}
}

func TestDisablingStopsTrigger(t *testing.T) {
	h := newHarness(t)
	tr := cronTrigger("t", "* * * * *")
	h.apply(t, tr)
	h.clock.waitTimers(t, 1)
	off := false
	tr.Enabled = &off
	h.apply(t, tr)
	h.clock.waitTimers(t, 0)
	h.clock.set(at(10, 5, 0))
	if n := len(h.inv.all()); n != 0 {
		t.Errorf("%d runs of a disabled trigger", n)
	}
}

func TestApplyUnchangedIsNoop(t *testing.T) {
	h := newHarness(t)
	tr := cronTrigger("t", "* * * * *")
	h.apply(t, tr)
	h.rep.wait(t, triggers.EventScheduled, 1)
	same := *tr
	same.Generation++
	same.Status.Fired = 7
	h.apply(t, &same)
	h.tick(t, at(10, 1, 0))
	h.rep.wait(t, triggers.EventSucceeded, 1)
	h.clock.waitTimers(t, 1)
	// A restart would have scheduled 10:01 a second time.
	var next []time.Time
	for _, ev := range h.rep.all() {
		if ev.Kind == triggers.EventScheduled {
			next = append(next, ev.Next)
		}
	}
	if diff := cmp.Diff([]time.Time{at(10, 1, 0), at(10, 2, 0)}, next); diff != "" {
		t.Errorf("scheduled runs (-want +got):\n%s", diff)
	}
}

func TestApplyChangedRestarts(t *testing.T) {
	h := newHarness(t)
	tr := cronTrigger("t", "* * * * *")
	h.apply(t, tr)
	h.rep.wait(t, triggers.EventScheduled, 1)
	tr.Schedule = "*/5 * * * *"
	h.apply(t, tr)
	if got := h.rep.wait(t, triggers.EventScheduled, 2)[1].Next; !got.Equal(at(10, 5, 0)) {
		t.Fatalf("next run after the change = %s, want 10:05:00", got)
	}
	h.tick(t, at(10, 5, 0))
	calls := h.inv.wait(t, 1)
	h.rep.wait(t, triggers.EventScheduled, 3)
	h.clock.waitTimers(t, 1)
	if got := calls[0].req.TriggerMeta["scheduled_at"]; got != "2025-01-01T10:05:00Z" || len(h.inv.all()) != 1 {
		t.Errorf("runs = %+v, want one at 10:05", h.inv.all())
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*triggers.Trigger)
		want string
	}{
		{"not cron", func(tr *triggers.Trigger) { tr.Type = triggers.TypeHTTP }, `type "http" is not "cron"`},
		{"bad schedule", func(tr *triggers.Trigger) { tr.Schedule = "61 * * * *" }, `minute field "61"`},
		{"bad timezone", func(tr *triggers.Trigger) { tr.Timezone = "Mars/Base" }, `unknown time zone "Mars/Base"`},
		{"bad policy", func(tr *triggers.Trigger) { tr.ConcurrencyPolicy = "Sometimes" }, `unknown concurrency policy "Sometimes"`},
		{"negative prewarm", func(tr *triggers.Trigger) { tr.PrewarmSeconds = -1 }, "negative prewarm_seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			err := h.runner.Apply(t.Context(), cronTrigger("t", "* * * * *", tc.mod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply = %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("invalid spec stops a running trigger", func(t *testing.T) {
		h := newHarness(t)
		tr := cronTrigger("t", "* * * * *")
		h.apply(t, tr)
		h.clock.waitTimers(t, 1)
		tr.Schedule = "every day"
		if err := h.runner.Apply(t.Context(), tr); err == nil {
			t.Fatal("Apply of an invalid schedule succeeded")
		}
		h.clock.waitTimers(t, 0)
	})
}

func TestStopWaitsForRuns(t *testing.T) {
	h := newHarness(t)
	release := h.inv.hold()
	h.apply(t, cronTrigger("t", "* * * * *"))
	h.tick(t, at(10, 1, 0))
	h.inv.wait(t, 1)

	stopped := make(chan error, 1)
	go func() { stopped <- h.runner.Stop(t.Context()) }()
	h.clock.waitTimers(t, 0) // the loop ended
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a run was in flight", err)
	default:
	}
	release()
	if err := waitStop(t, stopped); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	// Stop returned after the run ended.
	if n := len(h.rep.ofKind(triggers.EventSucceeded)); n != 1 {
		t.Errorf("%d successes when Stop returned, want 1", n)
	}
	if err := h.runner.Apply(t.Context(), cronTrigger("t2", "* * * * *")); err == nil {
		t.Error("Apply after Stop succeeded")
	}
}

func TestStopCancelsRunsAtDeadline(t *testing.T) {
	h := newHarness(t)
	h.inv.hold() // never released: Stop must cancel the run
	h.apply(t, cronTrigger("t", "* * * * *"))
	h.tick(t, at(10, 1, 0))
	call := h.inv.wait(t, 1)[0]

	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- h.runner.Stop(ctx) }()
	h.clock.waitTimers(t, 0)
	if err := call.ctx.Err(); err != nil {
		t.Fatalf("run cancelled before Stop's deadline: %v", err)
	}
	cancel() // Stop's deadline
	if err := waitStop(t, stopped); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop = %v, want context.Canceled", err)
	}
	waitDone(t, call.ctx, "the run's context")
	if got := h.rep.wait(t, triggers.EventFailed, 1)[0].Message; got != "cancelled: the server is stopping" {
		t.Errorf("cancelled run's failure = %q", got)
	}
}

func TestRealClock(t *testing.T) {
	inv := &fakeInvoker{}
	r := cron.New(inv, &fakeWarmer{}, &fakeReporter{}, discard)
	t.Cleanup(func() { stop(t, r) })
	if err := r.Apply(t.Context(), cronTrigger("t", "@every 1s")); err != nil {
		t.Fatal(err)
	}
	inv.waitFor(t, 3500*time.Millisecond, "two runs of @every 1s", func() bool { return len(inv.calls) >= 2 })
}

// waitDone waits until ctx ends.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s to end", what)
	}
}

// waitStop waits for the result of a Stop running in the background.
func waitStop(t *testing.T, stopped <-chan error) error {
	t.Helper()
	select {
	case err := <-stopped:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for Stop")
		return nil
	}
}

// harness is a Runner on a fake clock with fake dependencies.
type harness struct {
	clock  *fakeClock
	inv    *fakeInvoker
	warm   *fakeWarmer
	rep    *fakeReporter
	runner *cron.Runner
}

var discard = slog.New(slog.DiscardHandler)

func newHarness(t *testing.T) *harness {
	h := &harness{
		clock: &fakeClock{now: start},
		inv:   &fakeInvoker{},
		warm:  &fakeWarmer{},
		rep:   &fakeReporter{},
	}
	h.runner = cron.New(h.inv, h.warm, h.rep, discard, cron.WithClock(h.clock))
	t.Cleanup(func() { stop(t, h.runner) })
	return h
}

func (h *harness) apply(t *testing.T, tr *triggers.Trigger) {
	t.Helper()
	if err := h.runner.Apply(t.Context(), tr); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// tick waits for the trigger's loop to wait on its timer, then sets the clock
// to now, which fires the timer if it is due.
func (h *harness) tick(t *testing.T, now time.Time) {
	t.Helper()
	h.clock.waitTimers(t, 1)
	h.clock.set(now)
}

// stop stops r and cancels what is still running, so that no goroutine of a
// test outlives it for long.
func stop(t *testing.T, r *cron.Runner) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func cronTrigger(name, schedule string, mods ...func(*triggers.Trigger)) *triggers.Trigger {
	tr := &triggers.Trigger{
		Name:      name,
		Namespace: "team",
		Spec: triggers.Spec{
			Function: "report",
			Type:     triggers.TypeCron,
			CronSpec: triggers.CronSpec{Schedule: schedule},
		},
	}
	for _, m := range mods {
		m(tr)
	}
	return tr
}

// watched is the state of a fake that tests wait on.
type watched struct {
	mu      sync.Mutex
	changed chan struct{}
}

// notify wakes the waiters; the caller holds mu.
func (w *watched) notify() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// waitFor waits until cond, called with mu held, is true.
func (w *watched) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok := cond()
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitTimeout bounds the waits on the fake clock's goroutines, which take
// microseconds unless something is broken.
const waitTimeout = 10 * time.Second

type fakeClock struct {
	watched
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clock *fakeClock
	at    time.Time
	c     chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) cron.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notify()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, pending := range c.timers {
		if pending == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notify()
			return
		}
	}
}

// set moves the clock to now and fires the timers that are due.
func (c *fakeClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	var pending []*fakeTimer
	for _, t := range c.timers {
		if t.at.After(now) {
			pending = append(pending, t)
		} else {
			t.c <- now
		}
	}
	c.timers = pending
	c.notify()
}

// waitTimers waits until n timers are pending.
func (c *fakeClock) waitTimers(t *testing.T, n int) {
	t.Helper()
	c.waitFor(t, waitTimeout, "pending timers", func() bool { return len(c.timers) == n })
}

type call struct {
	ctx context.Context
	req invoke.Request
}

// fakeInvoker records invocations; hold makes them wait, result sets their
// outcome (200 by default).
type fakeInvoker struct {
	watched
	calls   []call
	release chan struct{}
	result  func() (*invoke.Response, error)
}

func (f *fakeInvoker) Invoke(ctx context.Context, req invoke.Request) (*invoke.Response, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{ctx, req})
	f.notify()
	release, result := f.release, f.result
	f.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if result != nil {
		return result()
	}
	return &invoke.Response{StatusCode: http.StatusOK}, nil
}

// hold makes invocations wait until the returned function is called.
func (f *fakeInvoker) hold() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.release = ch
	return func() { close(ch) }
}

func (f *fakeInvoker) all() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// wait waits for n invocations and returns them.
func (f *fakeInvoker) wait(t *testing.T, n int) []call {
	t.Helper()
	f.waitFor(t, waitTimeout, "invocations", func() bool { return len(f.calls) >= n })
	return f.all()
}

// fakeWarmer records "namespace/function until" of each Warm and returns
// err.
type fakeWarmer struct {
	watched
	warmed []string
	err    error
}

func (f *fakeWarmer) Warm(_ context.Context, function triggers.Key, until time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.warmed = append(f.warmed, function.String()+" "+until.UTC().Format(time.TimeOnly))
	f.notify()
	return f.err
}

func (f *fakeWarmer) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.warmed...)
}

func (f *fakeWarmer) wait(t *testing.T, n int) []string {
	t.Helper()
	f.waitFor(t, waitTimeout, "prewarms", func() bool { return len(f.warmed) >= n })
	return f.all()
}

type reported struct {
	key triggers.Key
	ev  triggers.Event
}

type fakeReporter struct {
	watched
	events []reported
}

func (f *fakeReporter) Report(key triggers.Key, ev triggers.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, reported{key, ev})
	f.notify()
}

func (f *fakeReporter) filter(keep func(reported) bool) []triggers.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var evs []triggers.Event
	for _, r := range f.events {
		if keep(r) {
			evs = append(evs, r.ev)
		}
	}
	return evs
}

func (f *fakeReporter) all() []triggers.Event {
	return f.filter(func(reported) bool { return true })
}

func (f *fakeReporter) of(key triggers.Key) []triggers.Event {
	return f.filter(func(r reported) bool { return r.key == key })
}

func (f *fakeReporter) ofKind(kind string) []triggers.Event {
	return f.filter(func(r reported) bool { return r.ev.Kind == kind })
}

// wait waits for n events of kind and returns the events of kind.
func (f *fakeReporter) wait(t *testing.T, kind string, n int) []triggers.Event {
	t.Helper()
	f.waitFor(t, waitTimeout, fmt.Sprintf("%d %s events", n, kind), func() bool {
		count := 0
		for _, r := range f.events {
			if r.ev.Kind == kind {
				count++
			}
		}
		return count >= n
	})
	return f.ofKind(kind)
}
