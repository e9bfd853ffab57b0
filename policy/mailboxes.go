package policy

import (
	"gopkg.in/yaml.v3"
)

// DefaultMailbox is the one mailbox a relay has today (CONTRACT, "Several
// mailboxes").
const DefaultMailbox = "default"

// DefaultDailySendLimit is a mailbox's daily sending budget when the policy
// sets none: Workspace's 2000 sends per rolling 24 h.
const DefaultDailySendLimit = 2000

// Mailbox is the policy of one mailbox. Only the default mailbox and its
// daily_send_limit are read so far; other keys are refused.
type Mailbox struct {
	Name string
	// DailySendLimit is the number of attempts handed to Gmail per rolling
	// 24 h (resends count).
	DailySendLimit int
}

// DailySendLimit returns the named mailbox's daily sending budget
// (DefaultDailySendLimit when the policy sets none).
func (p *Policy) DailySendLimit(name string) int {
	if m, ok := p.Mailboxes[name]; ok && m.DailySendLimit > 0 {
		return m.DailySendLimit
	}
	return DefaultDailySendLimit
}

// mailboxes parses the mailboxes mapping: only "default", with only
// daily_send_limit (a whole number ≥ 1).
func mailboxes(n *yaml.Node, path string) (map[string]Mailbox, error) {
	entries, err := mapping(n, path+".")
	if err != nil {
		return nil, err
	}
	out := map[string]Mailbox{}
	for _, e := range entries {
		if e.name != DefaultMailbox {
			return nil, &FieldError{Field: e.path, Line: e.key.Line, Message: "only the mailbox \"default\" can be configured in this version"}
		}
		m := Mailbox{Name: e.name, DailySendLimit: DefaultDailySendLimit}
		fields, err := mapping(e.value, e.path+".")
		if err != nil {
			return nil, err
		}
		for _, f := range fields {
			switch f.name {
			case "daily_send_limit":
				v, err := integer(f.value, f.path)
				if err != nil {
					return nil, err
				}
				if v < 1 {
					return nil, &FieldError{Field: f.path, Line: f.value.Line, Message: "must be at least 1"}
				}
				m.DailySendLimit = v
			default:
				return nil, &FieldError{Field: f.path, Line: f.key.Line, Message: "unknown key (this version reads only daily_send_limit)"}
			}
		}
		out[e.name] = m
	}
	return out, nil
}
