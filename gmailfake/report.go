package gmailfake

import (
	"bytes"
	"fmt"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"
	"time"
)

// The reports' wording follows Gmail's current bounces as the Sisimai
// bounce parser's Gmail module and its sample messages show them; the
// delivery-status fields are RFC 3464's.

// reportDate is how the reports write their dates.
const reportDate = time.RFC1123Z

// reportRaw is the RFC 5322 message of report r for account, with
// Message-ID msgID, and its From and Subject.
func reportRaw(account, msgID string, r pendingReport) (raw []byte, from, subject string) {
	if r.kind == reportLimit {
		return limitNoticeRaw(account, msgID, r.due), LimitNoticeFrom, SubjectFailure
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	subject = SubjectFailure
	human, status := failureText(r.recipients), failureStatus(r)
	if r.kind == reportDelay {
		subject = SubjectDelay
		human, status = delayText(r.recipients, r.sentAt, r.due), delayStatus(r)
	}
	writePart(mw, `text/plain; charset="UTF-8"`, human)
	writePart(mw, "message/delivery-status", status)
	writePart(mw, "text/rfc822-headers", r.headers)
	mw.Close()

	var b bytes.Buffer
	field := func(name, value string) {
		if oneLine(value) {
			fmt.Fprintf(&b, "%s: %s\r\n", name, value)
		}
	}
	field("From", MailerDaemon)
	field("To", account)
	field("Auto-Submitted", "auto-replied")
	field("Subject", subject)
	if r.messageID != "" {
		field("References", r.messageID)
		field("In-Reply-To", r.messageID)
	}
	if r.kind == reportFailure {
		field("X-Failed-Recipients", strings.Join(r.recipients, ", "))
	}
	field("Message-ID", msgID)
	field("Date", r.due.Format(reportDate))
	field("MIME-Version", "1.0")
	field("Content-Type", mime.FormatMediaType("multipart/report",
		map[string]string{"report-type": "delivery-status", "boundary": mw.Boundary()}))
	b.WriteString("\r\n")
	b.Write(body.Bytes())
	return b.Bytes(), MailerDaemon, subject
}

// writePart adds one part of type ctype holding body to mw.
func writePart(mw *multipart.Writer, ctype string, body []byte) {
	w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {ctype}})
	if err == nil {
		_, _ = w.Write(body) // a bytes.Buffer does not fail
	}
}

// limitNoticeRaw is Gmail's sending-limit notice: plain text, naming no
// message.
func limitNoticeRaw(account, msgID string, at time.Time) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: %s\r\nDate: %s\r\n",
		LimitNoticeFrom, account, SubjectFailure, msgID, at.Format(reportDate))
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=\"UTF-8\"\r\n\r\n")
	b.WriteString(LimitNoticeText + "\r\n")
	return b.Bytes()
}

// noSuchUser is the remote server's answer for a bounced recipient, as
// Gmail quotes it.
const noSuchUser = "550 5.1.1 The email account that you tried to reach does not exist. " +
	"Please try double-checking the recipient's email address for typos or unnecessary spaces."

// cannotConnect is the reason given for a delayed recipient.
const cannotConnect = "The recipient server did not accept our requests to connect."

// retryFor is how long Gmail retries a delayed message (about two days).
const retryFor = 48 * time.Hour

func failureText(rcpts []string) []byte {
	var b bytes.Buffer
	b.WriteString("\r\n** Address not found **\r\n\r\n")
	for _, r := range rcpts {
		fmt.Fprintf(&b, "Your message wasn't delivered to %s because the address couldn't be found, "+
			"or is unable to receive mail.\r\n\r\n", r)
	}
	b.WriteString("Learn more here: https://support.google.com/mail/?p=NoSuchUser\r\n\r\n")
	b.WriteString("The response was:\r\n\r\n" + noSuchUser + " https://support.google.com/mail/?p=NoSuchUser\r\n")
	return b.Bytes()
}

func delayText(rcpts []string, sent, now time.Time) []byte {
	var b bytes.Buffer
	hours := int(sent.Add(retryFor).Sub(now).Hours())
	b.WriteString("\r\n** Message not delivered yet **\r\n\r\n")
	fmt.Fprintf(&b, "There was a temporary problem delivering your message to %s. Gmail will retry for %d more hours. "+
		"You'll be notified if the delivery fails permanently.\r\n\r\n", strings.Join(rcpts, ", "), max(hours, 1))
	b.WriteString("The response was:\r\n\r\n" + cannotConnect + "\r\n")
	return b.Bytes()
}

// statusHead is the per-message block of a delivery-status part.
func statusHead(r pendingReport) *bytes.Buffer {
	var b bytes.Buffer
	b.WriteString("Reporting-MTA: dns; googlemail.com\r\n")
	fmt.Fprintf(&b, "Arrival-Date: %s\r\n", r.sentAt.Format(reportDate))
	if r.messageID != "" && oneLine(r.messageID) {
		fmt.Fprintf(&b, "X-Original-Message-ID: %s\r\n", r.messageID)
	}
	return &b
}

func failureStatus(r pendingReport) []byte {
	b := statusHead(r)
	for _, rc := range r.recipients {
		fmt.Fprintf(b, "\r\nFinal-Recipient: rfc822; %s\r\nAction: failed\r\nStatus: 5.1.1\r\n", rc)
		fmt.Fprintf(b, "Diagnostic-Code: smtp; %s\r\nLast-Attempt-Date: %s\r\n", noSuchUser, r.due.Format(reportDate))
	}
	return b.Bytes()
}

func delayStatus(r pendingReport) []byte {
	b := statusHead(r)
	for _, rc := range r.recipients {
		fmt.Fprintf(b, "\r\nFinal-Recipient: rfc822; %s\r\nAction: delayed\r\nStatus: 4.4.1\r\n", rc)
		fmt.Fprintf(b, "Diagnostic-Code: smtp; %s\r\nLast-Attempt-Date: %s\r\nWill-Retry-Until: %s\r\n",
			cannotConnect, r.due.Format(reportDate), r.sentAt.Add(retryFor).Format(reportDate))
	}
	return b.Bytes()
}

// headerSection is raw's header section with CRLF line breaks, as a
// report returns it.
func headerSection(raw []byte) []byte {
	m := parseRFC822(raw)
	var b bytes.Buffer
	for _, h := range m.headers {
		v := strings.ReplaceAll(strings.ReplaceAll(h.value, "\r\n", "\n"), "\n", "\r\n")
		b.WriteString(h.name + ":" + v + "\r\n")
	}
	return b.Bytes()
}
