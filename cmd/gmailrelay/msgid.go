package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gmailrelay/gmailrelay/relay"
)

// msgidDomainEnv names the environment variable --domain defaults to.
const msgidDomainEnv = "GMAILRELAY_MSGID_DOMAIN"

// runMsgID prints the Message-ID the relay derives for a job key. Bad or
// missing flags exit 2 with a message naming the flag.
func runMsgID(_ context.Context, args []string, stdout, stderr io.Writer) int {
	return msgID(args, os.Getenv, stdout, stderr)
}

// msgID is runMsgID with the environment passed in.
func msgID(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gmailrelay msgid", flag.ContinueOnError)
	fs.SetOutput(stderr)
	key := fs.String("key", "", "the job key (or give --customer-id, --event-type and --order-id)")
	customerID := fs.String("customer-id", "", "the job's customer id")
	eventType := fs.String("event-type", "", "the job's event type")
	orderID := fs.String("order-id", "", "the job's order id")
	domain := fs.String("domain", getenv(msgidDomainEnv), "the Message-ID domain (default: $"+msgidDomainEnv+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gmailrelay msgid (--key KEY | --customer-id ID --event-type TYPE --order-id ID) --domain DOMAIN")
		fmt.Fprintln(stderr, "\nPrints <job-hex(sha256(key))[:32]@domain>, the Message-ID the relay gives the job.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gmailrelay msgid: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	jobGiven := *customerID != "" || *eventType != "" || *orderID != ""
	var k string
	switch {
	case *key != "" && jobGiven:
		return fail("give --key or --customer-id/--event-type/--order-id, not both")
	case *key != "":
		k = *key
	case jobGiven:
		var err error
		if k, err = relay.JobKey(*customerID, *eventType, *orderID); err != nil {
			var e *relay.Error
			if errors.As(err, &e) {
				return fail("--%s is required", flagOf(e.Field))
			}
			return fail("%v", err)
		}
	default:
		return fail("--key (or --customer-id, --event-type and --order-id) is required")
	}
	if *domain == "" {
		return fail("--domain is required (or set %s)", msgidDomainEnv)
	}
	if err := relay.ValidDomain(*domain); err != nil {
		var e *relay.Error
		if errors.As(err, &e) {
			return fail("--domain: %s", e.Message)
		}
		return fail("--domain: %v", err)
	}
	fmt.Fprintln(stdout, relay.MessageID(k, *domain))
	return 0
}

// flagOf maps a JobKey error field to its flag name.
func flagOf(field string) string {
	switch field {
	case "job.customer_id":
		return "customer-id"
	case "job.event_type":
		return "event-type"
	case "job.order_id":
		return "order-id"
	}
	return "key"
}
