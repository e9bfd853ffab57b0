package gmailfake

import (
	"fmt"
	"strings"
	"time"
)

// FieldError is a fault definition that does not validate; Field names the
// offending field as the control API spells it (method, action, status,
// count, latency, account).
type FieldError struct {
	Field   string
	Message string
}

// Error returns "field: message".
func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// FaultState is a fault rule as it stands: its definition, its id, how many
// calls it still applies to (-1 = until cleared) and how many it hit.
type FaultState struct {
	ID        string
	Fault     Fault
	Remaining int
	Hits      int
}

// AddFault validates f and adds it after the existing rules. It returns the
// rule's id, or a *FieldError naming the offending field.
func (s *Server) AddFault(f Fault) (string, error) {
	switch f.Method {
	case MethodSend, MethodList, MethodGet, MethodTrash, MethodUntrash, MethodDelete, MethodSendAs, MethodHistory, MethodProfile:
	default:
		return "", &FieldError{"method", fmt.Sprintf("must be send, list, get, trash, untrash, delete, sendas, history or profile, not %q", f.Method)}
	}
	switch f.Action {
	case ActionError:
	case ActionAcceptThenError, ActionDuplicate:
		if f.Method != MethodSend {
			return "", &FieldError{"action", fmt.Sprintf("%s applies to send only", f.Action)}
		}
	case ActionLatency:
		if f.Latency <= 0 {
			return "", &FieldError{"latency", "must be a positive duration for action latency"}
		}
	default:
		return "", &FieldError{"action", fmt.Sprintf("must be error, accept-then-error, latency or duplicate, not %q", f.Action)}
	}
	if f.Action == ActionError || f.Action == ActionAcceptThenError {
		if f.Status == 0 {
			f.Status = 500
		}
		if f.Status < 400 || f.Status > 599 {
			return "", &FieldError{"status", fmt.Sprintf("must be an error status 400..599, not %d", f.Status)}
		}
	} else {
		f.Status = 0
	}
	if f.Latency < 0 {
		return "", &FieldError{"latency", "must not be negative"}
	}
	switch {
	case f.Count == 0:
		f.Count = 1
	case f.Count < -1:
		return "", &FieldError{"count", fmt.Sprintf("must be positive or -1 (until cleared), not %d", f.Count)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Account != "" {
		a, ok := s.byAddr[strings.ToLower(f.Account)]
		if !ok {
			return "", &FieldError{"account", fmt.Sprintf("%q is not an account the emulator serves", f.Account)}
		}
		f.Account = a.addr
	}
	s.faultSeq++
	id := fmt.Sprintf("f%d", s.faultSeq)
	s.faults = append(s.faults, &FaultState{ID: id, Fault: f, Remaining: f.Count})
	return id, nil
}

// Faults returns the fault rules in the order they apply, spent ones
// included, until ClearFaults or Reset.
func (s *Server) Faults() []FaultState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FaultState, 0, len(s.faults))
	for _, r := range s.faults {
		out = append(out, *r)
	}
	return out
}

// ClearFaults drops every fault rule and keeps the messages.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// appliedFault is what the fault rules decided for one call.
type appliedFault struct {
	action  string // "" = none, or an Action other than latency
	status  int
	latency time.Duration // from every latency rule hit, plus the action's
}

// pickFaultsLocked consumes, for one call of method to account, every live
// latency rule and the first live rule of another action.
func (s *Server) pickFaultsLocked(method, account string) appliedFault {
	var a appliedFault
	for _, r := range s.faults {
		if r.Fault.Method != method || r.Remaining == 0 || (r.Fault.Account != "" && r.Fault.Account != account) {
			continue
		}
		if r.Fault.Action != ActionLatency {
			if a.action != "" {
				continue
			}
			a.action, a.status = r.Fault.Action, r.Fault.Status
		}
		a.latency += r.Fault.Latency
		r.Hits++
		if r.Remaining > 0 {
			r.Remaining--
		}
	}
	return a
}
