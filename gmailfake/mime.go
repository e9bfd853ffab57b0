package gmailfake

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"sort"
	"strings"
	"unicode/utf8"
)

// maxMessageBytes is Gmail's limit for a sent message (35 MB).
const maxMessageBytes = 35 << 20

// decodeRaw decodes Gmail's raw field: base64url, padded or not. Standard
// base64 is accepted too, as Gmail does in practice.
func decodeRaw(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return nil, errors.New("empty")
	}
	for _, enc := range []*base64.Encoding{base64.URLEncoding, base64.RawURLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("base64 decoding failed")
}

// header is one header field as it appears in the message: name and value
// with folding kept.
type header struct {
	name  string
	value string // everything after the colon, folded lines included, without the final line break
}

// rfcMessage is a message split into its header fields and body, keeping
// everything byte for byte so it can be reassembled.
type rfcMessage struct {
	headers []header
	body    []byte
	crlf    bool // the message uses CRLF line endings
}

// parseRFC822 splits raw into header fields and body. It never fails: lines
// that are not header fields are dropped from the header section.
func parseRFC822(raw []byte) *rfcMessage {
	m := &rfcMessage{crlf: bytes.Contains(raw, []byte("\r\n"))}
	rest := raw
	for len(rest) > 0 {
		line := rest
		next := []byte(nil)
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, next = rest[:i], rest[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		rest = next
		if len(line) == 0 {
			m.body = rest
			return m
		}
		if (line[0] == ' ' || line[0] == '\t') && len(m.headers) > 0 {
			h := &m.headers[len(m.headers)-1]
			h.value += m.eol() + string(line)
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(bytes.TrimSpace(name)) == 0 {
			continue
		}
		m.headers = append(m.headers, header{name: string(bytes.TrimSpace(name)), value: string(value)})
	}
	return m
}

func (m *rfcMessage) eol() string {
	if m.crlf {
		return "\r\n"
	}
	return "\n"
}

// get returns the unfolded, trimmed value of the first field called name.
func (m *rfcMessage) get(name string) string {
	for _, h := range m.headers {
		if strings.EqualFold(h.name, name) {
			return unfold(h.value)
		}
	}
	return ""
}

// all returns the unfolded values of every field called name.
func (m *rfcMessage) all(name string) []string {
	var vs []string
	for _, h := range m.headers {
		if strings.EqualFold(h.name, name) {
			vs = append(vs, unfold(h.value))
		}
	}
	return vs
}

// set replaces the first field called name (dropping any others) or appends
// one.
func (m *rfcMessage) set(name, value string) {
	out := m.headers[:0]
	done := false
	for _, h := range m.headers {
		if strings.EqualFold(h.name, name) {
			if done {
				continue
			}
			h.value = " " + value
			done = true
		}
		out = append(out, h)
	}
	m.headers = out
	if !done {
		m.headers = append(m.headers, header{name: name, value: " " + value})
	}
}

func (m *rfcMessage) bytes() []byte {
	var b bytes.Buffer
	for _, h := range m.headers {
		b.WriteString(h.name)
		b.WriteByte(':')
		b.WriteString(h.value)
		b.WriteString(m.eol())
	}
	b.WriteString(m.eol())
	b.Write(m.body)
	return b.Bytes()
}

func unfold(v string) string {
	v = strings.ReplaceAll(v, "\r\n", "")
	v = strings.ReplaceAll(v, "\n", "")
	return strings.TrimSpace(v)
}

var wordDecoder = &mime.WordDecoder{}

// decodeHeader decodes RFC 2047 encoded words, as Gmail shows header values;
// a value it cannot decode is returned as it is.
func decodeHeader(v string) string {
	d, err := wordDecoder.DecodeHeader(v)
	if err != nil {
		return v
	}
	return d
}

// recipients checks To, Cc and Bcc: at least one address, and every field
// present must parse. It returns the addresses; the error is the one Gmail
// answers.
func recipients(m *rfcMessage) ([]string, *apiError) {
	var addrs []string
	for _, name := range []string{"To", "Cc", "Bcc"} {
		for _, v := range m.all(name) {
			if v == "" {
				continue
			}
			list, err := mail.ParseAddressList(v)
			if err != nil {
				return nil, invalidArgument("Invalid " + name + " header")
			}
			for _, a := range list {
				addrs = append(addrs, a.Address)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, invalidArgument("Recipient address required")
	}
	return addrs, nil
}

// messagePart is Gmail's MessagePart resource.
type messagePart struct {
	PartID   string          `json:"partId"`
	MimeType string          `json:"mimeType"`
	Filename string          `json:"filename"`
	Headers  []messageHeader `json:"headers"`
	Body     *partBody       `json:"body,omitempty"`
	Parts    []*messagePart  `json:"parts,omitempty"`
}

type messageHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type partBody struct {
	Size int    `json:"size"`
	Data string `json:"data,omitempty"`
}

const (
	maxPartDepth = 8
	maxParts     = 200
)

// buildPayload is the MIME tree of a message as Gmail's format=full shows it,
// with the first text/plain body for the snippet. Malformed MIME degrades to
// a single opaque part; it never fails.
func buildPayload(m *rfcMessage) (*messagePart, string) {
	hs := make([]messageHeader, 0, len(m.headers))
	for _, h := range m.headers {
		hs = append(hs, messageHeader{Name: h.name, Value: decodeHeader(unfold(h.value))})
	}
	b := &partBuilder{}
	p := b.part("", hs, m.get("Content-Type"), m.get("Content-Transfer-Encoding"), m.get("Content-Disposition"), m.body, 0)
	return p, b.snippet
}

type partBuilder struct {
	snippet string
	count   int
}

func (b *partBuilder) part(id string, hs []messageHeader, ctype, cte, disp string, body []byte, depth int) *messagePart {
	b.count++
	mt, params, err := mime.ParseMediaType(ctype)
	if ctype == "" || err != nil {
		mt, params = "text/plain", nil
	}
	p := &messagePart{PartID: id, MimeType: mt, Headers: hs}
	if _, dp, err := mime.ParseMediaType(disp); err == nil {
		p.Filename = dp["filename"]
	}
	if p.Filename == "" {
		p.Filename = params["name"]
	}
	if strings.HasPrefix(mt, "multipart/") && params["boundary"] != "" && depth < maxPartDepth {
		p.Body = &partBody{Size: 0}
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for i := 0; b.count < maxParts; i++ {
			rp, err := mr.NextRawPart()
			if err != nil {
				break
			}
			data, err := io.ReadAll(io.LimitReader(rp, maxMessageBytes))
			if err != nil {
				break
			}
			names := make([]string, 0, len(rp.Header))
			for name := range rp.Header {
				names = append(names, name)
			}
			sort.Strings(names)
			var phs []messageHeader
			for _, name := range names {
				for _, v := range rp.Header[name] {
					phs = append(phs, messageHeader{Name: name, Value: decodeHeader(v)})
				}
			}
			childID := fmt.Sprint(i)
			if id != "" {
				childID = id + "." + childID
			}
			p.Parts = append(p.Parts, b.part(childID, phs, rp.Header.Get("Content-Type"),
				rp.Header.Get("Content-Transfer-Encoding"), rp.Header.Get("Content-Disposition"), data, depth+1))
		}
		return p
	}
	data := decodeTransfer(cte, body)
	p.Body = &partBody{Size: len(data), Data: base64.URLEncoding.EncodeToString(data)}
	if b.snippet == "" && mt == "text/plain" && p.Filename == "" {
		b.snippet = makeSnippet(data)
	}
	return p
}

func decodeTransfer(cte string, body []byte) []byte {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "base64":
		clean := bytes.Map(func(r rune) rune {
			if r == '\r' || r == '\n' || r == ' ' || r == '\t' {
				return -1
			}
			return r
		}, body)
		out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
		n, err := base64.StdEncoding.Decode(out, clean)
		if err != nil {
			return body
		}
		return out[:n]
	case "quoted-printable":
		out, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
		if err != nil {
			return body
		}
		return out
	}
	return body
}

func makeSnippet(text []byte) string {
	s := strings.Join(strings.Fields(string(text)), " ")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	if utf8.RuneCountInString(s) > 200 {
		s = string([]rune(s)[:200])
	}
	return s
}
