package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/pglog"
)

// runCheck verifies an acceptance log offline (acceptlog.Store.Check), a
// bbolt file (--data) or a PostgreSQL log (--database, read by any replica):
// exit 0 and a one-line summary when every invariant holds, 1 naming each
// violation, 2 for bad flags or a file that cannot be opened.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr, "")
	data := fs.String("data", "", "the acceptance log file to check (the relay must not be running on it)")
	database := fs.String("database", "", "or: the postgres://… URL of a log in PostgreSQL (relays may go on running)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if (*data == "") == (*database == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gmailrelay check: usage: gmailrelay check --data FILE | --database postgres://…")
		return 2
	}
	var l acceptlog.Store
	if *database != "" {
		pl, err := pglog.Open(ctx, *database, pglog.Options{})
		if err != nil {
			fmt.Fprintf(stderr, "gmailrelay check: %v\n", err)
			return 2
		}
		l, *data = pl, "database"
	} else {
		if _, err := os.Stat(*data); err != nil {
			fmt.Fprintf(stderr, "gmailrelay check: %v\n", err)
			return 2
		}
		bl, err := acceptlog.Open(*data, acceptlog.Options{})
		if err != nil {
			fmt.Fprintf(stderr, "gmailrelay check: %v\n", err)
			return 2
		}
		l = bl
	}
	defer func() { _ = l.Close() }()
	if err := l.Check(ctx); err != nil {
		fmt.Fprintf(stderr, "gmailrelay check: %s: %v\n", *data, err)
		return 1
	}
	st, err := l.Stats(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay check: %s: %v\n", *data, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok: %d jobs, %d lines, every invariant holds\n", *data, st.Jobs, st.Lines)
	return 0
}
