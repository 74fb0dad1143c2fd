// Package fnstore is the gorm implementation of functions.Store, for SQLite
// and PostgreSQL.
package fnstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"sless.kube5s.ru/sless/internal/keylock"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// row is the functions table. Spec and status are columns of their own so
// that UpdateSpec and UpdateStatus write disjoint columns.
type row struct {
	ID             int64  `gorm:"primaryKey"`
	Namespace      string `gorm:"size:63;not null;uniqueIndex:functions_ns_name,priority:1"`
	Name           string `gorm:"size:63;not null;uniqueIndex:functions_ns_name,priority:2"`
	Runtime        string `gorm:"size:32;not null"`
	Handler        string `gorm:"size:255;not null"`
	Env            string `gorm:"type:text;not null"`
	TimeoutSeconds int    `gorm:"not null"`
	MemoryMB       int    `gorm:"column:memory_mb;not null"`
	MinInstances   int    `gorm:"not null"`
	MaxInstances   int    `gorm:"not null"`
	Concurrency    int    `gorm:"not null"`
	// Egress was added by version 2.
	Egress     string `gorm:"size:16;not null"`
	CodeSHA256 string `gorm:"column:code_sha256;size:64;not null"`
	Generation int64  `gorm:"not null"`
	CreatedAt  time.Time
	UpdatedAt  time.Time

	StatusPhase              string `gorm:"size:16;not null"`
	StatusMessage            string `gorm:"type:text;not null"`
	StatusCodeSHA256         string `gorm:"column:status_code_sha256;size:64;not null"`
	StatusBuildLog           string `gorm:"type:text;not null"`
	StatusObservedGeneration int64  `gorm:"not null"`
	StatusUpdatedAt          time.Time
	StatusArtifact           string `gorm:"type:text;not null"`
	StatusBuildKey           string `gorm:"size:64;not null"`
	// StatusConditions, StatusArtifactRuntime and StatusArtifactHandler
	// were added by version 3.
	StatusConditions      string `gorm:"type:text;not null"` // JSON
	StatusArtifactRuntime string `gorm:"size:32;not null"`
	StatusArtifactHandler string `gorm:"size:255;not null"`
}

func (row) TableName() string { return "functions" }

// rowV1 is the table of version 1, frozen: a later schema change adds a
// migration (and its columns to row) instead of editing it.
type rowV1 struct {
	ID             int64  `gorm:"primaryKey"`
	Namespace      string `gorm:"size:63;not null;uniqueIndex:functions_ns_name,priority:1"`
	Name           string `gorm:"size:63;not null;uniqueIndex:functions_ns_name,priority:2"`
	Runtime        string `gorm:"size:32;not null"`
	Handler        string `gorm:"size:255;not null"`
	Env            string `gorm:"type:text;not null"`
	TimeoutSeconds int    `gorm:"not null"`
	MemoryMB       int    `gorm:"column:memory_mb;not null"`
	MinInstances   int    `gorm:"not null"`
	MaxInstances   int    `gorm:"not null"`
	Concurrency    int    `gorm:"not null"`
	CodeSHA256     string `gorm:"column:code_sha256;size:64;not null"`
	Generation     int64  `gorm:"not null"`
	CreatedAt      time.Time
	UpdatedAt      time.Time

	StatusPhase              string `gorm:"size:16;not null"`
	StatusMessage            string `gorm:"type:text;not null"`
	StatusCodeSHA256         string `gorm:"column:status_code_sha256;size:64;not null"`
	StatusBuildLog           string `gorm:"type:text;not null"`
	StatusObservedGeneration int64  `gorm:"not null"`
	StatusUpdatedAt          time.Time
	StatusArtifact           string `gorm:"type:text;not null"`
	StatusBuildKey           string `gorm:"size:64;not null"`
}

func (rowV1) TableName() string { return "functions" }

// Migrations are the functions module's schema versions.
func Migrations() []sqldb.Migration {
	return []sqldb.Migration{{
		Module: "functions", Version: 1, Name: "create functions",
		Up: func(tx *gorm.DB) error { return tx.Migrator().CreateTable(&rowV1{}) },
	}, {
		Module: "functions", Version: 2, Name: "add egress",
		// Functions stored before it keep their open network.
		Up: func(tx *gorm.DB) error {
			return tx.Exec("ALTER TABLE functions ADD COLUMN egress VARCHAR(16) NOT NULL DEFAULT 'all'").Error
		},
	}, {
		Module: "functions", Version: 3, Name: "status conditions and the serving artifact's runtime and handler",
		Up: func(tx *gorm.DB) error {
			for _, stmt := range []string{
				`ALTER TABLE functions ADD COLUMN status_conditions text NOT NULL DEFAULT ''`,
				`ALTER TABLE functions ADD COLUMN status_artifact_runtime varchar(32) NOT NULL DEFAULT ''`,
				`ALTER TABLE functions ADD COLUMN status_artifact_handler varchar(255) NOT NULL DEFAULT ''`,
				// Versions 1 and 2 served their artifact with the spec's runtime and
				// handler.
				`UPDATE functions SET status_artifact_runtime = runtime, status_artifact_handler = handler WHERE status_artifact <> ''`,
			} {
				if err := tx.Exec(stmt).Error; err != nil {
					return err
				}
			}
			return nil
		},
	}}
}

// Store implements functions.Store. It caches the functions it reads and
// writes (see cache), so it must be its database's only writer of
// functions, as the embedded mode's server is.
type Store struct {
	db    *gorm.DB
	cache *cache
	// writes orders the writes of each function, so that the cache keeps
	// the function as its last write left it: two writes of one function
	// that ran at once could otherwise reach the cache in the opposite
	// order to their commits.
	writes keylock.Map[functions.Key]
}

// New returns a store on db; the migrations must have run.
func New(db *gorm.DB) *Store { return &Store{db: db, cache: newCache()} }

var _ functions.Store = (*Store)(nil)

// Create implements functions.Store.
func (s *Store) Create(ctx context.Context, fn *functions.Function) (*functions.Function, error) {
	r, err := toRow(fn)
	if err != nil {
		return nil, err
	}
	r.Generation = 1
	r.StatusPhase = string(functions.PhasePending)
	r.StatusUpdatedAt = sqldb.Now()
	key := fn.Key()
	defer s.writes.Lock(key)()
	// RETURNING: the cache keeps the row as stored, as a read would give.
	err = s.db.WithContext(ctx).Clauses(clause.Returning{}).Create(&r).Error
	if err != nil {
		s.cache.invalidate(key)
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return nil, fmt.Errorf("function %s/%s: %w", fn.Namespace, fn.Name, functions.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("creating function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return s.written(key, &r)
}

// written returns the function a write left as r and keeps it in the
// cache; call it with the function's write lock held, once the write
// returned (and so is durable).
func (s *Store) written(key functions.Key, r *row) (*functions.Function, error) {
	fn, err := fromRow(r)
	if err != nil {
		s.cache.invalidate(key)
		return nil, err
	}
	s.cache.put(key, fn)
	return fn, nil
}

// Get implements functions.Store.
func (s *Store) Get(ctx context.Context, key functions.Key) (*functions.Function, error) {
	if fn, ok := s.cache.get(key); ok {
		return fn, nil
	}
	epoch := s.cache.begin()
	r, err := s.get(s.db.WithContext(ctx), key)
	if err != nil {
		return nil, err
	}
	fn, err := fromRow(r)
	if err != nil {
		return nil, err
	}
	s.cache.fill(key, fn, epoch)
	return fn, nil
}

func (s *Store) get(db *gorm.DB, key functions.Key) (*row, error) {
	var r row
	err := db.Where("namespace = ? AND name = ?", key.Namespace, key.Name).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, fmt.Errorf("function %s: %w", key, functions.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading function %s: %w", key, err)
	}
	return &r, nil
}

// List implements functions.Store.
func (s *Store) List(ctx context.Context, namespace string, opts functions.ListOptions) ([]*functions.Function, bool, error) {
	limit := validation.PageSize(opts.Limit)
	var rows []row
	err := s.db.WithContext(ctx).Where("namespace = ? AND name > ?", namespace, opts.After).
		Order("name").Limit(limit + 1).Find(&rows).Error
	if err != nil {
		return nil, false, fmt.Errorf("listing functions in %s: %w", namespace, err)
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := make([]*functions.Function, 0, len(rows))
	for i := range rows {
		fn, err := fromRow(&rows[i])
		if err != nil {
			return nil, false, err
		}
		out = append(out, fn)
	}
	return out, more, nil
}

// Keys implements functions.Store.
func (s *Store) Keys(ctx context.Context) ([]functions.Key, error) {
	var rows []row
	if err := s.db.WithContext(ctx).Select("namespace", "name").Order("namespace, name").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing function keys: %w", err)
	}
	keys := make([]functions.Key, len(rows))
	for i, r := range rows {
		keys[i] = functions.Key{Namespace: r.Namespace, Name: r.Name}
	}
	return keys, nil
}

// UpdateSpec implements functions.Store.
func (s *Store) UpdateSpec(ctx context.Context, key functions.Key, spec functions.Spec) (*functions.Function, error) {
	env, err := json.Marshal(spec.Env)
	if err != nil {
		return nil, err
	}
	return s.update(ctx, key, map[string]any{
		"runtime": spec.Runtime, "handler": spec.Handler, "env": string(env),
		"timeout_seconds": spec.TimeoutSeconds, "memory_mb": spec.MemoryMB,
		"min_instances": spec.MinInstances, "max_instances": spec.MaxInstances,
		"concurrency": spec.Concurrency, "egress": spec.Egress,
	})
}

// SetCode implements functions.Store.
func (s *Store) SetCode(ctx context.Context, key functions.Key, codeSHA256 string) (*functions.Function, error) {
	return s.update(ctx, key, map[string]any{"code_sha256": codeSHA256})
}

// update writes desired-state columns, increments the generation and returns
// the function as stored, in one statement (UPDATE ... RETURNING). Not a
// transaction of an UPDATE and a SELECT: with gorm's prepared statements, a
// transaction that holds SQLite's write lock can wait for a statement that
// another goroutine prepares on the pool, whose connections are all held by
// writers waiting for that lock, until the busy timeout fails them.
func (s *Store) update(ctx context.Context, key functions.Key, cols map[string]any) (*functions.Function, error) {
	cols["generation"] = gorm.Expr("generation + 1")
	cols["updated_at"] = sqldb.Now()
	return s.updateReturning(ctx, key, cols, "updating function %s: %w")
}

// updateReturning writes cols of key's function in one statement (UPDATE
// ... RETURNING) and returns the function as stored, which the cache then
// keeps. errFormat wraps a database error, given the key and the error.
func (s *Store) updateReturning(ctx context.Context, key functions.Key, cols map[string]any, errFormat string) (*functions.Function, error) {
	defer s.writes.Lock(key)()
	var out []row
	err := s.db.WithContext(ctx).Model(&out).Clauses(clause.Returning{}).
		Where("namespace = ? AND name = ?", key.Namespace, key.Name).Updates(cols).Error
	if err != nil {
		s.cache.invalidate(key)
		return nil, fmt.Errorf(errFormat, key, err)
	}
	if len(out) == 0 {
		s.cache.invalidate(key)
		return nil, fmt.Errorf("function %s: %w", key, functions.ErrNotFound)
	}
	return s.written(key, &out[0])
}

// UpdateStatus implements functions.Store.
func (s *Store) UpdateStatus(ctx context.Context, key functions.Key, st functions.Status) error {
	conds := make([]functions.Condition, len(st.Conditions))
	for i, c := range st.Conditions {
		c.LastTransitionTime = c.LastTransitionTime.UTC().Truncate(time.Microsecond)
		conds[i] = c
	}
	condJSON, err := json.Marshal(conds)
	if err != nil {
		return fmt.Errorf("encoding the conditions of function %s: %w", key, err)
	}
	_, err = s.updateReturning(ctx, key, map[string]any{
		"status_phase": string(st.Phase), "status_message": st.Message,
		"status_code_sha256": st.CodeSHA256, "status_build_log": st.BuildLog,
		"status_observed_generation": st.ObservedGeneration, "status_updated_at": st.UpdatedAt.UTC().Truncate(time.Microsecond),
		"status_conditions": string(condJSON),
		"status_artifact":   st.Artifact, "status_build_key": st.BuildKey,
		"status_artifact_runtime": st.ArtifactRuntime, "status_artifact_handler": st.ArtifactHandler,
	}, "updating the status of function %s: %w")
	return err
}

// Delete implements functions.Store.
func (s *Store) Delete(ctx context.Context, key functions.Key) error {
	defer s.writes.Lock(key)()
	res := s.db.WithContext(ctx).Where("namespace = ? AND name = ?", key.Namespace, key.Name).Delete(&row{})
	s.cache.invalidate(key)
	if res.Error != nil {
		return fmt.Errorf("deleting function %s: %w", key, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("function %s: %w", key, functions.ErrNotFound)
	}
	return nil
}

func toRow(fn *functions.Function) (row, error) {
	env, err := json.Marshal(fn.Env)
	if err != nil {
		return row{}, err
	}
	return row{
		Namespace: fn.Namespace, Name: fn.Name, Runtime: fn.Runtime, Handler: fn.Handler,
		Env: string(env), TimeoutSeconds: fn.TimeoutSeconds, MemoryMB: fn.MemoryMB,
		MinInstances: fn.MinInstances, MaxInstances: fn.MaxInstances, Concurrency: fn.Concurrency,
		Egress: fn.Egress, CodeSHA256: fn.CodeSHA256,
	}, nil
}

func fromRow(r *row) (*functions.Function, error) {
	fn := &functions.Function{
		Name: r.Name, Namespace: r.Namespace,
		Spec: functions.Spec{
			Runtime: r.Runtime, Handler: r.Handler, TimeoutSeconds: r.TimeoutSeconds,
			MemoryMB: r.MemoryMB, MinInstances: r.MinInstances, MaxInstances: r.MaxInstances,
			Concurrency: r.Concurrency, Egress: r.Egress,
		},
		CodeSHA256: r.CodeSHA256, Generation: r.Generation,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		Status: functions.Status{
			Phase: functions.Phase(r.StatusPhase), Message: r.StatusMessage,
			CodeSHA256: r.StatusCodeSHA256, BuildLog: r.StatusBuildLog,
			ObservedGeneration: r.StatusObservedGeneration, UpdatedAt: r.StatusUpdatedAt.UTC(),
			Artifact: r.StatusArtifact, ArtifactRuntime: r.StatusArtifactRuntime, ArtifactHandler: r.StatusArtifactHandler,
			BuildKey: r.StatusBuildKey,
		},
	}
	if err := json.Unmarshal([]byte(r.Env), &fn.Env); err != nil {
		return nil, fmt.Errorf("function %s/%s has a corrupt env column: %w", r.Namespace, r.Name, err)
	}
	// A row from before version 3 has no conditions yet.
	if r.StatusConditions != "" {
		if err := json.Unmarshal([]byte(r.StatusConditions), &fn.Status.Conditions); err != nil {
			return nil, fmt.Errorf("function %s/%s has a corrupt status_conditions column: %w", r.Namespace, r.Name, err)
		}
	}
	return fn, nil
}
