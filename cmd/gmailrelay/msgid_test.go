package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestMsgID(t *testing.T) {
	const want = "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>\n"
	noEnv := func(string) string { return "" }
	withEnv := func(name string) string {
		if name == msgidDomainEnv {
			return "inbound.yourdomain.com"
		}
		return ""
	}
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
	}{
		{"key", []string{"--key", "cus_123:order.shipped:ord_456", "--domain", "inbound.yourdomain.com"}, noEnv},
		{"job", []string{"--customer-id", "cus_123", "--event-type", "order.shipped", "--order-id", "ord_456", "--domain", "inbound.yourdomain.com"}, noEnv},
		{"domain from env", []string{"--key=cus_123:order.shipped:ord_456"}, withEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := msgID(tt.args, tt.getenv, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != want {
				t.Fatalf("stdout = %q, want %q", got, want)
			}
		})
	}
}

func TestMsgIDBadFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantFlag string
	}{
		{"no key", []string{"--domain", "example.com"}, "--key"},
		{"no domain", []string{"--key", "k"}, "--domain"},
		{"bad domain", []string{"--key", "k", "--domain", "bad domain"}, "--domain"},
		{"missing order id", []string{"--customer-id", "c", "--event-type", "e", "--domain", "example.com"}, "--order-id"},
		{"missing customer id", []string{"--event-type", "e", "--order-id", "o", "--domain", "example.com"}, "--customer-id"},
		{"colon in customer id", []string{"--customer-id", "a:b", "--event-type", "x", "--order-id", "y", "--domain", "example.com"}, "--customer-id must not contain ':'"},
		{"colon in order id", []string{"--customer-id", "a", "--event-type", "x", "--order-id", "y:z", "--domain", "example.com"}, "--order-id must not contain ':'"},
		{"blank event type", []string{"--customer-id", "a", "--event-type", " ", "--order-id", "y", "--domain", "example.com"}, "--event-type is required"},
		{"control character in the key", []string{"--customer-id", "a\x01", "--event-type", "x", "--order-id", "y", "--domain", "example.com"}, "--customer-id, --event-type and --order-id: key contains a control character"},
		{"key and job", []string{"--key", "k", "--order-id", "o", "--domain", "example.com"}, "--key"},
		{"unknown flag", []string{"--nope"}, "-nope"},
		{"extra argument", []string{"--key", "k", "--domain", "example.com", "extra"}, "extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := msgID(tt.args, func(string) string { return "" }, &stdout, &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout = %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.wantFlag) {
				t.Fatalf("stderr = %q, want it to name %s", stderr.String(), tt.wantFlag)
			}
		})
	}
}

func TestMsgIDThroughRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"msgid", "--key", "cus_123:order.shipped:ord_456", "--domain", "inbound.yourdomain.com"}, &stdout, &stderr)
	if code != 0 || stdout.String() != "<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>\n" {
		t.Fatalf("run msgid = %d, %q, %q", code, stdout.String(), stderr.String())
	}
}
