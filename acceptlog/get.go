package acceptlog

import (
	"context"
	"fmt"

	"github.com/gmailrelay/gmailrelay"
)

// get is Get, made cheap for the relay's front door, which reads every
// send's job before taking quota: one read transaction
// without a closure, and a missing job answered with one allocation instead
// of a formatted, wrapped error.
func (l *Log) get(ctx context.Context, id string) (gmailrelay.Job, error) {
	if err := ctx.Err(); err != nil {
		return gmailrelay.Job{}, fmt.Errorf("get %s: %w", id, err)
	}
	if l.closed.Load() {
		return gmailrelay.Job{}, fmt.Errorf("get %s: %w", id, gmailrelay.ErrClosed)
	}
	db, err := l.hold()
	if err != nil {
		return gmailrelay.Job{}, l.wrapErr("get "+id, err)
	}
	defer l.mu.RUnlock()
	tx, err := db.Begin(false)
	if err != nil {
		return gmailrelay.Job{}, l.wrapErr("get "+id, err)
	}
	defer func() { _ = tx.Rollback() }()
	key := []byte(id)
	v := tx.Bucket(bucketJobs).Get(key)
	if v == nil {
		return gmailrelay.Job{}, &notFoundError{op: "get", id: id}
	}
	var j gmailrelay.Job
	if err := decodeJobValue(key, v, &j); err != nil {
		return gmailrelay.Job{}, fmt.Errorf("get %s: %w", id, err)
	}
	return j, nil
}

// notFoundError is ErrNotFound for one job: its text is the one
// fmt.Errorf("%s %s: %w", op, id, ErrNotFound) gives, built only when asked.
type notFoundError struct{ op, id string }

func (e *notFoundError) Error() string {
	return e.op + " " + e.id + ": " + gmailrelay.ErrNotFound.Error()
}

func (e *notFoundError) Unwrap() error { return gmailrelay.ErrNotFound }
