package gmailrelay

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A bounce line's status is the report's code, a string; every other line's
// is Gmail's HTTP status, a number; both read back as written.
func TestLineJSONStatus(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ln   Line
		want string
	}{
		{Line{Seq: 1, Time: at, MessageID: "<m@x>", Kind: KindBounce, Recipient: "x@bounce.test", Action: "failed", DSNStatus: "5.1.1", Diagnostic: "550 5.1.1 no such user", GmailID: "r1"}, `"status":"5.1.1"`},
		{Line{Seq: 2, Time: at, MessageID: "<m@x>", Kind: KindNotSent, Status: 503, Retryable: true}, `"status":503`},
		{Line{Seq: 3, Time: at, MessageID: "<m@x>", Kind: KindReceived}, `"kind":"received"`},
	} {
		b, err := json.Marshal(c.ln)
		if err != nil || !strings.Contains(string(b), c.want) {
			t.Errorf("%s line: %s, %v; want %s in it", c.ln.Kind, b, err, c.want)
		}
		var back Line
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c.ln) {
			t.Errorf("%s line read back: %+v, %v; want %+v", c.ln.Kind, back, err, c.ln)
		}
	}
}
