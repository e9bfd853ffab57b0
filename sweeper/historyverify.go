package sweeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// Verifying sent jobs through the history. A sent job's own copy listed in
// the SENT history proves it exists; once the history is known complete
// to history_settle past that listing with no second copy, it proves the
// copy is the only one, and the job is verified without a search — the
// verify pass's searches (about 5 units a send) are not needed. A job the
// history cannot verify (a restart lost the list, the cursor fell back)
// keeps its verify pass.

// maxVerifying bounds the sent jobs waiting per mailbox.
const maxVerifying = 10000

// verifyingJobs are, per mailbox, the sent jobs whose own copy the history
// listed, with when: Message-ID → listing time. Guarded by the pass lock.
type verifyingJobs struct {
	mu sync.Mutex
	m  map[string]map[string]time.Time
}

func (v *verifyingJobs) add(mailbox, id string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]map[string]time.Time{}
	}
	box := v.m[mailbox]
	if box == nil {
		box = map[string]time.Time{}
		v.m[mailbox] = box
	}
	if _, ok := box[id]; !ok && len(box) < maxVerifying {
		box[id] = at
	}
}

// due takes the jobs of mailbox listed at or before cutoff.
func (v *verifyingJobs) due(mailbox string, cutoff time.Time) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for id, at := range v.m[mailbox] {
		if !at.After(cutoff) {
			out = append(out, id)
			delete(v.m[mailbox], id)
		}
	}
	return out
}

// verify verifies the sent jobs whose own copy the history listed long
// enough ago: the history, complete to cur.CompleteAt, shows no second
// copy for history_settle past the listing.
func (t *tail) verify(ctx context.Context, cur gmailrelay.HistoryCursor) error {
	// The settle is the job's channel's: every job listed before the
	// completed listing is looked at, and one not settled yet goes back.
	for _, id := range t.p.s.verifying.due(t.b.m.Name(), cur.CompleteAt) {
		j, err := t.p.s.log.Get(ctx, id)
		if errors.Is(err, gmailrelay.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read job %s: %w", id, err)
		}
		d, ok := historyVerified(j, t.p.channel(j.Channel), cur)
		if !ok {
			if j.State == gmailrelay.StateSent && !j.Verified {
				t.p.s.verifying.add(t.b.m.Name(), id, j.UpdatedAt)
			}
			continue
		}
		if _, err := t.p.apply(ctx, j, d); err != nil {
			return err
		}
	}
	return nil
}

// historyVerified decides a sent job whose own copy the history listed:
// verified (a search line of the history with one hit, reason verified)
// once the history is complete to history_settle past the job's last
// write with no second copy; ok is false before that, or for a job no
// longer waiting for verification.
func historyVerified(j gmailrelay.Job, ch policy.Channel, cur gmailrelay.HistoryCursor) (decision, bool) {
	if j.State != gmailrelay.StateSent || j.Verified || j.Effects != 1 || cur.CompleteAt.Before(j.UpdatedAt.Add(ch.Settle())) {
		return decision{}, false
	}
	d := keep(j)
	d.lines = []gmailrelay.Line{{Kind: gmailrelay.KindSearch, Attempt: j.Attempts, Query: historyQuery, Hits: 1, SentHits: 1,
		Reason: ReasonVerified, Witness: witnessHistory, GmailID: j.GmailID,
		Note: "one copy in the mailbox's SENT history, complete to " + cur.CompleteAt.UTC().Format(time.RFC3339)}}
	d.checks, d.looks, d.verified, d.next, d.keepNext = 0, j.VerifyLooks+1, true, time.Time{}, false
	return d.counting(tVerified), true
}

// historySecondCopy decides a sent job a second copy of which the history
// listed (h: not the copy its effect line counts): as a search that found
// one more copy (settleFound): an effect line, and review
// duplicate_delivery — the relay delivered the message twice.
func historySecondCopy(j gmailrelay.Job, h hit) decision {
	d := keep(j)
	d.found, d.to = &h, gmailrelay.StateSent
	d.say = logLine{level: zerolog.WarnLevel, msg: "a second copy of a sent job in the mailbox's history", attrs: []string{"gmail_id", h.id}}
	return d.counting(tFound)
}
