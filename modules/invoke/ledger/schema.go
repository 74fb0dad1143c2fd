package ledger

import (
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// table is the invocations table; defaultPartition catches the PostgreSQL
// rows that no day partition covers.
const (
	table            = "invocations"
	defaultPartition = "invocations_default"
)

// The migration is plain SQL per dialect rather than gorm's Migrator: gorm
// cannot declare partitioning, and on PostgreSQL id needs the "C" collation
// so that ids compare byte by byte (the order of UUIDv7 strings is the order
// of their start times) and quickly. SQLite compares text bytewise already.
// The primary key includes started_at because PostgreSQL requires the
// partition key in every unique index; SQLite uses the same key so that both
// dialects accept the same rows.
const (
	createPostgres = `CREATE TABLE invocations (
	id             text COLLATE "C" NOT NULL,
	namespace      text NOT NULL,
	function       text NOT NULL,
	trigger_kind   text NOT NULL,
	trigger_name   text NOT NULL,
	method         text NOT NULL,
	path           text NOT NULL,
	started_at     timestamptz NOT NULL,
	duration_ms    double precision NOT NULL,
	queue_ms       double precision NOT NULL,
	cold_start     boolean NOT NULL,
	cold_start_ms  double precision NOT NULL,
	handler_ms     double precision NOT NULL,
	status_code    integer NOT NULL,
	error          text NOT NULL,
	request_bytes  bigint NOT NULL,
	response_bytes bigint NOT NULL,
	logs           text NOT NULL,
	PRIMARY KEY (id, started_at)
) PARTITION BY RANGE (started_at)`

	// started_at is declared datetime so that the driver reads it back as a
	// time.Time.
	createSQLite = `CREATE TABLE invocations (
	id             text NOT NULL,
	namespace      text NOT NULL,
	function       text NOT NULL,
	trigger_kind   text NOT NULL,
	trigger_name   text NOT NULL,
	method         text NOT NULL,
	path           text NOT NULL,
	started_at     datetime NOT NULL,
	duration_ms    real NOT NULL,
	queue_ms       real NOT NULL,
	cold_start     boolean NOT NULL,
	cold_start_ms  real NOT NULL,
	handler_ms     real NOT NULL,
	status_code    integer NOT NULL,
	error          text NOT NULL,
	request_bytes  integer NOT NULL,
	response_bytes integer NOT NULL,
	logs           text NOT NULL,
	PRIMARY KEY (id, started_at)
) WITHOUT ROWID`
)

// fnIndex serves the most common listing: a function's invocations, newest
// first.
const fnIndex = `CREATE INDEX invocations_ns_fn_id ON invocations (namespace, function, id DESC)`

// On PostgreSQL the indexes serve every listing (a namespace's, a trigger's)
// and, on the default partition, retention; they exist on every partition.
//
// SQLite keeps only fnIndex: in the embedded mode every secondary index costs
// the writer about 6 µs a row of the server's own CPU (a quarter of an
// insert), while the other listings scan the primary key newest first and
// stop at their page, and retention scans it oldest first (UUIDv7 ids sort by
// start time).
var (
	postgresIndexes = []string{
		fnIndex,
		`CREATE INDEX invocations_ns_id ON invocations (namespace, id DESC)`,
		`CREATE INDEX invocations_ns_trigger_id ON invocations (namespace, trigger_kind, trigger_name, id DESC)`,
		`CREATE TABLE invocations_default PARTITION OF invocations DEFAULT`,
		`CREATE INDEX invocations_default_started_at ON invocations_default (started_at)`,
	}
	sqliteIndexes = []string{fnIndex}
)

// Migrations are the invoke module's schema versions. Day partitions are not
// created here: they depend on the date, and the ledger creates them when it
// starts and every hour after.
func Migrations() []sqldb.Migration {
	return []sqldb.Migration{{
		Module: "invoke", Version: 1, Name: "create invocations",
		Up: func(tx *gorm.DB) error {
			create, indexes := createSQLite, sqliteIndexes
			if isPostgres(tx) {
				create, indexes = createPostgres, postgresIndexes
			}
			for _, s := range slices.Concat([]string{create}, indexes) {
				if err := tx.Exec(s).Error; err != nil {
					return err
				}
			}
			return nil
		},
	}, {
		// Both dialects add a column with a constant default without
		// rewriting the table; on PostgreSQL every partition gets it.
		Module: "invoke", Version: 2, Name: "add the trace id of invocations",
		Up: func(tx *gorm.DB) error {
			return tx.Exec(`ALTER TABLE invocations ADD COLUMN trace_id text NOT NULL DEFAULT ''`).Error
		},
	}}
}

func isPostgres(db *gorm.DB) bool { return db.Dialector.Name() == string(sqldb.Postgres) }

// row is an invocations row as gorm reads and writes it.
type row struct {
	ID            string
	Namespace     string
	Function      string
	TriggerKind   string
	TriggerName   string
	Method        string
	Path          string
	StartedAt     time.Time
	DurationMS    float64 `gorm:"column:duration_ms"`
	QueueMS       float64 `gorm:"column:queue_ms"`
	ColdStart     bool
	ColdStartMS   float64 `gorm:"column:cold_start_ms"`
	HandlerMS     float64 `gorm:"column:handler_ms"`
	StatusCode    int
	Error         string
	RequestBytes  int64
	ResponseBytes int64
	Logs          string
	TraceID       string `gorm:"column:trace_id"`
}

func (row) TableName() string { return table }

// toRow copies r into a row that both databases accept as it is: a record
// the database rejects would be retried forever and stall every record
// queued behind it. Text loses NUL bytes (PostgreSQL refuses them) and
// invalid UTF-8 (replaced by U+FFFD); a non-finite duration becomes 0 (SQLite
// stores NaN as NULL). A missing ID becomes a new UUIDv7 and a zero StartedAt
// the current time. StartedAt is stored in UTC with microsecond precision,
// which both databases keep exactly.
func toRow(r *invoke.Record) row {
	id := r.ID
	if id == "" {
		// NewV7 fails only when crypto/rand does, which it never does.
		id = uuid.Must(uuid.NewV7()).String()
	}
	started := r.StartedAt
	if started.IsZero() {
		started = time.Now()
	}
	return row{
		ID: cleanText(id), Namespace: cleanText(r.Namespace), Function: cleanText(r.Function),
		TriggerKind: cleanText(r.TriggerKind), TriggerName: cleanText(r.TriggerName),
		Method: cleanText(r.Method), Path: cleanText(r.Path),
		StartedAt:  started.UTC().Truncate(time.Microsecond),
		DurationMS: finite(r.DurationMS), QueueMS: finite(r.QueueMS),
		ColdStart: r.ColdStart, ColdStartMS: finite(r.ColdStartMS), HandlerMS: finite(r.HandlerMS),
		StatusCode: r.StatusCode, Error: cleanText(r.Error),
		RequestBytes: r.RequestBytes, ResponseBytes: r.ResponseBytes,
		Logs: cleanText(r.Logs), TraceID: cleanText(r.TraceID),
	}
}

func fromRow(r *row) *invoke.Record {
	return &invoke.Record{
		ID: r.ID, Namespace: r.Namespace, Function: r.Function,
		TriggerKind: r.TriggerKind, TriggerName: r.TriggerName,
		Method: r.Method, Path: r.Path, StartedAt: r.StartedAt.UTC(),
		DurationMS: r.DurationMS, QueueMS: r.QueueMS,
		ColdStart: r.ColdStart, ColdStartMS: r.ColdStartMS, HandlerMS: r.HandlerMS,
		StatusCode: r.StatusCode, Error: r.Error,
		RequestBytes: r.RequestBytes, ResponseBytes: r.ResponseBytes,
		Logs: r.Logs, TraceID: r.TraceID,
	}
}

// cleanText returns s without NUL bytes and with invalid UTF-8 replaced.
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
