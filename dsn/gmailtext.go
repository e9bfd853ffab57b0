package dsn

import (
	"net/mail"
	"regexp"
	"strings"
)

// Gmail's older bounces are plain text, with no delivery-status part:
//
//	Delivery to the following recipient failed permanently:
//
//	     x@example.org
//
//	Technical details of permanent failure:
//	Google tried to deliver your message, but it was rejected by …
//
//	The error that the other server returned was:
//	550 5.1.1 <x@example.org>: Recipient address rejected: User unknown
//
//	----- Original message -----
//	<the original headers>
//
// "has been delayed" and "temporary failure" for a delay; "recipients" when
// several. The layout is the one the Sisimai bounce parser's Gmail module
// documents (Sisimai::Lhost::Gmail).

const (
	textBegin   = "Delivery to the following recipient"
	textDetails = "Technical details of "
	textError   = "The error that the other server returned was:"
)

// textReturned are the lines after which an old Gmail bounce returns the
// original headers.
var textReturned = []string{"----- Original message -----", "----- Message header follows -----"}

// statusInText finds an enhanced status code in a server's answer.
var statusInText = regexp.MustCompile(`\b[245]\.\d{1,3}\.\d{1,3}\b`)

// gmailTextBounce reads the recipients of an old Gmail text bounce.
func gmailTextBounce(text []string) ([]Recipient, bool) {
	for _, t := range text {
		lines := strings.Split(strings.ReplaceAll(t, "\r\n", "\n"), "\n")
		begin := -1
		for i, l := range lines {
			if strings.Contains(l, textBegin) {
				begin = i
				break
			}
		}
		if begin < 0 {
			continue
		}
		action := ActionFailed
		if strings.Contains(lines[begin], "delayed") {
			action = ActionDelayed
		}
		addrs := textAddresses(lines[begin+1:])
		if len(addrs) == 0 {
			continue
		}
		diag := textParagraphAfter(lines, textError)
		if diag == "" {
			diag = textParagraphAfter(lines, textDetails)
		}
		diag = clip(diag)
		status := statusInText.FindString(diag)
		out := make([]Recipient, 0, len(addrs))
		for _, a := range addrs {
			out = append(out, Recipient{Address: a, Action: action, Status: status, Diagnostic: diag})
		}
		return out, true
	}
	return nil, false
}

// textAddresses reads the addresses listed after the opening line: the
// lines up to the first blank line that follows one, each one address.
func textAddresses(lines []string) []string {
	var out []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			if len(out) > 0 {
				break
			}
			continue
		}
		if strings.HasPrefix(l, textDetails) || len(out) >= MaxRecipients {
			break
		}
		a, err := mail.ParseAddress(l)
		if err != nil {
			break
		}
		out = append(out, a.Address)
	}
	return out
}

// textParagraphAfter is the paragraph after the line that holds marker,
// joined on one line.
func textParagraphAfter(lines []string, marker string) string {
	for i, l := range lines {
		if !strings.Contains(l, marker) {
			continue
		}
		var para []string
		for _, m := range lines[i+1:] {
			m = strings.TrimSpace(m)
			if m == "" {
				if len(para) > 0 {
					break
				}
				continue
			}
			para = append(para, m)
		}
		return strings.Join(para, " ")
	}
	return ""
}

// returnedHeaders reads the original headers an old Gmail text bounce
// appends after textReturned.
func returnedHeaders(text []string) (textHeader, bool) {
	for _, t := range text {
		for _, marker := range textReturned {
			if _, rest, ok := strings.Cut(t, marker); ok {
				return headerBlock([]byte(strings.TrimLeft(rest, "\r\n \t")))
			}
		}
	}
	return nil, false
}
