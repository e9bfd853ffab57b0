package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/pglog"
)

// fullChecker is a log whose check can also require every job that may
// still be sent to have its raw message (acceptlog.Log.CheckFull), a rule
// the Store's Check leaves out.
type fullChecker interface {
	CheckFull(ctx context.Context) error
}

// damageReport renders a damaged file's error with every damaged record on
// a line of its own (the error's own text stops after the first 20).
func damageReport(err error) string {
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v", err)
	b.WriteString("\nevery damaged record:")
	for _, e := range list.Unwrap() {
		b.WriteString("\n  " + e.Error())
	}
	return b.String()
}

// runCheck verifies an acceptance log offline, a bbolt file (--data) or a
// PostgreSQL log (--database, read by any replica), without changing it:
// the file is opened read-only (acceptlog.OpenReadOnly: a journal an older
// gmailrelay left is replayed into a temporary copy, which is checked, and
// said) and the database is neither created nor migrated. Exit 0 and a
// one-line summary when every invariant holds, 1 naming each violation or
// each damaged record (a checksum, a page, a count),
// 2 for bad flags or what is not a log this version reads: a missing,
// empty, truncated or non-bbolt file, a file or database without the
// log's schema, or one at another version's.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr, "")
	data := fs.String("data", "", "the acceptance log file to check (the relay must not be running on it)")
	database := fs.String("database", "", "or: the postgres://… URL of a log in PostgreSQL (relays may go on running)")
	fail := failer(stderr, "check")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if (*data == "") == (*database == "") || fs.NArg() > 0 {
		return fail(2, "usage: gmailrelay check --data FILE | --database postgres://…")
	}
	var l gmailrelay.Store
	name := *data
	if *database != "" {
		pl, err := pglog.Open(ctx, *database, pglog.Options{NoMigrate: true})
		if err != nil {
			return fail(2, "%v", err)
		}
		l, name = pl, "database"
	} else {
		bl, err := acceptlog.OpenReadOnly(*data)
		if errors.Is(err, acceptlog.ErrDamaged) {
			return fail(1, "%v", damageReport(err))
		}
		if err != nil {
			return fail(2, "%v", err)
		}
		for _, n := range bl.Notes() {
			fmt.Fprintf(stdout, "%s: %s\n", *data, n)
		}
		l = bl
	}
	defer func() { _ = l.Close() }()
	check := l.Check
	if f, ok := l.(fullChecker); ok {
		check = f.CheckFull
	}
	if err := check(ctx); err != nil {
		return fail(1, "%s: %v", name, err)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		return fail(1, "%s: %v", name, err)
	}
	fmt.Fprintf(stdout, "%s: ok: %d jobs, %d lines, every invariant holds\n", name, st.Jobs, st.Lines)
	return 0
}
