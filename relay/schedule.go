package relay

import "time"

// When-busy choices of a send (SendRequest.WhenBusy).
const (
	WhenBusyQueue  = "queue"  // hold the job in the outbox: 202 queued
	WhenBusyReject = "reject" // refuse: 429 + Retry-After, nothing kept
)

// Schedule validates req's send_at and when_busy: sendAt is zero when not
// given, queue is false only for when_busy "reject". Errors are
// CodeInvalid naming the field.
func (req SendRequest) Schedule() (sendAt time.Time, queue bool, err error) {
	switch req.WhenBusy {
	case "", WhenBusyQueue:
		queue = true
	case WhenBusyReject:
	default:
		return time.Time{}, false, Invalid("when_busy", "when_busy must be queue or reject, not %q", req.WhenBusy)
	}
	if req.SendAt != "" {
		t, perr := time.Parse(time.RFC3339, req.SendAt)
		if perr != nil {
			return time.Time{}, false, Invalid("send_at", "send_at must be an RFC 3339 time such as 2026-12-03T18:00:00Z")
		}
		sendAt = t.UTC()
	}
	return sendAt, queue, nil
}
