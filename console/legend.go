package console

import "fmt"

// glossary explains, in plain words, the terms the console's pages show.
// A page's legend lists the terms it uses (see the "legend" template
// function); a term missing here fails the page, which the console's
// tests render.
var glossary = map[string]string{
	"attempts":       "how many times the relay handed the message to Gmail's send call.",
	"effects":        "proof that Gmail accepted the message: its answer to the send, or the copy found in the mailbox. More than one effect means the recipients got more than one copy.",
	"handle trusted": "the relay read one of its own Message-IDs back from the mailbox and Gmail had kept it, so searching the mailbox for a Message-ID is reliable. Untrusted: Gmail replaced one, so a search that finds nothing proves nothing and such jobs wait for a human.",
	"rewrites":       "sends whose Message-ID Gmail replaced with its own.",
	"units":          "Gmail API quota units: every call to Gmail costs some (a send 100, a search 5); Gmail limits the units a mailbox may spend per minute.",
	"queued":         "accepted and stored, waiting for the mailbox's budget or its send time.",
	"forwarding":     "being handed to Gmail right now.",
	"unknown":        "handed to Gmail without a clear answer: the relay searches the mailbox before it would ever send again.",
	"review":         "the relay cannot decide alone whether the message went out: a human marks it sent, retries it or abandons it.",
	"channel":        "the policy a kind of message follows (for one, whether the relay may resend on its own after a search finds nothing).",
	"key":            "the caller's idempotency key: the same key always means the same message and the same Message-ID.",
	"search":         "one look in the mailbox for the job's Message-ID (check N is the Nth look); hits are the copies found, \"with SENT\" those in the Sent folder.",
	"Message-ID":     "the relay's name for the message, made from the key and kept on every attempt, so a copy already sent can be found.",
}

// term is one entry of a page's legend.
type term struct{ Term, Text string }

// legend returns the glossary's entries for terms, in the order given; a
// term the glossary lacks is an error, which fails the page's rendering.
func legend(terms ...string) ([]term, error) {
	out := make([]term, 0, len(terms))
	for _, t := range terms {
		text, ok := glossary[t]
		if !ok {
			return nil, fmt.Errorf("console: no glossary entry for %q", t)
		}
		out = append(out, term{t, text})
	}
	return out, nil
}
