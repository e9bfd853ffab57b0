package api

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// TestWriteGmailSentIsWriteJSON: the hand-written 200 answer is
// writeJSON's, byte for byte and header for header.
func TestWriteGmailSentIsWriteJSON(t *testing.T) {
	for _, j := range []gmailrelay.Job{
		{GmailID: "18c2f0a1b2c3d4e5", ThreadID: "18c2f0a1b2c3d4e5", LabelIDs: []string{"SENT"}},
		{GmailID: "a", LabelIDs: []string{"SENT", "INBOX", "UNREAD"}},
		{ThreadID: "t"}, {}, {LabelIDs: []string{}}, {LabelIDs: []string{"x"}},
		{GmailID: `a"b`, ThreadID: "<t&>", LabelIDs: []string{"é", "\n"}},
		{GmailID: "id", LabelIDs: []string{"ok", `back\slash`}},
	} {
		fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
		writeGmailSent(fast, j)
		writeJSON(slow, 200, gmailMessage{ID: j.GmailID, ThreadID: j.ThreadID, LabelIDs: j.LabelIDs})
		if fast.Body.String() != slow.Body.String() || fast.Code != slow.Code || !reflect.DeepEqual(fast.Header(), slow.Header()) {
			t.Errorf("job %+v: fast %d %v %q, writeJSON %d %v %q", j, fast.Code, fast.Header(), fast.Body, slow.Code, slow.Header(), slow.Body)
		}
	}
}

// FuzzRawOnly: a body rawOnly reads is the message json.Unmarshal reads,
// and one CheckJSON accepts (gmailSend skips CheckJSON for it).
func FuzzRawOnly(f *testing.F) {
	for _, s := range []string{`{"raw":"abc"}`, "{\"raw\":\"RnJvbTo=\"}\n", `{"raw":"a\"b"}`, `{"raw":"x"} }`, `{"raw":"x","id":"1"}`, `{"raw":1}`, `{"raw":"x"}}`, `{"raw":""}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := rawOnly(body)
		if !ok {
			return
		}
		var want gmailMessage
		if err := json.Unmarshal(body, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("rawOnly(%q) = %+v; json.Unmarshal: %+v, %v", body, got, want, err)
		}
		if err := CheckJSON(body); err != nil {
			t.Fatalf("rawOnly(%q) reads it, CheckJSON refuses it: %v", body, err)
		}
	})
}
