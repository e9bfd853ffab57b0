package gmailfake_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

func TestEmulatorControlMessages(t *testing.T) {
	srv, svc, base := emulator(t, gmailfake.Options{})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	send(t, svc, rawMessage(msgID(2), "a@example.org", "y"))
	cases := []struct {
		name  string
		query string
		want  int
	}{
		{"with brackets", "?rfc822msgid=" + url.QueryEscape(msgID(1)), 1},
		{"without brackets", "?rfc822msgid=" + url.QueryEscape(msgID(1)[1:len(msgID(1))-1]), 1},
		{"unknown", "?rfc822msgid=nobody%40example.com", 0},
		{"all", "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, http.MethodGet, base+"/_emulator/messages"+tc.query, "")
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			msgs, ok := body["messages"].([]any)
			if !ok || body["count"] != float64(tc.want) || len(msgs) != tc.want {
				t.Fatalf("got %v, want count %d", body, tc.want)
			}
			if tc.want == 1 {
				m := msgs[0].(map[string]any)
				if m["id"] != sent.Id || m["threadId"] != sent.ThreadId || m["messageId"] != msgID(1) {
					t.Errorf("got %v", m)
				}
				if l, _ := m["labelIds"].([]any); len(l) != 1 || l[0] != "SENT" {
					t.Errorf("labelIds: got %v", m["labelIds"])
				}
			}
		})
	}
	_ = srv
}

// TestEmulatorControlOriginalMessageID: every message of the ground truth
// carries originalMessageId, the Message-ID the client sent: equal to
// messageId when Gmail kept it, the client's when Gmail replaced it, ""
// when the client sent none.
func TestEmulatorControlOriginalMessageID(t *testing.T) {
	srv, svc, base := emulator(t, gmailfake.Options{})
	malformed := "<202304061608.@keescook>"
	kept := send(t, svc, rawMessage(msgID(1), "a@example.org", "kept"))
	rewritten := send(t, svc, rawMessage(malformed, "a@example.org", "rewritten"))
	none := send(t, svc, rawMessage("", "a@example.org", "none"))
	stored := map[string]gmailfake.Message{}
	for _, m := range srv.Messages("") {
		stored[m.ID] = m
	}
	status, body := do(t, http.MethodGet, base+"/_emulator/messages", "")
	msgs, _ := body["messages"].([]any)
	if status != http.StatusOK || len(msgs) != 3 {
		t.Fatalf("got %d %v, want 3 messages", status, body)
	}
	want := map[string]struct {
		original  string
		rewritten bool
	}{
		kept.Id:      {msgID(1), false},
		rewritten.Id: {malformed, true},
		none.Id:      {"", false},
	}
	for _, v := range msgs {
		m := v.(map[string]any)
		id, _ := m["id"].(string)
		w := want[id]
		got, present := m["originalMessageId"]
		if !present || got != w.original {
			t.Errorf("message %s: originalMessageId %v (present %v), want %q; %v", id, got, present, w.original, m)
		}
		if w.original == msgID(1) && m["messageId"] != got {
			t.Errorf("kept message %s: messageId %v, want originalMessageId %v", id, m["messageId"], got)
		}
		if r := stored[id].Rewritten(); r != w.rewritten {
			t.Errorf("message %s: Rewritten() %v, want %v", id, r, w.rewritten)
		}
	}
}

func TestEmulatorControlFaultValidation(t *testing.T) {
	_, _, base := emulator(t, gmailfake.Options{})
	cases := []struct {
		body  string
		field string
	}{
		{`{"method":"explode","action":"error"}`, "method"},
		{`{"method":"send","action":"error","account":"nobody@example.org"}`, "account"},
		{`{"method":"send","action":"explode"}`, "action"},
		{`{"method":"list","action":"duplicate"}`, "action"},
		{`{"method":"get","action":"accept-then-error"}`, "action"},
		{`{"method":"send","action":"error","status":200}`, "status"},
		{`{"method":"send","action":"error","status":"500"}`, "status"},
		{`{"method":"send","action":"error","count":-2}`, "count"},
		{`{"method":"send","action":"error","count":0}`, "count"},
		{`{"method":"send","action":"latency"}`, "latency"},
		{`{"method":"send","action":"latency","latency":"soon"}`, "latency"},
		{`{"method":"send","action":"error","colour":"red"}`, "colour"},
	}
	for _, tc := range cases {
		t.Run(tc.body, func(t *testing.T) {
			status, body := do(t, http.MethodPost, base+"/_emulator/faults", tc.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status: got %d, want 400 (%v)", status, body)
			}
			e, _ := body["error"].(map[string]any)
			items, _ := e["errors"].([]any)
			if len(items) == 0 {
				t.Fatalf("no error items: %v", body)
			}
			if got := items[0].(map[string]any)["location"]; got != tc.field {
				t.Errorf("field: got %v, want %q (%v)", got, tc.field, e["message"])
			}
		})
	}
	status, body := do(t, http.MethodGet, base+"/_emulator/faults", "")
	if faults, _ := body["faults"].([]any); status != 200 || len(faults) != 0 {
		t.Errorf("rejected faults were added: %v", body)
	}
}

func TestEmulatorControlFaultsStatsReset(t *testing.T) {
	srv, svc, base := emulator(t, gmailfake.Options{})
	status, body := do(t, http.MethodPost, base+"/_emulator/faults", `{"method":"get","action":"latency","latency":"1ms","count":-1}`)
	if status != 200 || body["id"] == nil {
		t.Fatalf("add: %d %v", status, body)
	}
	id := body["id"]
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	if _, err := svc.Users.Messages.Get("me", sent.Id).Do(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Users.Messages.List("me").Do(); err != nil {
		t.Fatal(err)
	}

	_, body = do(t, http.MethodGet, base+"/_emulator/faults", "")
	faults, _ := body["faults"].([]any)
	if len(faults) != 1 {
		t.Fatalf("faults: got %v", body)
	}
	f := faults[0].(map[string]any)
	if f["id"] != id || f["method"] != "get" || f["latency"] != "1ms" || f["count"] != -1.0 || f["hits"] != 1.0 {
		t.Errorf("fault: got %v", f)
	}

	_, body = do(t, http.MethodGet, base+"/_emulator/stats", "")
	calls, _ := body["calls"].(map[string]any)
	if calls["send"] != 1.0 || calls["get"] != 1.0 || calls["list"] != 1.0 || body["quotaUnits"] != 110.0 || body["rateLimited"] != 0.0 {
		t.Errorf("stats: got %v", body)
	}

	if status, _ := do(t, http.MethodPost, base+"/_emulator/reset", ""); status != 200 {
		t.Fatalf("reset: %d", status)
	}
	if n := srv.Count(""); n != 0 {
		t.Errorf("messages after reset: %d", n)
	}
	if f := srv.Faults(); len(f) != 0 {
		t.Errorf("faults after reset: %v", f)
	}
	if n := srv.Deliveries(""); n != 0 {
		t.Errorf("deliveries after reset: %d", n)
	}
	if st := srv.Stats(); st.QuotaUnits != 0 || len(st.Calls) != 0 || st.Deliveries != 0 {
		t.Errorf("stats after reset: %+v", st)
	}
	again := send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	if again.Id == sent.Id {
		t.Errorf("an id was handed out twice across a reset: %s", again.Id)
	}
}

func TestEmulatorUnknownPath(t *testing.T) {
	_, _, base := emulator(t, gmailfake.Options{})
	status, body := do(t, http.MethodGet, base+"/gmail/v1/users/me/threads", "")
	e, _ := body["error"].(map[string]any)
	if status != 404 || e["status"] != "NOT_FOUND" {
		t.Errorf("got %d %v, want Gmail's 404 JSON", status, body)
	}
}
