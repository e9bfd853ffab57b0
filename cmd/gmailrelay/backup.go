package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/acceptlog"
)

// runBackup saves a consistent copy of the acceptance log: from a running
// relay (--url, through GET /admin/backup) or from a file no relay has open
// (--data). The copy is written to a temporary file of its own beside --to
// (never one another run left or is writing) and put in place when whole,
// then opened and checked. Exit 2 for bad flags, 1 when the copy failed or does
// not pass the log's check.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("backup", stderr, "gmailrelay backup (--url URL [--token ADMIN] | --data FILE) --to OUT",
		"Saves a consistent copy of the acceptance log and checks it. PostgreSQL logs are",
		"backed up with PostgreSQL's own tools (pg_dump, base backups).")
	from := fs.String("url", "", "base URL of a running relay (e.g. http://127.0.0.1:8080)")
	token := fs.String("token", os.Getenv("GMAILRELAY_ADMIN_TOKEN"), "the relay's admin token (default: $GMAILRELAY_ADMIN_TOKEN)")
	data := fs.String("data", "", "a bbolt log file no relay has open")
	to := fs.String("to", "", "where to write the copy (must not exist)")
	timeout := fs.Duration("timeout", time.Hour, "give up on a --url backup after this long")
	fail := failer(stderr, "backup")
	if code, ok := parseNoArgs(fs, args, fail); !ok {
		return code
	}
	switch {
	case *to == "":
		return fail(2, "--to is required")
	case (*from == "") == (*data == ""):
		return fail(2, "give exactly one of --url (a running relay) and --data (a log no relay has open)")
	}
	var n int64
	var err error
	if *data != "" {
		n, err = acceptlog.BackupFile(*data, *to)
	} else {
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		n, err = fetchBackup(ctx, *from, *token, *to)
	}
	if err != nil {
		return fail(1, "%v", err)
	}
	summary, err := checkCopy(ctx, *to)
	if err != nil {
		return fail(1, "the copy at %s does not pass the log's check: %v", *to, err)
	}
	fmt.Fprintf(stdout, "backup: %d bytes to %s; %s\n", n, *to, summary)
	return 0
}

// fetchBackup saves GET base/admin/backup to path, refusing a body shorter
// than its Content-Length.
func fetchBackup(ctx context.Context, base, token, path string) (int64, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + "/admin/backup")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, fmt.Errorf("--url %q: want http(s)://HOST:PORT", base)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("GET %s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(body)))
	}
	want, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GET %s: no Content-Length; is this a gmailrelay?", u.Redacted())
	}
	var n int64
	err = acceptlog.WriteFileAtomic(path, func(w io.Writer) error {
		var err error
		n, err = io.Copy(w, resp.Body)
		if err == nil && n != want {
			err = fmt.Errorf("the stream ended after %d of %d bytes", n, want)
		}
		return err
	})
	return n, err
}

// checkCopy opens the log copy at path, runs its invariant check and
// returns a one-line summary.
func checkCopy(ctx context.Context, path string) (string, error) {
	l, err := acceptlog.Open(path, acceptlog.Options{})
	if err != nil {
		return "", err
	}
	defer l.Close()
	if err := l.Check(ctx); err != nil {
		return "", err
	}
	st, err := l.Stats(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d jobs, %d lines, check ok", st.Jobs, st.Lines), nil
}

// runCompact writes a compacted copy of a log no relay has open, with
// bbolt's own compaction, giving back the space pruned jobs left.
func runCompact(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("compact", stderr, "gmailrelay compact --data FILE --to OUT",
		"Writes a compacted copy of a stopped relay's log; move it into place while the relay is stopped.")
	data := fs.String("data", "", "a bbolt log file no relay has open")
	to := fs.String("to", "", "where to write the compacted copy (must not exist)")
	fail := failer(stderr, "compact")
	if code, ok := parseNoArgs(fs, args, fail); !ok {
		return code
	}
	switch {
	case *data == "" || *to == "":
		return fail(2, "--data and --to are required")
	}
	before, after, err := acceptlog.Compact(*data, *to)
	if err != nil {
		return fail(1, "%v", err)
	}
	fmt.Fprintf(stdout, "compact: %s %d bytes → %s %d bytes\n", *data, before, *to, after)
	return 0
}
