package relay_test

import (
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

// benchRaw is the send harness's typical message (api's benchMessage): what
// both raw paths hand PrepareRaw on every send.
const benchRaw = "From: Bench <bench@example.com>\r\nTo: rcpt@example.com\r\nSubject: bench <b1@bench.example>\r\n" +
	"Date: Mon, 01 Jun 2026 09:00:00 +0000\r\nMessage-ID: <b1@bench.example>\r\nMIME-Version: 1.0\r\n" +
	"Content-Type: text/plain; charset=UTF-8\r\n\r\nYour order has shipped. <b1@bench.example>\r\n"

// BenchmarkPrepareRaw measures PrepareRaw alone: "message-id" is the
// Gmail-compatible path (the message's Message-ID is the key), "key" a
// message without one sent under a key (the relay adds it), "lf" the first
// with bare LF line endings.
func BenchmarkPrepareRaw(b *testing.B) {
	keyed := []byte(benchRaw[:len("From: Bench <bench@example.com>\r\nTo: rcpt@example.com\r\n")] +
		"Subject: bench\r\nMIME-Version: 1.0\r\n\r\nYour order has shipped.\r\n")
	lf := []byte(strings.ReplaceAll(benchRaw, "\r\n", "\n"))
	for _, bc := range []struct {
		name, key string
		raw       []byte
	}{
		{"message-id", "", []byte(benchRaw)},
		{"key", "order-1", keyed},
		{"lf", "", lf},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := relay.PrepareRaw(bc.raw, bc.key, "", "bench.example"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
