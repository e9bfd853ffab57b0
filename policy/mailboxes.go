package policy

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultMailbox is the mailbox a relay has when the policy names none, and
// the one --credentials / --subject configure
// (docs/design.md#several-mailboxes).
const DefaultMailbox = "default"

// DefaultDailySendLimit is a mailbox's daily sending budget when the policy
// sets none: Workspace's 2000 sends per rolling 24 h.
const DefaultDailySendLimit = 2000

// DefaultMaxRecipients is a mailbox's recipients a message (To, Cc and Bcc
// together) when the policy sets no max_recipients: Google Workspace's
// limit for messages sent through the Gmail API ("Gmail sending limits in
// Google Workspace", support.google.com/a/answer/166852).
const DefaultMaxRecipients = 100

// MaxRecipientsCeiling is the largest max_recipients a mailbox may set:
// Workspace's recipients a message for mail sent from Gmail itself, and
// the relay's bound on what one request may cost it.
const MaxRecipientsCeiling = 2000

// Mailbox is the policy of one mailbox (file key mailboxes.<name>).
type Mailbox struct {
	// Name is the map key: what a send's "mailbox" field, the log's jobs,
	// metrics and ?mailbox= filters call it.
	Name string
	// Address is the mailbox's own address (lower-case). Required for every
	// mailbox but the default one, whose address may stay unknown (any
	// From then goes to it, as with one mailbox before).
	Address string
	// SendAs lists the other From addresses (Gmail's send-as aliases) a
	// send may carry to pick this mailbox (lower-case).
	SendAs []string
	// Credentials is the path of this mailbox's Google JSON (authorized
	// user token or service account); empty means the relay's
	// --credentials.
	Credentials string
	// Subject is the user a service account acts for (domain-wide
	// delegation); empty means none (or --subject for the default mailbox).
	Subject string
	// QuotaPerMinute is the mailbox's own Gmail quota budget in units per
	// minute; zero means the relay's --quota-per-minute.
	QuotaPerMinute int
	// DailySendLimit is the number of attempts handed to Gmail per rolling
	// 24 h (resends count).
	DailySendLimit int
	// MaxRecipients is the most addresses a message sent as this mailbox
	// may carry in To, Cc and Bcc together (1..MaxRecipientsCeiling).
	MaxRecipients int
}

// Addresses returns the From addresses that pick the mailbox: its address
// and its send_as aliases, lower-case.
func (m Mailbox) Addresses() []string {
	if m.Address == "" {
		return m.SendAs
	}
	return append([]string{m.Address}, m.SendAs...)
}

// DailySendLimit returns the named mailbox's daily sending budget
// (DefaultDailySendLimit when the policy sets none).
func (p *Policy) DailySendLimit(name string) int {
	if m, ok := p.Mailboxes[name]; ok && m.DailySendLimit > 0 {
		return m.DailySendLimit
	}
	return DefaultDailySendLimit
}

// MaxRecipients returns the named mailbox's recipients a message
// (DefaultMaxRecipients when the policy sets none).
func (p *Policy) MaxRecipients(name string) int {
	if m, ok := p.Mailboxes[name]; ok && m.MaxRecipients > 0 {
		return m.MaxRecipients
	}
	return DefaultMaxRecipients
}

// MailboxList returns the policy's mailboxes, the default one first and the
// others by name. A policy without mailboxes has one: the default, with no
// address, no credentials of its own and the default limits.
func (p *Policy) MailboxList() []Mailbox {
	if len(p.Mailboxes) == 0 {
		return []Mailbox{{Name: DefaultMailbox, DailySendLimit: DefaultDailySendLimit, MaxRecipients: DefaultMaxRecipients}}
	}
	out := make([]Mailbox, 0, len(p.Mailboxes))
	for _, m := range p.Mailboxes {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mailbox) int {
		switch {
		case a.Name == DefaultMailbox:
			return -1
		case b.Name == DefaultMailbox:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// mailboxes parses the mailboxes mapping. Names follow the channel-name
// rules; every address appears in one mailbox only.
func mailboxes(n *yaml.Node, path string) (map[string]Mailbox, error) {
	entries, err := mapping(n, path+".")
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, &FieldError{Field: path, Line: line(resolve(n)), Message: "at least one mailbox, or leave mailboxes out"}
	}
	out := map[string]Mailbox{}
	owner := map[string]string{} // address → the mailbox that has it
	for _, e := range entries {
		if msg := checkName("mailbox", e.name); msg != "" {
			return nil, &FieldError{Field: e.path, Line: e.key.Line, Message: msg}
		}
		m, err := mailbox(e)
		if err != nil {
			return nil, err
		}
		for _, a := range m.Addresses() {
			if other, dup := owner[a]; dup {
				return nil, &FieldError{Field: e.path, Line: e.key.Line,
					Message: fmt.Sprintf("address %s is already mailbox %s's; a From must pick one mailbox", a, other)}
			}
			owner[a] = e.name
		}
		out[e.name] = m
	}
	return out, nil
}

// mailbox parses one mailbox's mapping.
func mailbox(mb entry) (Mailbox, error) {
	m := Mailbox{Name: mb.name, DailySendLimit: DefaultDailySendLimit, MaxRecipients: DefaultMaxRecipients}
	fields, err := mapping(mb.value, mb.path+".")
	if err != nil {
		return m, err
	}
	err = parseFields(fields, fieldParsers{
		"address":          into(&m.Address, ofNode(address)),
		"subject":          into(&m.Subject, ofNode(address)),
		"send_as":          into(&m.SendAs, ofNode(addressList)),
		"credentials":      into(&m.Credentials, checked(checkFilePath)),
		"quota_per_minute": into(&m.QuotaPerMinute, atLeastOne),
		"daily_send_limit": into(&m.DailySendLimit, atLeastOne),
		"max_recipients":   into(&m.MaxRecipients, between(1, MaxRecipientsCeiling)),
	})
	if err != nil {
		return m, err
	}
	if m.Address == "" && (mb.name != DefaultMailbox || len(m.SendAs) > 0) {
		return m, &FieldError{Field: mb.path + ".address", Line: line(resolve(mb.value)),
			Message: "required: the mailbox's own address (only the default mailbox without send_as may leave it out)"}
	}
	return m, nil
}

// checkFilePath returns why s cannot be a credentials file path, or "".
func checkFilePath(s string) string {
	if strings.ContainsAny(s, "\r\n\x00") {
		return "must be a file path"
	}
	return ""
}

// checkSecretPath returns why s cannot be msgid_secret_file's path, or "".
func checkSecretPath(s string) string {
	if strings.TrimSpace(s) == "" {
		return "must name the file holding the Message-ID secret"
	}
	return checkFilePath(s)
}

// address reads one bare e-mail address (no display name), lower-case.
func address(n *yaml.Node, path string) (string, error) {
	s, err := str(n, path)
	if err != nil {
		return "", err
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return "", &FieldError{Field: path, Line: resolve(n).Line, Message: fmt.Sprintf("not a bare e-mail address such as support@example.com: %q", s)}
	}
	return strings.ToLower(a.Address), nil
}

// addressList reads a list of bare addresses (or one address).
func addressList(n *yaml.Node, path string) ([]string, error) {
	n = resolve(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		a, err := address(n, path)
		return []string{a}, err
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil, &FieldError{Field: path, Line: line(n), Message: "must be a list of addresses"}
	}
	var out []string
	for i, item := range n.Content {
		a, err := address(item, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
