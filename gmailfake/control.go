package gmailfake

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// The control API is not part of Gmail: it is how tests and demos read the
// provider's truth and switch provider behaviours at run time.

func (s *Server) controlRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /_emulator/messages", s.ctlMessages)
	mux.HandleFunc("POST /_emulator/messages/{id}/trash", s.ctlMessageAction)
	mux.HandleFunc("POST /_emulator/messages/{id}/untrash", s.ctlMessageAction)
	mux.HandleFunc("POST /_emulator/messages/{id}/delete", s.ctlMessageAction)
	mux.HandleFunc("POST /_emulator/faults", s.ctlAddFault)
	mux.HandleFunc("GET /_emulator/faults", s.ctlFaults)
	mux.HandleFunc("DELETE /_emulator/faults", s.ctlClearFaults)
	mux.HandleFunc("GET /_emulator/stats", s.ctlStats)
	mux.HandleFunc("POST /_emulator/reset", s.ctlReset)
}

type ctlMessage struct {
	ID                string   `json:"id"`
	ThreadID          string   `json:"threadId"`
	LabelIDs          []string `json:"labelIds"`
	MessageID         string   `json:"messageId"`
	OriginalMessageID string   `json:"originalMessageId"` // the client's: Message.ClientMessageID
	Account           string   `json:"account"`
	Trashed           bool     `json:"trashed"`
	Deleted           bool     `json:"deleted"`
	Bounced           []string `json:"bounced"`
	Delayed           []string `json:"delayed"`
	Undelivered       bool     `json:"undelivered"`
}

func toCtlMessage(m Message) ctlMessage {
	return ctlMessage{ID: m.ID, ThreadID: m.ThreadID, LabelIDs: m.LabelIDs, MessageID: m.MessageID,
		OriginalMessageID: m.ClientMessageID, Account: m.Account, Trashed: m.Trashed, Deleted: m.Deleted,
		Bounced: orEmpty(m.Bounced), Delayed: orEmpty(m.Delayed), Undelivered: m.Undelivered}
}

// orEmpty is l, or an empty list (JSON [] rather than null).
func orEmpty(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// ctlAccount reads ?account=: "" for every account, 400 naming the
// parameter for an address the emulator does not serve.
func (s *Server) ctlAccount(w http.ResponseWriter, r *http.Request) (string, bool) {
	acct := r.URL.Query().Get("account")
	if acct == "" {
		return "", true
	}
	for _, a := range s.Accounts() {
		if strings.EqualFold(a, acct) {
			return a, true
		}
	}
	writeAPIError(w, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "emulator",
		location: "account", message: "account: " + acct + " is not an account the emulator serves"})
	return "", false
}

func (s *Server) ctlMessages(w http.ResponseWriter, r *http.Request) {
	acct, ok := s.ctlAccount(w, r)
	if !ok {
		return
	}
	t := s.Lookup(acct, r.URL.Query().Get("rfc822msgid"))
	out := struct {
		Count       int          `json:"count"`
		Deliveries  int          `json:"deliveries"`
		Bounced     []string     `json:"bounced"`
		Delayed     []string     `json:"delayed"`
		Undelivered bool         `json:"undelivered"`
		Messages    []ctlMessage `json:"messages"`
	}{Count: t.Count, Deliveries: t.Deliveries, Bounced: orEmpty(t.Bounced), Delayed: orEmpty(t.Delayed),
		Undelivered: t.Undelivered, Messages: make([]ctlMessage, 0, len(t.Messages))}
	for _, m := range t.Messages {
		out.Messages = append(out.Messages, toCtlMessage(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// ctlMessageAction trashes, untrashes or deletes a message as a user
// cleaning the mailbox by hand: no quota, no Gmail call counted.
func (s *Server) ctlMessageAction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var err error
	switch action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]; action {
	case "trash":
		err = s.Trash(id)
	case "untrash":
		err = s.Untrash(id)
	default:
		err = s.Delete(id)
	}
	if err != nil {
		writeAPIError(w, notFound())
		return
	}
	for _, m := range s.Messages("") {
		if m.ID == id {
			writeJSON(w, http.StatusOK, toCtlMessage(m))
			return
		}
	}
	writeAPIError(w, notFound())
}

// faultJSON is a fault rule as the control API reads and writes it.
type faultJSON struct {
	ID        string `json:"id,omitempty"`
	Method    string `json:"method"`
	Action    string `json:"action"`
	Status    int    `json:"status,omitempty"`
	Count     *int   `json:"count,omitempty"`
	Latency   string `json:"latency,omitempty"`
	Account   string `json:"account,omitempty"`
	Remaining *int   `json:"remaining,omitempty"`
	Hits      *int   `json:"hits,omitempty"`
}

func (s *Server) ctlAddFault(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		writeAPIError(w, badRequest("read body: "+err.Error()))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var in faultJSON
	if err := dec.Decode(&in); err != nil {
		e := badRequest("invalid fault JSON: " + err.Error())
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			e.location = te.Field
			e.message = te.Field + ": must be a JSON " + te.Type.String()
		} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			e.location = strings.Trim(f, `"`)
			e.message = e.location + ": unknown field"
		}
		writeAPIError(w, e)
		return
	}
	if in.ID != "" || in.Remaining != nil || in.Hits != nil {
		writeAPIError(w, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "emulator",
			location: "id", message: "id, remaining and hits are set by the emulator"})
		return
	}
	f := Fault{Method: in.Method, Action: in.Action, Status: in.Status, Account: in.Account}
	if in.Count != nil {
		f.Count = *in.Count
		if f.Count == 0 {
			writeAPIError(w, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "emulator",
				location: "count", message: "count: must be positive or -1 (until cleared), not 0"})
			return
		}
	}
	if in.Latency != "" {
		d, err := time.ParseDuration(in.Latency)
		if err != nil {
			writeAPIError(w, &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "emulator",
				location: "latency", message: "latency: not a Go duration (e.g. 200ms): " + in.Latency})
			return
		}
		f.Latency = d
	}
	id, err := s.AddFault(f)
	if err != nil {
		e := &apiError{code: http.StatusBadRequest, reason: "invalidArgument", domain: "emulator", message: err.Error()}
		if fe, ok := errors.AsType[*FieldError](err); ok {
			e.location = fe.Field
		}
		writeAPIError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

func (s *Server) ctlFaults(w http.ResponseWriter, _ *http.Request) {
	rules := s.Faults()
	out := struct {
		Faults []faultJSON `json:"faults"`
	}{Faults: make([]faultJSON, 0, len(rules))}
	for _, r := range rules {
		fj := faultJSON{ID: r.ID, Method: r.Fault.Method, Action: r.Fault.Action, Status: r.Fault.Status,
			Count: &r.Fault.Count, Account: r.Fault.Account, Remaining: &r.Remaining, Hits: &r.Hits}
		if r.Fault.Latency > 0 {
			fj.Latency = r.Fault.Latency.String()
		}
		out.Faults = append(out.Faults, fj)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) ctlClearFaults(w http.ResponseWriter, _ *http.Request) {
	n := len(s.Faults())
	s.ClearFaults()
	writeJSON(w, http.StatusOK, map[string]int{"cleared": n})
}

func (s *Server) ctlStats(w http.ResponseWriter, r *http.Request) {
	acct, ok := s.ctlAccount(w, r)
	if !ok {
		return
	}
	st := s.Stats()
	if acct != "" {
		st = s.AccountStats(acct)
	}
	s.mu.Lock()
	quota, seed := s.quota, s.seed
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"calls":          st.Calls,
		"quotaUnits":     st.QuotaUnits,
		"rateLimited":    st.RateLimited,
		"dailyLimited":   st.DailyLimited,
		"deliveries":     st.Deliveries,
		"undelivered":    st.Undelivered,
		"reports":        st.Reports,
		"messages":       s.Lookup(acct, "").Count,
		"quotaPerMinute": quota,
		"accounts":       s.Accounts(),
		"seed":           seed,
	})
}

func (s *Server) ctlReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
}
