// Package objstore is a gorm store of namespaced API objects kept as a JSON
// spec and a JSON status, for the resources whose fields are all read and
// written together (triggers, jobs). Spec and status are separate columns,
// so a spec update and a status update never overwrite each other.
package objstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"sless.kube5s.ru/sless/modules/meta"
	"sless.kube5s.ru/sless/modules/storage/sqldb"
)

// Errors are the sentinels that a store's errors wrap: those of the
// contract the store implements (triggers.ErrNotFound).
type Errors struct {
	NotFound, AlreadyExists error
}

// Object is a stored object.
type Object[Spec, Status any] struct {
	Namespace, Name string
	// Function is the function the object refers to, stored in a column of
	// its own so that ByFunction finds its objects.
	Function   string
	Spec       Spec
	Status     Status
	Generation int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// row is one object in the table that Migration creates.
type row struct {
	ID         int64 `gorm:"primaryKey"`
	Namespace  string
	Name       string
	Function   string
	Spec       string
	Status     string
	Generation int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Migration creates the table of a store. Index names get the table's name
// as prefix so that two stores can share a database.
func Migration(module string, version int, table string) sqldb.Migration {
	return sqldb.Migration{Module: module, Version: version, Name: "create " + table,
		Up: func(tx *gorm.DB) error {
			stmts := []string{
				fmt.Sprintf(`CREATE TABLE %s (id %s, namespace varchar(63) NOT NULL, name varchar(63) NOT NULL,
					function varchar(63) NOT NULL, spec text NOT NULL, status text NOT NULL, generation bigint NOT NULL,
					created_at timestamp NOT NULL, updated_at timestamp NOT NULL)`, table, autoID(tx)),
				fmt.Sprintf(`CREATE UNIQUE INDEX %s_ns_name ON %s (namespace, name)`, table, table),
				fmt.Sprintf(`CREATE INDEX %s_ns_function ON %s (namespace, function)`, table, table),
			}
			for _, s := range stmts {
				if err := tx.Exec(s).Error; err != nil {
					return err
				}
			}
			return nil
		}}
}

func autoID(tx *gorm.DB) string {
	if tx.Dialector.Name() == string(sqldb.Postgres) {
		return "bigserial PRIMARY KEY"
	}
	return "integer PRIMARY KEY AUTOINCREMENT"
}

// Store keeps the objects of one table. It is safe for concurrent use.
type Store[Spec, Status any] struct {
	db    *gorm.DB
	table string
	kind  string // for messages: "trigger"
	errs  Errors
}

// New returns a store on table; Migration must have created it. kind names
// the objects in messages ("trigger").
func New[Spec, Status any](db *gorm.DB, table, kind string, errs Errors) *Store[Spec, Status] {
	return &Store[Spec, Status]{db: db, table: table, kind: kind, errs: errs}
}

func (s *Store[Spec, Status]) tx(ctx context.Context) *gorm.DB {
	return s.db.WithContext(ctx).Table(s.table)
}

func (s *Store[Spec, Status]) notFound(ns, name string) error {
	return fmt.Errorf("%s %s/%s: %w", s.kind, ns, name, s.errs.NotFound)
}

// Create stores a new object with generation 1 and a zero status.
func (s *Store[Spec, Status]) Create(ctx context.Context, o *Object[Spec, Status]) (*Object[Spec, Status], error) {
	spec, err := json.Marshal(o.Spec)
	if err != nil {
		return nil, err
	}
	status, err := json.Marshal(o.Status)
	if err != nil {
		return nil, err
	}
	now := sqldb.Now()
	r := row{Namespace: o.Namespace, Name: o.Name, Function: o.Function, Spec: string(spec), Status: string(status),
		Generation: 1, CreatedAt: now, UpdatedAt: now}
	if err := s.tx(ctx).Create(&r).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return nil, fmt.Errorf("%s %s/%s: %w", s.kind, o.Namespace, o.Name, s.errs.AlreadyExists)
		}
		return nil, fmt.Errorf("creating %s %s/%s: %w", s.kind, o.Namespace, o.Name, err)
	}
	return s.decode(&r)
}

// Get returns one object or errs.NotFound.
func (s *Store[Spec, Status]) Get(ctx context.Context, ns, name string) (*Object[Spec, Status], error) {
	var r row
	err := s.tx(ctx).Where("namespace = ? AND name = ?", ns, name).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, s.notFound(ns, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", s.kind, ns, name, err)
	}
	return s.decode(&r)
}

// List returns a namespace's objects ordered by name, after the name after,
// at most limit, and whether more follow.
func (s *Store[Spec, Status]) List(ctx context.Context, ns, after string, limit int) ([]*Object[Spec, Status], bool, error) {
	var rows []row
	if err := s.tx(ctx).Where("namespace = ? AND name > ?", ns, after).Order("name").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("listing %ss in %s: %w", s.kind, ns, err)
	}
	more := len(rows) > limit
	objs, err := s.decodeAll(rows[:min(len(rows), limit)])
	return objs, more, err
}

// ByFunction returns the objects that refer to a function, by name.
func (s *Store[Spec, Status]) ByFunction(ctx context.Context, ns, function string) ([]*Object[Spec, Status], error) {
	var rows []row
	if err := byFunction(s.tx(ctx), ns, function).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing the %ss of function %s/%s: %w", s.kind, ns, function, err)
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.Name, b.Name) })
	return s.decodeAll(rows)
}

// byFunction selects the rows of a function. It leaves the order to the
// caller: with ORDER BY name, SQLite walks the (namespace, name) index
// through the whole namespace instead of looking the function up in
// (namespace, function), which made every reconcile of a function cost
// O(functions in its namespace).
func byFunction(tx *gorm.DB, ns, function string) *gorm.DB {
	return tx.Where("namespace = ? AND function = ?", ns, function)
}

// All returns every object, for a resync after start-up.
func (s *Store[Spec, Status]) All(ctx context.Context) ([]*Object[Spec, Status], error) {
	var rows []row
	if err := s.tx(ctx).Order("namespace, name").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("listing %ss: %w", s.kind, err)
	}
	return s.decodeAll(rows)
}

// Keys returns every object's key, for a resync after start-up, without
// reading the objects.
func (s *Store[Spec, Status]) Keys(ctx context.Context) ([]meta.Key, error) {
	var keys []meta.Key
	if err := s.tx(ctx).Select("namespace", "name").Order("namespace, name").Find(&keys).Error; err != nil {
		return nil, fmt.Errorf("listing %s keys: %w", s.kind, err)
	}
	return keys, nil
}

// UpdateSpec replaces the spec (and function) and increments the generation.
func (s *Store[Spec, Status]) UpdateSpec(ctx context.Context, ns, name, function string, spec Spec) (*Object[Spec, Status], error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// One statement, not a transaction of an UPDATE and a SELECT: see
	// fnstore's update for the deadlock such a transaction can meet.
	var out []row
	res := s.tx(ctx).Model(&out).Clauses(clause.Returning{}).Where("namespace = ? AND name = ?", ns, name).Updates(map[string]any{
		"spec": string(data), "function": function, "generation": gorm.Expr("generation + 1"), "updated_at": sqldb.Now()})
	if res.Error != nil {
		return nil, fmt.Errorf("updating %s %s/%s: %w", s.kind, ns, name, res.Error)
	}
	if len(out) == 0 {
		return nil, s.notFound(ns, name)
	}
	return s.decode(&out[0])
}

// UpdateStatus replaces the status.
func (s *Store[Spec, Status]) UpdateStatus(ctx context.Context, ns, name string, status Status) error {
	data, err := json.Marshal(status)
	if err != nil {
		return err
	}
	res := s.tx(ctx).Where("namespace = ? AND name = ?", ns, name).Update("status", string(data))
	if res.Error != nil {
		return fmt.Errorf("updating the status of %s %s/%s: %w", s.kind, ns, name, res.Error)
	}
	if res.RowsAffected == 0 {
		return s.notFound(ns, name)
	}
	return nil
}

// Delete removes an object or fails with errs.NotFound.
func (s *Store[Spec, Status]) Delete(ctx context.Context, ns, name string) error {
	res := s.tx(ctx).Where("namespace = ? AND name = ?", ns, name).Delete(&row{})
	if res.Error != nil {
		return fmt.Errorf("deleting %s %s/%s: %w", s.kind, ns, name, res.Error)
	}
	if res.RowsAffected == 0 {
		return s.notFound(ns, name)
	}
	return nil
}

func (s *Store[Spec, Status]) decodeAll(rows []row) ([]*Object[Spec, Status], error) {
	out := make([]*Object[Spec, Status], 0, len(rows))
	for i := range rows {
		o, err := s.decode(&rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func (s *Store[Spec, Status]) decode(r *row) (*Object[Spec, Status], error) {
	o := &Object[Spec, Status]{Namespace: r.Namespace, Name: r.Name, Function: r.Function, Generation: r.Generation,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	if err := json.Unmarshal([]byte(r.Spec), &o.Spec); err != nil {
		return nil, fmt.Errorf("%s %s/%s has a corrupt spec: %w", s.kind, r.Namespace, r.Name, err)
	}
	if err := json.Unmarshal([]byte(r.Status), &o.Status); err != nil {
		return nil, fmt.Errorf("%s %s/%s has a corrupt status: %w", s.kind, r.Namespace, r.Name, err)
	}
	return o, nil
}
