package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gmailrelay/gmailrelay/relay"
)

// msgidDomainEnv names the environment variable --domain defaults to.
const msgidDomainEnv = "GMAILRELAY_MSGID_DOMAIN"

// msgidSecretEnv names the environment variable --msgid-secret-file
// defaults to: the same one serve reads.
const msgidSecretEnv = "GMAILRELAY_MSGID_SECRET_FILE"

// runMsgID prints the Message-ID the relay derives for a job key. Bad or
// missing flags exit 2 with a message naming the flag.
func runMsgID(_ context.Context, args []string, stdout, stderr io.Writer) int {
	return msgID(args, os.Getenv, stdout, stderr)
}

// msgID is runMsgID with the environment passed in.
func msgID(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("msgid", stderr, "gmailrelay msgid (--key KEY | --customer-id ID --event-type TYPE --order-id ID) --domain DOMAIN [--msgid-secret-file F]",
		"Prints the Message-ID the relay gives the job: <job-hex(sha256(key))[:32]@domain>, or, with the",
		"relay's Message-ID secret, <job-hex(HMAC-SHA256(secret, key))[:32]@domain>.")
	key := fs.String("key", "", "the job key (or give --customer-id, --event-type and --order-id)")
	customerID := fs.String("customer-id", "", "the job's customer id")
	eventType := fs.String("event-type", "", "the job's event type")
	orderID := fs.String("order-id", "", "the job's order id")
	domain := fs.String("domain", getenv(msgidDomainEnv), "the Message-ID domain (default: $"+msgidDomainEnv+")")
	secretFile := fs.String("msgid-secret-file", getenv(msgidSecretEnv), "the relay's Message-ID secret file, if it has one (default: $"+msgidSecretEnv+")")
	fail := failer(stderr, "msgid")
	if code, ok := parseNoArgs(fs, args, fail); !ok {
		return code
	}
	jobGiven := *customerID != "" || *eventType != "" || *orderID != ""
	var k string
	switch {
	case *key != "" && jobGiven:
		return fail(2, "give --key or --customer-id/--event-type/--order-id, not both")
	case *key != "":
		k = *key
	case jobGiven:
		var err error
		if k, err = relay.JobKey(*customerID, *eventType, *orderID); err != nil {
			return fail(2, "%s", jobKeyProblem(err))
		}
	default:
		return fail(2, "--key (or --customer-id, --event-type and --order-id) is required")
	}
	if *domain == "" {
		return fail(2, "--domain is required (or set %s)", msgidDomainEnv)
	}
	if err := relay.ValidDomain(*domain); err != nil {
		var e *relay.Error
		if errors.As(err, &e) {
			return fail(2, "--domain: %s", e.Message)
		}
		return fail(2, "--domain: %v", err)
	}
	var secret []byte
	if *secretFile != "" {
		var err error
		if secret, err = readSecretFile(*secretFile); err != nil {
			return fail(2, "--msgid-secret-file: %v", err)
		}
	}
	fmt.Fprintln(stdout, relay.NewIDScheme(*domain, secret).MessageID(k))
	return 0
}

// jobKeyProblem says what is wrong with the --customer-id, --event-type and
// --order-id of a JobKey error, in the flags' words: relay's message names
// a part by its field (job.customer_id), which becomes the flag; a problem
// of the joined key names all three flags.
func jobKeyProblem(err error) string {
	var e *relay.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	if f := flagOf(e.Field); f != "key" && strings.Contains(e.Message, e.Field) {
		return strings.Replace(e.Message, e.Field, "--"+f, 1)
	}
	return "--customer-id, --event-type and --order-id: " + e.Message
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
