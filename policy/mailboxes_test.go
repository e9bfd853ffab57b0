package policy_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/policy"
)

const threeMailboxes = `
mailboxes:
  support: {address: Support@Example.com, send_as: [help@example.com], credentials: /secrets/support.json, quota_per_minute: 600}
  billing: {address: billing@example.com, subject: billing@example.com, daily_send_limit: 50, max_recipients: 2000}
  default: {daily_send_limit: 7}
channels:
  default: {on_unknown: retry}
`

func TestParseMailboxes(t *testing.T) {
	p, err := policy.Parse([]byte(threeMailboxes))
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Mailbox{
		{Name: "default", DailySendLimit: 7, MaxRecipients: policy.DefaultMaxRecipients},
		{Name: "billing", Address: "billing@example.com", Subject: "billing@example.com", DailySendLimit: 50, MaxRecipients: 2000},
		{Name: "support", Address: "support@example.com", SendAs: []string{"help@example.com"}, Credentials: "/secrets/support.json",
			QuotaPerMinute: 600, DailySendLimit: policy.DefaultDailySendLimit, MaxRecipients: policy.DefaultMaxRecipients},
	}
	if got := p.MailboxList(); !reflect.DeepEqual(got, want) {
		t.Errorf("MailboxList() =\n%+v\nwant\n%+v", got, want)
	}
	if got := p.DailySendLimit("billing"); got != 50 {
		t.Errorf("billing's daily limit = %d, want 50", got)
	}
	if got := p.Mailboxes["support"].Addresses(); !reflect.DeepEqual(got, []string{"support@example.com", "help@example.com"}) {
		t.Errorf("support's addresses = %v", got)
	}
	if got, def := p.MaxRecipients("billing"), p.MaxRecipients("support"); got != 2000 || def != 100 {
		t.Errorf("max recipients: billing %d, support %d; want 2000 and the default 100", got, def)
	}
	def := policy.Default()
	if got := def.MaxRecipients(policy.DefaultMailbox); got != policy.DefaultMaxRecipients {
		t.Errorf("default policy's max recipients = %d, want %d", got, policy.DefaultMaxRecipients)
	}
	if got := def.DailySendLimit(policy.DefaultMailbox); got != policy.DefaultDailySendLimit {
		t.Errorf("default policy's daily limit = %d, want %d", got, policy.DefaultDailySendLimit)
	}
	if got := def.MailboxList(); len(got) != 1 || got[0].Name != policy.DefaultMailbox || got[0].Address != "" {
		t.Errorf("default policy's mailboxes = %+v, want one: default, no address", got)
	}
}

func TestParseMailboxesRefusesBadFields(t *testing.T) {
	for bad, field := range map[string]string{
		"support: {daily_send_limit: 5}":                                     "mailboxes.support.address",
		"default: {send_as: [a@x.com]}":                                      "mailboxes.default.address",
		"default: {daily_send_limit: 0}":                                     "mailboxes.default.daily_send_limit",
		"default: {quota_per_minute: -1}":                                    "mailboxes.default.quota_per_minute",
		"default: {max_recipients: 0}":                                       "mailboxes.default.max_recipients",
		"default: {max_recipients: 2001}":                                    "mailboxes.default.max_recipients",
		"default: {max_recipients: ten}":                                     "mailboxes.default.max_recipients",
		"default: {quota: 5}":                                                "mailboxes.default.quota",
		"Support: {address: a@x.com}":                                        "mailboxes.Support",
		"a: {address: 'A <a@x.com>'}":                                        "mailboxes.a.address",
		"a: {address: a@x.com, subject: nobody}":                             "mailboxes.a.subject",
		"a: {address: a@x.com, send_as: {x: 1}}":                             "mailboxes.a.send_as",
		"a: {address: a@x.com, send_as: [b@x.com, 'c']}":                     "mailboxes.a.send_as[1]",
		"a: {address: a@x.com}\n  b: {address: x@y.com, send_as: [A@x.com]}": "mailboxes.b",
		"a: {address: a@x.com, credentials: \"x\\ny\"}":                      "mailboxes.a.credentials",
	} {
		doc := "mailboxes:\n  " + bad + "\nchannels:\n  default: {on_unknown: retry}\n"
		_, err := policy.Parse([]byte(doc))
		var fe *policy.FieldError
		if err == nil || !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("Parse(%q) = %v, want an error on field %s", bad, err, field)
		}
	}
	if _, err := policy.Parse([]byte("mailboxes: {}\nchannels:\n  default: {on_unknown: retry}\n")); err == nil || !strings.Contains(err.Error(), "mailboxes") {
		t.Errorf("an empty mailboxes mapping: %v, want an error naming mailboxes", err)
	}
}

// The mailboxes snippet of docs/gmail-setup.md#4-several-mailboxes-in-one-relay
// is a whole policy file: without channels: it keeps the default channel
// (it is not refused with "channels: required").
func TestContractMailboxesSnippetIsAPolicy(t *testing.T) {
	p, err := policy.Parse([]byte(`mailboxes:
  support: {address: support@example.com, credentials: /secrets/support.json, quota_per_minute: 6000, daily_send_limit: 2000}
  billing: {address: billing@example.com, subject: billing@example.com}   # service account + domain-wide delegation
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(p.Mailboxes) != 2 || !reflect.DeepEqual(p.Channels, policy.Default().Channels) {
		t.Errorf("mailboxes %v, channels %+v; want 2 mailboxes and the default channel", p.Mailboxes, p.Channels)
	}
}
