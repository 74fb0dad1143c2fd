package ledger

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/invoke/ledger/journal"
)

// runningDir is the directory, in the journal's, of the journal of runs in
// progress.
const runningDir = "running"

// releaseEvery is how often the journal of runs in progress drops the
// starts of finished runs. A start kept longer only makes the next start
// of the server insert a record that is already stored, which is a no-op.
const releaseEvery = time.Second

// running keeps the starts of runs in progress (Begin) in a journal of
// their own, so that a long run never holds back the invocation journal.
//
// At start, every start an earlier process left there becomes an
// interrupted record appended to the invocation journal, after every record
// that process wrote. A run that finished has its record before that one
// (in the journal, or in the database already), and inserting a record
// twice stores the first: only runs that did not finish are recorded as
// interrupted.
type running struct {
	j   *journal.Journal
	log *slog.Logger

	mu sync.Mutex
	// open maps the id of each run in progress to the journal's end before
	// its start was appended: what is before the earliest of them may go.
	open     map[string]journal.Pos
	released time.Time
}

// openRunning opens the journal of runs in progress under opts.Dir and
// passes each start an earlier process left in it to add, as an
// interrupted record; then it drops them.
func openRunning(opts journal.Options, log *slog.Logger, add func(row)) (*running, error) {
	opts.Dir = filepath.Join(opts.Dir, runningDir)
	j, err := journal.Open(opts)
	if err != nil {
		return nil, err
	}
	pos, end := j.Start(), j.End()
	n := 0
	for pos.Less(end) {
		next, err := j.Read(pos, DefaultBatchSize, func(payload []byte) {
			r, err := decodeRow(payload)
			if err != nil {
				log.Error("skipping a start of a run in the journal that cannot be decoded", "error", err)
				return
			}
			r.StatusCode, r.Error = invoke.InterruptedStatus, invoke.InterruptedError
			add(r)
			n++
		})
		if err != nil {
			j.Close()
			return nil, err
		}
		if next == pos {
			break
		}
		pos = next
	}
	if n > 0 {
		log.Info("recording the runs the last process left in progress as interrupted, unless they have a record", "runs", n)
	}
	if err := j.Commit(end); err != nil {
		// Kept, they are passed on again at the next start: a no-op.
		log.Error("dropping the starts of runs the last process left in progress failed", "error", err)
	}
	return &running{j: j, log: log, open: map[string]journal.Pos{}, released: time.Now()}, nil
}

// begin appends r's start and returns the function that ends it.
func (rn *running) begin(r *row) (func(), error) {
	payload := appendRow(nil, r)
	rn.mu.Lock()
	rn.open[r.ID] = rn.j.End()
	rn.mu.Unlock()
	if err := rn.j.Append(payload); err != nil {
		rn.end(r.ID)
		return nil, fmt.Errorf("%w: its journal of runs in progress cannot be written (%s)", ErrNotRecording, journalProblem(err))
	}
	return func() { rn.end(r.ID) }, nil
}

// end forgets a run, and drops the starts of finished runs at most every
// releaseEvery.
func (rn *running) end(id string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	delete(rn.open, id)
	if time.Since(rn.released) >= releaseEvery {
		rn.release()
	}
}

// release drops the starts before the earliest run in progress. The caller
// holds mu.
func (rn *running) release() {
	rn.released = time.Now()
	keep := rn.j.End()
	for _, p := range rn.open {
		if p.Less(keep) {
			keep = p
		}
	}
	if err := rn.j.Commit(keep); err != nil {
		rn.log.Error("dropping the starts of finished runs failed; retrying later", "error", err)
	}
}

// stop drops the starts of finished runs and fsyncs the rest.
func (rn *running) stop() {
	rn.mu.Lock()
	rn.release()
	rn.mu.Unlock()
	if err := rn.j.Sync(); err != nil {
		rn.log.Error("syncing the journal of runs in progress at stop failed", "error", err)
	}
}
