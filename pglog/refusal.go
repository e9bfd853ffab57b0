package pglog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/gmailrelay/gmailrelay"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ gmailrelay.WriteHealth = (*Log)(nil)

// refusal is the error WritesRefused returns.
type refusal struct{ err error }

// lost reports whether err says the database cannot be reached or cannot
// take writes now, rather than that the request itself was wrong: the
// connection failed or broke, or the server answered with a class of
// errors that is about the server, not the statement (08 connection
// exception, 53 insufficient resources such as a full disk, 57 operator
// intervention such as a shutdown, 58 system error such as an I/O error).
func lost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:min(2, len(pe.Code))] {
		case "08", "53", "57", "58":
			return pe.Code != "57014" // query_canceled: the caller's deadline
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}

// refuse records err, an error lost says is the database's, as the reason
// writes are refused (see WritesRefused), and returns it wrapping
// gmailrelay.ErrWritesRefused; any other error is returned as it is.
func (l *Log) refuse(err error) error {
	if !lost(err) {
		return err
	}
	l.refused.Store(&refusal{err: err})
	return fmt.Errorf("%w: %w", gmailrelay.ErrWritesRefused, err)
}

// WritesRefused implements gmailrelay.WriteHealth: why the last call that
// reached for the database found it lost (a connection that failed or
// broke, a server that cannot take writes), until a ProbeWrite succeeds;
// nil otherwise.
func (l *Log) WritesRefused() error {
	if r := l.refused.Load(); r != nil {
		return r.err
	}
	return nil
}

// ProbeWrite implements gmailrelay.WriteHealth: it records this Log among
// the replicas (the write LiveReplicas makes), through a new connection
// when the pool's are gone.
func (l *Log) ProbeWrite(ctx context.Context) error {
	if err := l.ready(ctx, "probe write"); err != nil {
		return err
	}
	if _, err := l.pool.Exec(ctx, `INSERT INTO replicas (owner, seen_ns) VALUES ($1, $2)
		ON CONFLICT (owner) DO UPDATE SET seen_ns = EXCLUDED.seen_ns`, l.owner, *nanos(l.now())); err != nil {
		return l.wrapErr("probe write", err)
	}
	l.refused.Store(nil)
	return nil
}
