package main

import (
	"fmt"
	"net/http"
	"time"
)

// httpTimeouts bound how long a client may hold a connection.
type httpTimeouts struct {
	// ReadHeader: the request line and headers (slowloris).
	ReadHeader time.Duration
	// Read: the whole request, body included: a 35 MB message at about
	// 300 KB/s, and no longer for a body sent one byte at a time.
	Read time.Duration
	// Write: from the end of the headers to the end of the answer, so the
	// body, Gmail's send (up to --send-timeout), the read-back of the
	// Message-ID and a margin all fit; a slow Gmail must never cut an
	// answer the relay already recorded. GET /admin/backup lifts it for
	// its own stream.
	Write time.Duration
	// Idle: a keep-alive connection with no request.
	Idle time.Duration
}

// serverTimeouts derives the relay's timeouts from the Gmail call deadline.
func serverTimeouts(sendTimeout time.Duration) httpTimeouts {
	const read = 2 * time.Minute
	return httpTimeouts{
		ReadHeader: 10 * time.Second,
		Read:       read,
		Write:      read + 3*sendTimeout + 30*time.Second,
		Idle:       90 * time.Second,
	}
}

// newHTTPServer is the relay's http.Server: every timeout set, headers
// bounded to 64 KB (a Message-ID path is short; nothing needs more).
func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// minInflightBytes is the smallest --max-inflight-bytes: below it even
// ordinary JSON sends would queue behind each other.
const minInflightBytes = 1 << 20

func validateInflight(n int64) error {
	if n < minInflightBytes {
		return fmt.Errorf("--max-inflight-bytes must be at least %d (1 MiB), got %d", minInflightBytes, n)
	}
	return nil
}

// minBodyRate is api.Config's MinBodyRate for --min-body-rate, whose 0
// means no minimum (api's 0 means its default).
func (c *serveConfig) minBodyRate() int64 {
	if c.MinBodyRate == 0 {
		return -1
	}
	return c.MinBodyRate
}
