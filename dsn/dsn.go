// Package dsn reads the reports a mailbox receives about mail it sent:
// delivery status notifications (RFC 3464: multipart/report with a
// message/delivery-status part), Gmail's older plain-text bounce, and
// Gmail's notice that the account reached its sending limit.
//
// A report is outside input (anyone can mail the mailbox a message that
// looks like one), so Parse only reads what a report says: who failed or
// was delayed, and which Message-IDs and job headers the returned headers
// carry. Matching a report to a job, and believing it, is the caller's
// business. The MIME structure is read with the standard library
// (net/mail, mime, mime/multipart, net/textproto); Parse bounds what it
// reads (size, parts, nesting, recipients) and never panics.
package dsn

import (
	"bytes"
	"errors"
	"fmt"
	"net/mail"
	"strings"
)

// Kind is what a report is.
type Kind string

const (
	// KindDSN is a delivery status notification: per recipient, an
	// action (failed, delayed, …) and a status.
	KindDSN Kind = "dsn"
	// KindSendingLimit is Gmail's notice that the sending account
	// reached its sending limit and a message was not sent. It names no
	// message.
	KindSendingLimit Kind = "sending_limit"
)

// Actions a DSN gives a recipient (RFC 3464 §2.3.3).
const (
	ActionFailed    = "failed"
	ActionDelayed   = "delayed"
	ActionDelivered = "delivered"
	ActionRelayed   = "relayed"
	ActionExpanded  = "expanded"
)

// JobHeader is the header the relay writes into every message it sends,
// holding the job's hash; a report that returns the original headers
// returns it too, even when the Message-ID was replaced on the way.
const JobHeader = "X-Gmailrelay-Job"

// Limits on what Parse reads.
const (
	// MaxReportBytes is the largest report Parse reads.
	MaxReportBytes = 4 << 20
	// MaxParts is the most MIME parts Parse walks in one report.
	MaxParts = 64
	// MaxDepth is how deep multiparts may nest.
	MaxDepth = 4
	// MaxRecipients is the most recipients Parse reports.
	MaxRecipients = 1000
	// MaxDiagnostic is the longest diagnostic text kept (in bytes).
	MaxDiagnostic = 512
)

// Recipient is one recipient's fate in a report.
type Recipient struct {
	// Address is the recipient, as the report names it (the
	// Final-Recipient, or else the Original-Recipient), without its
	// address type ("rfc822;").
	Address string
	// Action is failed, delayed, delivered, relayed or expanded.
	Action string
	// Status is the enhanced status code (RFC 3463), such as 5.1.1;
	// empty when the report gives none.
	Status string
	// Diagnostic is the remote server's answer (Diagnostic-Code without
	// its type), or the report's own words when it has no code; at most
	// MaxDiagnostic bytes, one line.
	Diagnostic string
}

// Report is what a report says.
type Report struct {
	Kind Kind
	// Recipients are the report's recipients, in its order (none for a
	// sending-limit notice).
	Recipients []Recipient
	// MessageIDs are the Message-IDs of the returned message(s) (the
	// returned headers' Message-ID), with their angle brackets.
	MessageIDs []string
	// Jobs are the JobHeader values of the returned headers.
	Jobs []string
}

// ErrNotReport is wrapped by Parse's error for a message that is no report
// it can read: not a DSN, not Gmail's text bounce, not a limit notice.
var ErrNotReport = errors.New("not a delivery report")

// ErrMalformed is wrapped by Parse's error for a report whose structure is
// broken (headers, MIME, the delivery-status fields) or over a limit.
var ErrMalformed = errors.New("malformed delivery report")

// Parse reads raw, one whole message as the mailbox holds it (Gmail's
// format=raw, decoded).
func Parse(raw []byte) (Report, error) {
	if len(raw) > MaxReportBytes {
		return Report{}, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(raw), MaxReportBytes)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Report{}, fmt.Errorf("%w: headers: %v", ErrMalformed, err)
	}
	w := &walker{}
	if err := w.entity(textHeader(msg.Header), msg.Body, 0); err != nil {
		return Report{}, err
	}
	switch {
	case w.status:
		return w.report(KindDSN), nil
	case len(w.text) > 0:
		if isLimitNotice(textHeader(msg.Header), w.text) {
			return Report{Kind: KindSendingLimit}, nil
		}
		if r, ok := gmailTextBounce(w.text); ok {
			w.rep.Recipients = r
			if h, ok := returnedHeaders(w.text); ok {
				w.returned(h)
			}
			return w.report(KindDSN), nil
		}
	}
	return Report{}, fmt.Errorf("%w: no delivery-status part, no bounce text", ErrNotReport)
}

// limitNotice is the sentence of Gmail's sending-limit notice.
const limitNotice = "You have reached a limit for sending mail"

// isLimitNotice reports whether a text-only message is Gmail's notice
// that the account reached its sending limit: from nobody@gmail.com or
// Gmail's mailer-daemon, saying so.
func isLimitNotice(h textHeader, text []string) bool {
	from, err := mail.ParseAddress(h.get("From"))
	if err != nil {
		return false
	}
	switch strings.ToLower(from.Address) {
	case "nobody@gmail.com", "mailer-daemon@googlemail.com", "mailer-daemon@google.com":
	default:
		return false
	}
	for _, t := range text {
		if strings.Contains(t, limitNotice) {
			return true
		}
	}
	return false
}

// report is the walk's report of kind k, recipients clipped.
func (w *walker) report(k Kind) Report {
	r := w.rep
	r.Kind = k
	if len(r.Recipients) > MaxRecipients {
		r.Recipients = r.Recipients[:MaxRecipients]
	}
	return r
}

// returned notes the Message-ID and job header of returned headers h.
func (w *walker) returned(h textHeader) {
	if id := strings.TrimSpace(h.get("Message-Id")); id != "" && oneLine(id) {
		w.rep.MessageIDs = appendNew(w.rep.MessageIDs, id)
	}
	if job := strings.TrimSpace(h.get(JobHeader)); job != "" && oneLine(job) {
		w.rep.Jobs = appendNew(w.rep.Jobs, job)
	}
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// oneLine reports whether s holds no control character (a value that
// came folded across lines was unfolded by the header reader).
func oneLine(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// clip bounds a diagnostic to MaxDiagnostic bytes on one line.
func clip(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }), " ")
	s = strings.TrimSpace(s)
	if len(s) > MaxDiagnostic {
		s = s[:MaxDiagnostic]
		for len(s) > 0 && s[len(s)-1]&0xc0 == 0x80 { // do not cut a UTF-8 sequence
			s = s[:len(s)-1]
		}
		if len(s) > 0 && s[len(s)-1] >= 0xc0 {
			s = s[:len(s)-1]
		}
	}
	return s
}
