package gmailfake

import (
	"regexp"
	"slices"
	"strings"
	"time"
)

// Delivery truth after a 200: bounces, delays and the sending limit's late
// refusals.
//
//   - A send to a recipient matching Options.BounceRecipients is accepted
//     like any other (200, stored in SENT, one delivery), and
//     Options.BounceDelay later an RFC 3464 report arrives in the sending
//     account's INBOX: From "Mail Delivery Subsystem
//     <mailer-daemon@googlemail.com>", Subject "Delivery Status
//     Notification (Failure)", multipart/report with a human part, a
//     message/delivery-status part (Action: failed, Status: 5.1.1) and the
//     sent message's headers as text/rfc822-headers (layout: the Sisimai
//     bounce parser's Gmail module; fields: RFC 3464). One report per send
//     names every bounced recipient. Options.DelayRecipients gives the
//     same with Action: delayed, Status: 4.4.1, Subject "… (Delay)".
//   - Past the daily sending limit, the first Options.DailyLimitLag sends
//     are answered 200 and stored in SENT but not delivered (Gmail's
//     "Resolve errors" guide: there can be a delay of several minutes
//     before the API returns 429, and "you cannot assume that a 200
//     response means the email was successfully sent"), and a notice from
//     nobody@gmail.com naming no message arrives in INBOX (Stack Overflow
//     q. 35073576). One notice per burst: the first lagged send schedules
//     it, BounceDelay later; lagged sends before it arrives share it, and a
//     lagged send after it schedules another. After DailyLimitLag lagged
//     sends the limit is answered as without the lag (429, nothing stored)
//     until the rolling window frees, which ends the burst.
//
// Reports arrive on the emulator's clock: every Gmail call and every
// ground-truth read first adds the reports that are due, dated when they
// fell due, through the path every stored message takes (a messagesAdded
// history record with INBOX and UNREAD, the search index and its lag).

// DefaultBounceDelay is how long after a send its delivery report arrives
// when Options.BounceDelay is 0.
const DefaultBounceDelay = 30 * time.Second

var (
	// DefaultBounceRecipients matches the recipients that bounce when
	// Options.BounceRecipients is nil: addresses at bounce.test (a name
	// RFC 2606 reserves, so no real mail goes there).
	DefaultBounceRecipients = regexp.MustCompile(`@bounce\.test$`)
	// DefaultDelayRecipients matches the recipients whose delivery is
	// delayed when Options.DelayRecipients is nil: addresses at delay.test.
	DefaultDelayRecipients = regexp.MustCompile(`@delay\.test$`)
	// NoRecipients matches no address: as Options.BounceRecipients or
	// DelayRecipients it turns bounces or delays off.
	NoRecipients = regexp.MustCompile(`[^\x00-\x{10FFFF}]`)
)

// The senders and texts of Gmail's reports.
const (
	// MailerDaemon is the From of Gmail's delivery reports.
	MailerDaemon = "Mail Delivery Subsystem <mailer-daemon@googlemail.com>"
	// LimitNoticeFrom is the From of Gmail's sending-limit notice.
	LimitNoticeFrom = "nobody@gmail.com"
	// SubjectFailure is the Subject of a failure report and of the
	// sending-limit notice.
	SubjectFailure = "Delivery Status Notification (Failure)"
	// SubjectDelay is the Subject of a delay report.
	SubjectDelay = "Delivery Status Notification (Delay)"
	// LimitNoticeText is the body of the sending-limit notice.
	LimitNoticeText = "You have reached a limit for sending mail. Your message was not sent."
)

// bounceSettings are the delivery-report behaviours.
type bounceSettings struct {
	bounceRx, delayRx *regexp.Regexp
	delay             time.Duration
	limitLag          int
}

func newBounceSettings(opts Options) bounceSettings {
	b := bounceSettings{bounceRx: opts.BounceRecipients, delayRx: opts.DelayRecipients,
		delay: opts.BounceDelay, limitLag: max(opts.DailyLimitLag, 0)}
	if b.bounceRx == nil {
		b.bounceRx = DefaultBounceRecipients
	}
	if b.delayRx == nil {
		b.delayRx = DefaultDelayRecipients
	}
	if b.delay <= 0 {
		b.delay = DefaultBounceDelay
	}
	return b
}

// reportKind is what a pending INBOX message reports.
type reportKind int

const (
	reportFailure reportKind = iota // Action: failed
	reportDelay                     // Action: delayed
	reportLimit                     // the sending-limit notice
)

// pendingReport is a report that arrives in INBOX at due.
type pendingReport struct {
	kind       reportKind
	due        time.Time
	sentAt     time.Time
	recipients []string
	headers    []byte // the sent message's header section, CRLF
	messageID  string // the sent message's Message-ID, with angle brackets
	threadID   string // the sent message's thread
}

// bounceSplit returns the recipients of a send by a that bounce and those
// that are delayed (each once, in order; the account itself never).
// Addresses are matched in lower case.
func (s *Server) bounceSplit(a *account, rcpts []string) (bounced, delayed []string) {
	for _, r := range rcpts {
		l := strings.ToLower(r)
		switch {
		case strings.EqualFold(r, a.addr) || !oneLine(r) || slices.Contains(bounced, r) || slices.Contains(delayed, r):
		case s.bounce.bounceRx.MatchString(l):
			bounced = append(bounced, r)
		case s.bounce.delayRx.MatchString(l):
			delayed = append(delayed, r)
		}
	}
	return bounced, delayed
}

// oneLine reports whether v holds no control character, so it may go into
// a header field or a delivery-status line as it is.
func oneLine(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// dailyLimitLocked applies the daily sending limit to a send of a at now:
// under the limit nothing (and the burst of lagged sends is over); past it,
// while the burst has had fewer than DailyLimitLag sends, the send is
// accepted undelivered and a sending-limit notice is scheduled; otherwise
// it is refused with Gmail's daily-limit answer.
func (s *Server) dailyLimitLocked(a *account, now time.Time) (undelivered bool, e *apiError) {
	wait, full := s.dailyWaitLocked(a, now)
	switch {
	case !full:
		a.lagged = 0
		return false, nil
	case a.lagged < s.bounce.limitLag:
		a.lagged++
		if !a.noticeDue {
			a.noticeDue = true
			a.pending = append(a.pending, pendingReport{kind: reportLimit, due: now.Add(s.bounce.delay), sentAt: now})
		}
		return true, nil
	}
	a.counters.dailyLimited++
	return false, dailyLimited(now, wait, s.header)
}

// scheduleReportsLocked schedules the failure and delay reports of one
// delivery of m.
func (s *Server) scheduleReportsLocked(a *account, d delivery, m *stored, now time.Time) {
	for _, r := range []struct {
		kind  reportKind
		rcpts []string
	}{{reportFailure, d.bounced}, {reportDelay, d.delayed}} {
		if len(r.rcpts) == 0 {
			continue
		}
		a.pending = append(a.pending, pendingReport{kind: r.kind, due: now.Add(s.bounce.delay), sentAt: now,
			recipients: slices.Clone(r.rcpts), headers: headerSection(m.Raw), messageID: m.MessageID, threadID: m.ThreadID})
	}
}

// deliverDueLocked adds to INBOX every pending report due at now, oldest
// first, dated when it fell due.
func (s *Server) deliverDueLocked(now time.Time) {
	for _, a := range s.accounts {
		if len(a.pending) == 0 {
			continue
		}
		slices.SortStableFunc(a.pending, func(x, y pendingReport) int { return x.due.Compare(y.due) })
		n := 0
		for n < len(a.pending) && !a.pending[n].due.After(now) {
			s.addReportLocked(a, a.pending[n])
			n++
		}
		a.pending = slices.Delete(a.pending, 0, n)
	}
}

// addReportLocked stores report r in a's INBOX.
func (s *Server) addReportLocked(a *account, r pendingReport) {
	msgID := s.gmailMessageIDLocked(r.due, a)
	raw, from, subject := reportRaw(a.addr, msgID, r)
	st := &stored{
		Message: Message{
			ThreadID:  r.threadID,
			LabelIDs:  []string{labelInbox, labelUnread},
			MessageID: msgID,
			Account:   a.addr,
			Raw:       raw,
			StoredAt:  r.due,
		},
		acct:     a,
		msgIDKey: normalizeMsgID(msgID),
		from:     fromKey(from),
		subject:  threadSubject(subject),
	}
	if r.kind == reportLimit {
		a.noticeDue = false
	}
	a.counters.reports++
	s.addLocked(st, r.due)
}

// Bounced returns the recipients that sends carrying messageID (with or
// without angle brackets, any account) bounced for, once each, in order.
// They bounce when sent: the report arrives BounceDelay later.
func (s *Server) Bounced(messageID string) []string { return s.Lookup("", messageID).Bounced }

// Delayed returns the recipients that sends carrying messageID were
// delayed for, once each, in order.
func (s *Server) Delayed(messageID string) []string { return s.Lookup("", messageID).Delayed }

// Undelivered reports whether a send carrying messageID was answered 200
// past the daily limit (DailyLimitLag) and never delivered.
func (s *Server) Undelivered(messageID string) bool { return s.Lookup("", messageID).Undelivered }

// add counts delivery d into t.
func (t *Truth) add(d delivery) {
	if d.undelivered {
		t.Undelivered = true
		return
	}
	t.Deliveries++
	for _, r := range d.bounced {
		if !slices.Contains(t.Bounced, r) {
			t.Bounced = append(t.Bounced, r)
		}
	}
	for _, r := range d.delayed {
		if !slices.Contains(t.Delayed, r) {
			t.Delayed = append(t.Delayed, r)
		}
	}
}
