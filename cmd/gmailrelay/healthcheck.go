package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealthcheck asks a running relay's /healthz, for container
// HEALTHCHECKs in images without curl or wget. Exit 0 when it answers 200.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("healthcheck", stderr, "")
	url := fs.String("url", "http://127.0.0.1:8080/healthz", "health endpoint to ask")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay healthcheck: --url: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay healthcheck: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "gmailrelay healthcheck: %s answered %d\n", *url, resp.StatusCode)
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}
