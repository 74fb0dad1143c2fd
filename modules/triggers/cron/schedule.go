// Package cron runs cron triggers: it parses their schedules, for validation
// and for the runner, and fires their functions at the scheduled times.
package cron

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	// The embedded time zone database is a fallback for images without one
	// (distroless, scratch): without it every timezone would be rejected.
	_ "time/tzdata"

	robfig "github.com/robfig/cron/v3"

	"sless.kube5s.ru/sless/internal/validation"
)

// minEvery is the shortest interval of "@every": the schedule works in whole
// seconds.
const minEvery = time.Second

var parser = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

// fieldNames name the fields of a cron expression, in order, in errors.
var fieldNames = [...]string{"minute", "hour", "day-of-month", "month", "day-of-week"}

const usage = `a 5-field expression (minute hour day-of-month month day-of-week), ` +
	`@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or "@every <duration>"`

// Schedule is a parsed cron schedule in its time zone.
type Schedule struct {
	spec robfig.Schedule
	loc  *time.Location
}

// Next returns the first run strictly after t, in the schedule's time zone,
// or the zero time when no date within five years matches.
func (s Schedule) Next(t time.Time) time.Time {
	// robfig's parser leaves schedules in time.Local, which makes them follow
	// the zone of the time they are given.
	return s.spec.Next(t.In(s.loc))
}

// ParseSchedule parses the schedule of a cron trigger in timezone, an IANA
// name (empty means UTC). Its error is a *validation.Errors whose fields,
// "schedule" and "timezone", name what is wrong so that the API can answer
// 400 with them.
func ParseSchedule(schedule, timezone string) (Schedule, error) {
	errs := &validation.Errors{Resource: "trigger"}
	loc, err := loadLocation(timezone)
	if err != nil {
		errs.Add("timezone", "%v", err)
	}
	spec, err := parseSpec(schedule)
	if err != nil {
		errs.Add("schedule", "%q: %v", schedule, err)
	}
	if err := errs.Err(); err != nil {
		return Schedule{}, err
	}
	s := Schedule{spec: spec, loc: loc}
	if s.Next(time.Now()).IsZero() {
		errs.Add("schedule", "%q never matches a date (such as February 30)", schedule)
		return Schedule{}, errs
	}
	return s, nil
}

func loadLocation(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		// It would be whatever zone the server happens to run in.
		return nil, errors.New(`"Local" is not allowed; use an IANA name such as "Europe/Moscow"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q; use an IANA name such as \"Europe/Moscow\"", name)
	}
	return loc, nil
}

func parseSpec(schedule string) (robfig.Schedule, error) {
	fields := strings.Fields(schedule)
	switch {
	case len(fields) == 0:
		return nil, errors.New("is required: " + usage)
	case strings.HasPrefix(fields[0], "CRON_TZ=") || strings.HasPrefix(fields[0], "TZ="):
		// One place for the zone: the timezone field.
		return nil, errors.New("must not set a time zone; use the timezone field")
	case fields[0] == "@every":
		if len(fields) != 2 {
			return nil, errors.New(`want "@every <duration>", such as "@every 90s"`)
		}
		return parseEvery(fields[1])
	case strings.HasPrefix(fields[0], "@"):
		spec, err := parser.Parse(strings.Join(fields, " "))
		if err != nil {
			return nil, fmt.Errorf("unknown descriptor; want %s", usage)
		}
		return spec, nil
	case len(fields) != len(fieldNames):
		return nil, fmt.Errorf("has %d fields; want %s", len(fields), usage)
	}
	if err := checkFields(fields); err != nil {
		return nil, err
	}
	spec, err := parser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, fmt.Errorf("parsing the expression: %w", err)
	}
	return spec, nil
}

// checkFields parses each field alone, so that the error names the field
// that is wrong, which robfig's does not.
func checkFields(fields []string) error {
	for i, f := range fields {
		if err := checkValues(i, f); err != nil {
			return fmt.Errorf("%s field %q: %w", fieldNames[i], f, err)
		}
		probe := slices.Repeat([]string{"*"}, len(fieldNames))
		probe[i] = f
		if _, err := parser.Parse(strings.Join(probe, " ")); err != nil {
			return fmt.Errorf("%s field %q: %w", fieldNames[i], f, err)
		}
	}
	return nil
}

// fieldWords are the names that the month and day-of-week fields accept in
// place of numbers, as robfig does (case-insensitive).
var fieldWords = map[int]string{
	3: "JAN, FEB, MAR, APR, MAY, JUN, JUL, AUG, SEP, OCT, NOV, DEC",
	4: "SUN, MON, TUE, WED, THU, FRI, SAT",
}

// checkValues checks that field i is a list of "*", "?", values and ranges
// of values with an optional "/step", each value a number or, in the month
// and day-of-week fields, a name. robfig's message for anything else quotes
// Go's strconv, which means nothing to a user.
func checkValues(i int, field string) error {
	for item := range strings.SplitSeq(field, ",") {
		rng, step, hasStep := strings.Cut(item, "/")
		if hasStep && !isNumber(step) {
			return fmt.Errorf("the step %q is not a number", step)
		}
		if rng == "*" || rng == "?" || item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		values := []string{lo}
		if isRange {
			values = append(values, hi)
		}
		for _, v := range values {
			if isNumber(v) || isFieldWord(i, v) {
				continue
			}
			if v != "" && strings.Trim(v, "0123456789") == "" {
				return fmt.Errorf("%q is out of range", v)
			}
			if words, ok := fieldWords[i]; ok {
				return fmt.Errorf("%q is neither a number nor one of %s", v, words)
			}
			return fmt.Errorf("%q is not a number", v)
		}
	}
	return nil
}

func isNumber(s string) bool {
	return s != "" && len(s) <= 9 && strings.Trim(s, "0123456789") == ""
}

func isFieldWord(i int, s string) bool {
	words, ok := fieldWords[i]
	return ok && len(s) == 3 && strings.Contains(words, strings.ToUpper(s))
}

func parseEvery(arg string) (robfig.Schedule, error) {
	d, err := time.ParseDuration(arg)
	switch {
	case err != nil:
		return nil, fmt.Errorf("@every %s: not a duration such as 90s, 5m or 1h30m", arg)
	case d < minEvery:
		return nil, fmt.Errorf("@every %s: the interval must be at least %s", arg, minEvery)
	case d%time.Second != 0:
		// robfig would silently truncate it.
		return nil, fmt.Errorf("@every %s: the interval must be a whole number of seconds", arg)
	}
	return robfig.Every(d), nil
}
