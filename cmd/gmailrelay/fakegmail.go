package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/mail"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// runFakeGmail runs the Gmail emulator alone until ctx is done. Bad flags
// exit 2; a listen or serve error exits 1; a clean shutdown exits 0.
func runFakeGmail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gmailrelay fakegmail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8089", "address to listen on (port 0 picks a free port)")
	indexLag := fs.Duration("index-lag", 0, "how long before a sent message is searchable (get by id works at once)")
	rewrite := fs.Bool("rewrite-message-id", false, "replace the client's Message-ID with a Gmail-style one")
	quota := fs.Int("quota-per-minute", gmailfake.DefaultQuotaPerMinute, "per-user quota in Gmail units per minute")
	latency := fs.Duration("latency", 0, "added to every Gmail call, e.g. 150ms")
	token := fs.String("token", "", "bearer token Gmail calls must carry (empty: no auth)")
	account := fs.String("account", gmailfake.DefaultAccount, "the mailbox's primary address (userId me, From rewriting)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gmailrelay fakegmail [flags]")
		fmt.Fprintln(stderr, "\nRuns the Gmail API emulator. Results against it are emulator results, not a Gmail guarantee.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gmailrelay fakegmail: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case *indexLag < 0:
		return bad("--index-lag must not be negative, got %s", *indexLag)
	case *latency < 0:
		return bad("--latency must not be negative, got %s", *latency)
	case *quota <= 0:
		return bad("--quota-per-minute must be positive, got %d", *quota)
	}
	if a, err := mail.ParseAddress(*account); err != nil || a.Address != *account {
		return bad("--account must be a bare email address, got %q", *account)
	}

	srv := gmailfake.New(gmailfake.Options{
		IndexLag:         *indexLag,
		RewriteMessageID: *rewrite,
		QuotaPerMinute:   *quota,
		Latency:          *latency,
		Token:            *token,
		Account:          *account,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay fakegmail: listen on %s: %v\n", *addr, err)
		return 1
	}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "Gmail emulator listening on %s (account %s)\n", url, *account)
	fmt.Fprintln(stdout, "This is an emulator: results against it are not a Gmail guarantee.")
	fmt.Fprintf(stdout, "Point a Gmail client at %s/ (Go: option.WithEndpoint); control API at %s/_emulator/\n", url, url)

	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Requests inherit ctx so that emulated latency ends at shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "gmailrelay fakegmail: serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(stderr, "gmailrelay fakegmail: shutdown: %v\n", err)
		return 1
	}
	<-served
	fmt.Fprintln(stdout, "Gmail emulator stopped")
	return 0
}
