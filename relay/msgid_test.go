package relay_test

import (
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestMessageIDVector(t *testing.T) {
	got := relay.MessageID("cus_123:order.shipped:ord_456", "inbound.yourdomain.com")
	want := "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>"
	if got != want {
		t.Fatalf("MessageID = %q, want %q", got, want)
	}
	key, err := relay.JobKey("cus_123", "order.shipped", "ord_456")
	if err != nil {
		t.Fatal(err)
	}
	if got := relay.MessageID(key, "inbound.yourdomain.com"); got != want {
		t.Fatalf("MessageID(JobKey) = %q, want %q", got, want)
	}
}

func TestJobKey(t *testing.T) {
	tests := []struct {
		name                          string
		customer, event, order, field string
	}{
		{"no customer", "", "order.shipped", "ord_456", "job.customer_id"},
		{"blank customer", "  ", "order.shipped", "ord_456", "job.customer_id"},
		{"no event", "cus_123", "", "ord_456", "job.event_type"},
		{"no order", "cus_123", "order.shipped", "", "job.order_id"},
		{"control character", "cus\x01", "order.shipped", "ord_456", "job"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := relay.JobKey(tt.customer, tt.event, tt.order)
			testenv.WantInvalid(t, err, tt.field)
		})
	}
	got, err := relay.JobKey("a", "b", "c")
	if err != nil || got != "a:b:c" {
		t.Fatalf("JobKey(a, b, c) = %q, %v; want a:b:c", got, err)
	}
}

func TestNormalizeMessageID(t *testing.T) {
	good := []struct{ in, want string }{
		{"<a@b>", "<a@b>"},
		{"a@b", "<a@b>"},
		{"  <a.b+c@mail.example.com>  ", "<a.b+c@mail.example.com>"},
		{"CAx=+_y@mail.gmail.com", "<CAx=+_y@mail.gmail.com>"},
		{"<x@[127.0.0.1]>", "<x@[127.0.0.1]>"},
	}
	for _, tt := range good {
		t.Run(tt.in, func(t *testing.T) {
			got, err := relay.NormalizeMessageID(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeMessageID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	bad := []string{
		"", "<>", "<", ">", "a", "<a>", "@b", "a@", "<a@b", "a@b>", "<<a@b>>",
		"a b@c", "a@b c", "a@b\r\nBcc: x@y", "a@b\n", "<a@b>\r", "a@b@c",
		"<a@b> (comment)", "ä@b", "a@b\x00",
	}
	for _, in := range bad {
		t.Run(in, func(t *testing.T) {
			_, err := relay.NormalizeMessageID(in)
			testenv.WantInvalid(t, err, "message_id")
		})
	}
}

func TestValidDomain(t *testing.T) {
	for _, d := range []string{"inbound.yourdomain.com", "localhost", "a-b.c1.example", "X.ORG"} {
		if err := relay.ValidDomain(d); err != nil {
			t.Errorf("ValidDomain(%q) = %v, want nil", d, err)
		}
	}
	for _, d := range []string{"", ".", "a..b", "a.", ".a", "-a.com", "a-.com", "a_b.com", "a b.com",
		"a.com>", "a@b.com", "ex\r\nample.com", string(make([]byte, 64)) + ".com"} {
		t.Run(d, func(t *testing.T) {
			testenv.WantInvalid(t, relay.ValidDomain(d), "domain")
		})
	}
}
