package relay

import (
	"sync"
	"time"
)

// maxRecentSends bounds the sends a mailbox remembers (recentSends).
const maxRecentSends = 4096

// recentSends are the Gmail ids of the sends this process recorded from
// Gmail's answer, newest last, with their jobs' Message-IDs. The history
// tail reads a mailbox's new SENT messages: those it finds here are the
// relay's own recorded sends, and need no metadata read (5 quota units)
// to be told apart. A send it does not find (an older one, another
// replica's) is read: only quota depends on this memory, never a
// decision.
type recentSends struct {
	mu    sync.Mutex
	ids   map[string]string
	order []string
	last  time.Time // when the newest was recorded
}

// note remembers the send gmailID of the job messageID, recorded at.
func (r *recentSends) note(gmailID, messageID string, at time.Time) {
	if gmailID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if at.After(r.last) {
		r.last = at
	}
	if r.ids == nil {
		r.ids = map[string]string{}
	}
	if _, ok := r.ids[gmailID]; ok {
		return
	}
	if len(r.order) >= maxRecentSends {
		delete(r.ids, r.order[0])
		r.order = r.order[1:]
	}
	r.ids[gmailID] = messageID
	r.order = append(r.order, gmailID)
}

// LastSend is when this process last recorded a send of the mailbox
// (zero before the first): delivery reports about it come in the
// minutes after.
func (m *Mailbox) LastSend() time.Time {
	m.recent.mu.Lock()
	defer m.recent.mu.Unlock()
	return m.recent.last
}

// RecentSend returns the Message-ID of the job whose send this process
// recorded with Gmail id gmailID, if it still remembers it.
func (m *Mailbox) RecentSend(gmailID string) (messageID string, ok bool) {
	m.recent.mu.Lock()
	defer m.recent.mu.Unlock()
	messageID, ok = m.recent.ids[gmailID]
	return messageID, ok
}
