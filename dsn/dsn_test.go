package dsn_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/dsn"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Real-shaped reports: Gmail's current multipart/report, its older text
// bounce, a delay, Postfix, and Exchange's layout with the whole message
// returned (message/rfc822) and encoded human parts.
func TestParseRealShapedReports(t *testing.T) {
	for _, c := range []struct {
		file string
		want dsn.Report
	}{
		{"gmail-multipart.eml", dsn.Report{Kind: dsn.KindDSN,
			Recipients: []dsn.Recipient{{Address: "x@bounce.test", Action: "failed", Status: "5.1.1",
				Diagnostic: "550-5.1.1 The email account that you tried to reach does not exist. Please try 550-5.1.1 double-checking the recipient's email address for typos or 550 5.1.1 unnecessary spaces."}},
			MessageIDs: []string{"<job-3f2a9c1b7e@relay.example.com>"}, Jobs: []string{"3f2a9c1b7e"}}},
		{"gmail-text-old.eml", dsn.Report{Kind: dsn.KindDSN,
			Recipients: []dsn.Recipient{{Address: "nobody@example.net", Action: "failed", Status: "5.1.1",
				Diagnostic: "550 5.1.1 <nobody@example.net>: Recipient address rejected: User unknown in local recipient table"}},
			MessageIDs: []string{"<CAold+text@mail.gmail.com>"}, Jobs: []string{"77aa01"}}},
		{"gmail-delayed.eml", dsn.Report{Kind: dsn.KindDSN,
			Recipients: []dsn.Recipient{{Address: "slow@example.org", Action: "delayed", Status: "4.4.1",
				Diagnostic: "The recipient server did not accept our requests to connect."}},
			MessageIDs: []string{"<job-aa11bb22@relay.example.com>"}, Jobs: []string{"aa11bb22"}}},
		{"postfix.eml", dsn.Report{Kind: dsn.KindDSN,
			Recipients: []dsn.Recipient{
				{Address: "gone@example.de", Action: "failed", Status: "5.1.1",
					Diagnostic: "550 5.1.1 <gone@example.de>: Recipient address rejected: User unknown"},
				{Address: "here@example.de", Action: "delivered", Status: "2.0.0"}},
			MessageIDs: []string{"<job-postfix01@relay.example.com>"}, Jobs: []string{"postfix01"}}},
		{"exchange.eml", dsn.Report{Kind: dsn.KindDSN,
			Recipients: []dsn.Recipient{{Address: "missing@contoso.example", Action: "failed", Status: "5.1.10",
				Diagnostic: "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"}},
			MessageIDs: []string{"<job-exch0042@relay.example.com>"}, Jobs: []string{"exch0042"}}},
		{"gmail-limit.eml", dsn.Report{Kind: dsn.KindSendingLimit}},
	} {
		t.Run(c.file, func(t *testing.T) {
			got, err := dsn.Parse(read(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// The same reports with CRLF line ends, as Gmail's raw format has them.
func TestParseCRLF(t *testing.T) {
	for _, f := range []string{"gmail-multipart.eml", "gmail-text-old.eml", "postfix.eml", "exchange.eml"} {
		lf := read(t, f)
		want, err := dsn.Parse(lf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dsn.Parse([]byte(strings.ReplaceAll(string(lf), "\n", "\r\n")))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s with CRLF: %+v, %v; want %+v", f, got, err, want)
		}
	}
}

// A limit notice must come from Gmail: the same words from anyone else are
// not Gmail's refusal.
func TestLimitNoticeOnlyFromGmail(t *testing.T) {
	forged := strings.Replace(string(read(t, "gmail-limit.eml")), "From: nobody@gmail.com", "From: prankster@example.org", 1)
	if r, err := dsn.Parse([]byte(forged)); !errors.Is(err, dsn.ErrNotReport) {
		t.Errorf("limit words from prankster@example.org: %+v, %v; want ErrNotReport", r, err)
	}
}

// Garbage and broken reports get an error naming the problem, never a
// guessed report.
func TestParseRefusesGarbage(t *testing.T) {
	deep := "Content-Type: multipart/mixed; boundary=b0\r\n\r\n"
	for i := 1; i <= dsn.MaxDepth+1; i++ {
		deep += "--b" + string(rune('0'+i-1)) + "\r\nContent-Type: multipart/mixed; boundary=b" + string(rune('0'+i)) + "\r\n\r\n"
	}
	for _, c := range []struct {
		name, raw string
		want      error
	}{
		{"empty", "", dsn.ErrMalformed},
		{"no header end", "garbage without a colon", dsn.ErrMalformed},
		{"plain mail", "From: a@example.org\r\nSubject: hi\r\n\r\nhello\r\n", dsn.ErrNotReport},
		{"html only", "From: a@example.org\r\nContent-Type: text/html\r\n\r\n<p>Delivery to the following recipient failed permanently:</p>\r\n", dsn.ErrNotReport},
		{"bad content type", "From: a@example.org\r\nContent-Type: multipart/report; boundary=\"\r\n\r\nx", dsn.ErrMalformed},
		{"multipart without boundary", "From: a@example.org\r\nContent-Type: multipart/report\r\n\r\nx", dsn.ErrMalformed},
		{"text bounce without address", "From: mailer-daemon@googlemail.com\r\n\r\nDelivery to the following recipient failed permanently:\r\n\r\nTechnical details of permanent failure:\r\nnone\r\n", dsn.ErrNotReport},
		{"broken status fields", "Content-Type: multipart/report; boundary=b\r\n\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\nFinal-Recipient rfc822 x@y\r\n\r\n--b--\r\n", dsn.ErrMalformed},
		{"too deep", deep, dsn.ErrMalformed},
		{"too large", "Subject: x\r\n\r\n" + strings.Repeat("a", dsn.MaxReportBytes), dsn.ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := dsn.Parse([]byte(c.raw))
			if !errors.Is(err, c.want) {
				t.Errorf("Parse: %+v, %v; want an error wrapping %v", r, err, c.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// A status that is not an enhanced status code is dropped, and a diagnostic
// is clipped to one line of MaxDiagnostic bytes.
func TestParseBoundsFields(t *testing.T) {
	raw := "Content-Type: multipart/report; boundary=b\r\n\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\n" +
		"Reporting-MTA: dns; x\r\n\r\nFinal-Recipient: rfc822; <a@example.org>\r\nAction: Failed\r\nStatus: 5.1.1000\r\n" +
		"Diagnostic-Code: smtp; " + strings.Repeat("é", dsn.MaxDiagnostic) + "\r\n\r\n--b--\r\n"
	r, err := dsn.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Recipients) != 1 {
		t.Fatalf("recipients %+v", r.Recipients)
	}
	got := r.Recipients[0]
	if got.Address != "a@example.org" || got.Action != "failed" || got.Status != "" {
		t.Errorf("recipient %+v, want a@example.org, failed, no status", got)
	}
	if len(got.Diagnostic) > dsn.MaxDiagnostic || !utf8.ValidString(got.Diagnostic) || len(got.Diagnostic) < dsn.MaxDiagnostic-2 {
		t.Errorf("diagnostic of %d bytes (valid UTF-8 %v), want ≤ %d, whole characters", len(got.Diagnostic), utf8.ValidString(got.Diagnostic), dsn.MaxDiagnostic)
	}
}

// FuzzParse: Parse never panics; what it returns is within its bounds, one
// line per value, and every error says which kind of refusal it is.
func FuzzParse(f *testing.F) {
	entries, _ := os.ReadDir("testdata")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".eml") {
			f.Add(read(f, e.Name()))
		}
	}
	f.Add([]byte("Content-Type: multipart/report; boundary=b\r\n\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\nFinal-Recipient: rfc822; a@b\r\nAction: failed\r\n\r\n--b--\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := dsn.Parse(raw)
		if err != nil {
			if !errors.Is(err, dsn.ErrMalformed) && !errors.Is(err, dsn.ErrNotReport) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrNotReport", err)
			}
			return
		}
		if r.Kind != dsn.KindDSN && r.Kind != dsn.KindSendingLimit {
			t.Fatalf("kind %q", r.Kind)
		}
		if len(r.Recipients) > dsn.MaxRecipients {
			t.Fatalf("%d recipients", len(r.Recipients))
		}
		line := func(what, s string) {
			if strings.ContainsAny(s, "\r\n\x00") {
				t.Fatalf("%s %q holds a line break or NUL", what, s)
			}
		}
		for _, rc := range r.Recipients {
			if rc.Address == "" || len(rc.Diagnostic) > dsn.MaxDiagnostic {
				t.Fatalf("recipient %+v", rc)
			}
			line("address", rc.Address)
			line("action", rc.Action)
			line("status", rc.Status)
			line("diagnostic", rc.Diagnostic)
		}
		for _, id := range r.MessageIDs {
			line("message id", id)
		}
		for _, j := range r.Jobs {
			line("job", j)
		}
	})
}
