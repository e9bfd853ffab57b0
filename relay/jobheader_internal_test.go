package relay

import (
	"bytes"
	"strings"
	"testing"
)

// A raw message goes to Gmail with its job's header: added first when it
// has none, left as it is when its header section names it (any case, any
// line), and left out of a message too large to take it. A raw message
// naming another job is refused at intake.
func TestJobHeaderOnRawMessages(t *testing.T) {
	const id = "<job-abc@relay.test>"
	plain := []byte("Message-ID: " + id + "\r\nTo: a@x.com\r\n\r\nbody mentions X-Gmailrelay-Job: nothing\r\n")
	got := withJobHeader(plain, id)
	if !bytes.HasPrefix(got, []byte("X-Gmailrelay-Job: job-abc\r\nMessage-ID: ")) || !bytes.HasSuffix(got, plain) {
		t.Errorf("without a header: %q", got)
	}
	for _, named := range []string{
		"x-gmailrelay-job: job-abc\r\nMessage-ID: " + id + "\r\n\r\nb\r\n",
		"Message-ID: " + id + "\r\nX-GMAILRELAY-JOB: job-abc\r\n\r\nb\r\n",
	} {
		if got := withJobHeader([]byte(named), id); string(got) != named {
			t.Errorf("named already: %q became %q", named, got)
		}
	}
	big := append([]byte("Message-ID: "+id+"\r\n\r\n"), bytes.Repeat([]byte("a"), MaxMessageBytes-len("Message-ID: "+id+"\r\n\r\n"))...)
	if got := withJobHeader(big, id); len(got) != len(big) {
		t.Errorf("a message at the size limit grew to %d bytes", len(got))
	}
	other := "Message-ID: " + id + "\r\nX-Gmailrelay-Job: job-someone-else\r\nTo: a@x.com\r\n\r\nb\r\n"
	if _, err := PrepareRaw([]byte(other), "", "", "other.test"); err == nil || !strings.Contains(err.Error(), "names job") {
		t.Errorf("a raw message naming another job: %v, want refused", err)
	}
	if p, err := PrepareRaw([]byte("X-Gmailrelay-Job: job-abc\r\n"+string(plain)), "", "", "other.test"); err != nil || p.MessageID != id {
		t.Errorf("a raw message naming its own job: %v", err)
	}
}
