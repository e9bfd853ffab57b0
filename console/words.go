package console

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// reviewReasons says, in words, why the sweeper (or the send path) handed a
// job to a human. Reasons not listed are shown as written, with the line's
// note.
var reviewReasons = map[string]string{
	"duplicate":            "Duplicate: the mailbox holds this message more than once. The customer may have received it twice.",
	"duplicate_delivery":   "Duplicate delivery: the relay recorded two effects for this Message-ID, even if the mailbox shows one copy.",
	"review_channel":       "Found once in the mailbox, but this channel never resolves ambiguous sends by itself: confirm and mark it sent.",
	"missing_after_checks": "Not found in the mailbox after every check, and this channel never resends on its own: decide whether to retry.",
	"max_attempts":         "No attempt left: every attempt allowed by the channel was used and none is known to have been sent.",
	"handle_untrusted":     "Gmail has rewritten Message-IDs in this mailbox, so a search that finds nothing proves nothing.",
	"index_unverifiable":   "Gmail's search index could not be shown to have caught up, so a miss cannot be trusted.",
}

// reasonText returns the words for a review reason.
func reasonText(reason string) string {
	if t, ok := reviewReasons[reason]; ok {
		return t
	}
	if reason == "" {
		return "Handed to a human (no reason recorded)."
	}
	return "Handed to a human: " + strings.ReplaceAll(reason, "_", " ") + "."
}

// stateText explains a state in a few words, for job pages.
var stateText = map[gmailrelay.State]string{
	gmailrelay.StateForwarding: "handed to Gmail; outcome not known yet",
	gmailrelay.StateSent:       "sent: the effect is confirmed",
	gmailrelay.StateFailed:     "definitely not sent",
	gmailrelay.StateUnknown:    "ambiguous: the sweeper will search the mailbox",
	gmailrelay.StateReview:     "waiting for a human decision",
	gmailrelay.StateAbandoned:  "a human decided not to send",
	"queued":                   "accepted, waiting for the mailbox's budget or its send time",
}

// jobStateText explains j's state in a few words: an abandoned job that
// was cancelled while queued says who cancelled it (an API caller, or an
// operator with the admin token), not that a human decided.
func jobStateText(j gmailrelay.Job) string {
	if j.State == gmailrelay.StateAbandoned && j.LastReason == gmailrelay.ReasonCancelled && j.LastError != "" {
		return j.LastError + ": it will not be sent"
	}
	return stateText[j.State]
}

// detail is one labelled fact of a log line.
type detail struct{ Label, Value string }

// lineDetails lists the facts a line carries, in reading order, skipping
// empty ones.
func lineDetails(l gmailrelay.Line) []detail {
	var d []detail
	add := func(label, v string) {
		if v != "" {
			d = append(d, detail{label, v})
		}
	}
	num := func(label string, n int) {
		if n != 0 {
			add(label, strconv.Itoa(n))
		}
	}
	add("channel", l.Channel)
	add("source", l.Source)
	add("gmail id", l.GmailID)
	add("thread", l.ThreadID)
	if len(l.LabelIDs) > 0 {
		add("labels", strings.Join(l.LabelIDs, ", "))
	}
	num("status", l.Status)
	if l.Retryable {
		add("retryable", "yes")
	}
	add("error", l.Error)
	add("query", l.Query)
	if l.Kind == gmailrelay.KindSearch || l.Query != "" {
		add("hits", fmt.Sprintf("%d (%d with SENT)", l.Hits, l.SentHits))
	}
	num("check", l.Check)
	add("rule", l.RuleID)
	add("mode", l.Mode)
	add("stored Message-ID", l.StoredMessageID)
	if l.HandleKept != nil {
		add("handle kept", map[bool]string{true: "yes", false: "NO — Gmail replaced it"}[*l.HandleKept])
	}
	add("recipient", l.Recipient)
	add("action", l.Action)
	add("report status", l.DSNStatus)
	add("diagnostic", l.Diagnostic)
	add("actor", l.Actor)
	add("note", l.Note)
	return d
}

// ago writes a duration the way a person reads an age: "3 min", "2 h 5 min".
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " days"
}
