package api

import (
	"net/http"

	"github.com/gmailrelay/gmailrelay/relay"
)

// msgIDAnswer is the answer of GET /v1/msgid.
type msgIDAnswer struct {
	MessageID string `json:"message_id"`
	Key       string `json:"key"`
	Domain    string `json:"domain"`
	// Scheme is "sha256" (no Message-ID secret: anyone can compute the
	// Message-ID from the key) or "hmac-sha256" (only the relay can).
	Scheme string `json:"scheme"`
}

// msgIDProbe is the message part of the request msgid validates its key
// with; it is never sent or logged.
var msgIDProbe = relay.SendRequest{To: relay.AddressList{"probe@example.invalid"}, Subject: "probe", Text: "probe"}

// msgid answers the Message-ID the relay derives for a job key, so that a
// workflow that builds raw MIME (the Gmail-compatible path) uses the
// relay's own --msgid-domain and, when it has one, its Message-ID secret
// instead of hard-coding a domain or recomputing sha256(key). The key comes from
// ?key=, or from ?customer_id=&event_type=&order_id= (joined with ':', as
// /v1/send joins job). The key is checked exactly as /v1/send checks it,
// because the derivation runs through relay.Prepare; a bad or missing key is
// a 400 naming the field.
func (s *Server) msgid(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := msgIDProbe
	req.Key = q.Get("key")
	if q.Has("customer_id") || q.Has("event_type") || q.Has("order_id") {
		req.Job = &relay.JobRef{CustomerID: q.Get("customer_id"), EventType: q.Get("event_type"), OrderID: q.Get("order_id")}
	}
	if req.Key == "" && req.Job == nil {
		writeError(w, r, relay.Invalid("key", "no key: give ?key= or ?customer_id=&event_type=&order_id="))
		return
	}
	p, err := s.ids.Prepare(req, "", s.cfg.Now())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, msgIDAnswer{MessageID: p.MessageID, Key: p.Key, Domain: s.ids.Domain(), Scheme: s.ids.Name()})
}
