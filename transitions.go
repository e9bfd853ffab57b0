package gmailrelay

import (
	"fmt"
	"time"
)

// StateQueued: accepted and durable, waiting for budget or for send_at.
// The delivery loop moves it to forwarding, a human or the caller to
// abandoned. The front door writes it when a send must wait.
const StateQueued State = "queued"

// Transitions is the one table of allowed state changes
// (docs/design.md#states-and-transitions): from → the states a job may
// move to. The key "" is a new job. The log's change validation refuses
// any other change of a job's state; rewriting a job in the state it
// already has is not a change.
//
// Beyond the first design's table, a human's resolve may also move
// unknown → abandoned and failed → sent, abandoned (failed → forwarding is
// in the table; a resolve retry makes it for non-retryable failures too):
// the resolve endpoint accepts unknown and failed jobs, as docs/api.md
// documents. And the send path moves forwarding → queued when Gmail
// answered a rate limit or was not reached (nothing was sent) and the
// attempt may wait: a caller's send that accepts queueing, or the delivery
// loop's own attempt (such a job is logged queued: docs/design.md#the-outbox).
var Transitions = map[State][]State{
	"":              {StateQueued, StateForwarding, StateFailed},
	StateQueued:     {StateForwarding, StateAbandoned},
	StateForwarding: {StateSent, StateFailed, StateUnknown, StateQueued},
	StateFailed:     {StateForwarding, StateReview, StateSent, StateAbandoned},
	StateUnknown:    {StateSent, StateForwarding, StateReview, StateAbandoned},
	StateSent:       {StateReview},
	StateReview:     {StateSent, StateForwarding, StateAbandoned},
	StateAbandoned:  nil,
}

// Allowed reports whether a job may move from one state to another ("" is
// a new job). Staying in the same state is always allowed.
func Allowed(from, to State) bool {
	if from == to && from != "" {
		return true
	}
	for _, s := range Transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// checkTransition is the error naming both states of a refused change.
func checkTransition(from, to State) error {
	if Allowed(from, to) {
		return nil
	}
	name := string(from)
	if from == "" {
		name = "(new)"
	}
	return fmt.Errorf("transition %s → %s is not in the table of allowed transitions", name, to)
}

// Move sets the job's state and the line's together, so that the job's
// state is the fold of its lines, and returns the line. A job leaving
// forwarding loses its lease.
func Move(j *Job, to State, line Line) Line {
	j.State, line.State = to, to
	if to != StateForwarding {
		j.LeaseUntil = time.Time{}
	}
	return line
}
