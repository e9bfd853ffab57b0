package relay

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Backoff bounds for Gmail's rate-limit answers that carry no retry time
// (neither a Retry-After header nor "Retry after <RFC 3339>" in the
// message): the first pause is MinBackoff, each consecutive one twice the
// last, up to MaxBackoff, each with up to a quarter more as jitter (never
// past MaxBackoff).
const (
	MinBackoff = time.Second
	MaxBackoff = 15 * time.Minute
)

// MaxPause is the longest pause a retry time from Gmail may set. The
// daily sending limit's rolling 24 h is the longest wait Gmail has reason
// to ask for; a longer one (a broken header, proxy or clock) would
// otherwise stop the mailbox for good.
const MaxPause = 24 * time.Hour

// retryAfterMarker is how Gmail writes the retry instant in the text of a
// quota answer: "User-rate limit exceeded.  Retry after
// 2024-11-12T11:16:42.247Z" (and "Daily user sending limit exceeded. Retry
// after …").
const retryAfterMarker = "retry after "

// maxRetryText bounds how much of a message the parser looks at: Gmail's
// messages are short, and this text comes from outside.
const maxRetryText = 4096

// RetryAtFromMessage finds Gmail's "Retry after <RFC 3339>" in an error
// message and returns that instant. ok is false when the message has no
// such phrase, or the word after it is not an RFC 3339 time. The phrase is
// matched without regard to case; the time may end the message or be
// followed by space or punctuation ("." "," ")" ";").
func RetryAtFromMessage(msg string) (at time.Time, ok bool) {
	if len(msg) > maxRetryText {
		msg = msg[:maxRetryText]
	}
	lower := asciiLower(msg) // same length as msg, so indexes carry over
	for off := 0; ; {
		i := strings.Index(lower[off:], retryAfterMarker)
		if i < 0 {
			return time.Time{}, false
		}
		start := off + i + len(retryAfterMarker)
		end := start
		for end < len(msg) && !strings.ContainsRune(" \t\r\n,;)\"'", rune(msg[end])) {
			end++
		}
		word := strings.TrimRight(msg[start:end], ".")
		if t, err := time.Parse(time.RFC3339Nano, word); err == nil {
			return t, true
		}
		off = start
	}
}

// asciiLower lowers ASCII letters only and keeps every other byte, so
// that the result has msg's length even when msg is not valid UTF-8
// (strings.ToLower would replace such bytes by U+FFFD, 3 bytes each).
func asciiLower(msg string) string {
	b := []byte(msg)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// backoff is the exponential pause for rate-limit answers without a retry
// time; it lives in the Quota (one per mailbox), and q.mu guards it.
type backoff struct {
	next time.Duration // the pause the next such answer gets (before jitter); 0 means MinBackoff
	// jitter returns a random duration in [0, n]; nil means math/rand/v2.
	jitter func(n time.Duration) time.Duration
}

// take returns the pause for one more rate-limit answer without a retry
// time and doubles the next one.
func (b *backoff) take() time.Duration {
	d := b.next
	if d < MinBackoff {
		d = MinBackoff
	}
	b.next = min(2*d, MaxBackoff)
	j := b.jitter
	if j == nil {
		j = func(n time.Duration) time.Duration { return rand.N(n + 1) }
	}
	return min(d+j(d/4), MaxBackoff)
}

// RateLimited records that Gmail answered this mailbox with a rate limit
// and pauses every caller (sends and the sweeper's searches) until Gmail's
// retry time: retryIn when Gmail gave one (header or message text, see
// ProviderError.RetryAfter; at most MaxPause), else the next step of the exponential
// backoff (MinBackoff doubling to MaxBackoff, with jitter). It returns the
// pause it set.
func (q *Quota) RateLimited(retryIn time.Duration) time.Duration {
	q.mu.Lock()
	d := min(retryIn, MaxPause)
	if d <= 0 {
		d = q.backoff.take()
	}
	until := q.now().Add(d)
	if until.After(q.pauseUntil) {
		q.pauseUntil = until
	}
	q.mu.Unlock()
	q.publishPause(until)
	return d
}

// Answered records that Gmail answered a call of this mailbox without a
// rate limit: the backoff starts again from MinBackoff. A pause already
// set stays.
func (q *Quota) Answered() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.backoff.next = 0
}

// PausedFor returns how long the mailbox stays paused after a rate-limit
// answer from Gmail (0 when it is not paused).
func (q *Quota) PausedFor() time.Duration {
	q.syncPause()
	q.mu.Lock()
	defer q.mu.Unlock()
	if d := q.pauseUntil.Sub(q.now()); d > 0 {
		return d
	}
	return 0
}

// pauseDBTimeout bounds one read or write of the shared pause.
const pauseDBTimeout = 5 * time.Second

// SharePauses keeps the mailbox's rate-limit pause in the log's mailbox
// record (a shared log: PostgreSQL), so a rate limit Gmail answered to one
// replica pauses every replica's sends and searches: a pause this Quota
// sets is written there, and every check of the quota first reads it (one
// indexed row; an error leaves the local pause as it is). The backoff's
// step stays per process; the per-minute bucket is this process's share of
// the budget (SetShare).
func (q *Quota) SharePauses(store gmailrelay.MailboxPauses, mailbox string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pauses, q.mailbox = store, mailbox
}

// syncPause takes the shared pause into pauseUntil when it is later.
func (q *Quota) syncPause() {
	store, mailbox, ctx, cancel := q.sharedPauses()
	if store == nil {
		return
	}
	defer cancel()
	until, err := store.PausedUntil(ctx, mailbox)
	if err != nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if until.After(q.pauseUntil) {
		q.pauseUntil = until
	}
}

// publishPause writes a pause to the shared record (when there is one).
func (q *Quota) publishPause(until time.Time) {
	store, mailbox, ctx, cancel := q.sharedPauses()
	if store == nil {
		return
	}
	defer cancel()
	_ = store.PauseUntil(ctx, mailbox, until)
}

// sharedPauses returns the shared pause record (nil when there is none)
// and a context bounded by pauseDBTimeout for one call to it; cancel is
// nil when store is.
func (q *Quota) sharedPauses() (store gmailrelay.MailboxPauses, mailbox string, ctx context.Context, cancel context.CancelFunc) {
	q.mu.Lock()
	store, mailbox = q.pauses, q.mailbox
	q.mu.Unlock()
	if store == nil {
		return nil, "", nil, nil
	}
	ctx, cancel = context.WithTimeout(context.Background(), pauseDBTimeout)
	return store, mailbox, ctx, cancel
}
