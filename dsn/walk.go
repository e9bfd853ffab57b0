package dsn

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"
)

// textHeader is a header as net/mail and mime/multipart read it (keys in
// canonical form).
type textHeader map[string][]string

func (h textHeader) get(key string) string { return textproto.MIMEHeader(h).Get(key) }

// walker walks a report's MIME tree and collects what the report says.
type walker struct {
	rep    Report
	parts  int
	status bool     // a delivery-status part was read
	text   []string // the text/plain parts, decoded
}

// entity reads one MIME entity (the message or a part) with header h.
func (w *walker) entity(h textHeader, body io.Reader, depth int) error {
	if w.parts++; w.parts > MaxParts {
		return fmt.Errorf("%w: more than %d MIME parts", ErrMalformed, MaxParts)
	}
	mediaType, params := "text/plain", map[string]string(nil)
	if ct := h.get("Content-Type"); ct != "" {
		var err error
		if mediaType, params, err = mime.ParseMediaType(ct); err != nil {
			return fmt.Errorf("%w: Content-Type %q: %v", ErrMalformed, clip(ct), err)
		}
	}
	body = decoded(h, body)
	switch {
	case strings.HasPrefix(mediaType, "multipart/"):
		return w.multipart(body, params["boundary"], depth)
	case mediaType == "message/delivery-status" || mediaType == "message/global-delivery-status":
		b, err := readAll(body)
		if err != nil {
			return err
		}
		w.status = true
		return w.deliveryStatus(b)
	case mediaType == "text/rfc822-headers" || mediaType == "message/rfc822-headers" ||
		mediaType == "message/rfc822" || mediaType == "message/global":
		// The returned message or its headers: only the headers are read
		// (the returned body is the sender's own text).
		b, err := readAll(body)
		if err != nil {
			return err
		}
		if rh, ok := headerBlock(b); ok {
			w.returned(rh)
		}
		return nil
	case mediaType == "text/plain":
		b, err := readAll(body)
		if err != nil {
			return err
		}
		w.text = append(w.text, string(b))
		return nil
	}
	_, err := io.Copy(io.Discard, io.LimitReader(body, MaxReportBytes))
	return readErr(err)
}

// multipart walks the parts of a multipart body.
func (w *walker) multipart(body io.Reader, boundary string, depth int) error {
	if depth >= MaxDepth {
		return fmt.Errorf("%w: multiparts nested deeper than %d", ErrMalformed, MaxDepth)
	}
	if boundary == "" {
		return fmt.Errorf("%w: a multipart without a boundary", ErrMalformed)
	}
	mr := multipart.NewReader(body, boundary)
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: MIME part: %v", ErrMalformed, err)
		}
		if err := w.entity(textHeader(p.Header), p, depth+1); err != nil {
			return err
		}
	}
}

// decoded is body without its Content-Transfer-Encoding. A quoted-
// printable part of a multipart is decoded by mime/multipart already (it
// drops the header then).
func decoded(h textHeader, body io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(h.get("Content-Transfer-Encoding"))) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, &skipSpace{r: body})
	case "quoted-printable":
		return quotedprintable.NewReader(body)
	}
	return body
}

// skipSpace drops the line breaks and blanks of a base64 body, which
// encoding/base64 does not skip except CR and LF.
type skipSpace struct{ r io.Reader }

func (s *skipSpace) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	k := 0
	for _, c := range p[:n] {
		if c != ' ' && c != '\t' {
			p[k] = c
			k++
		}
	}
	return k, err
}

// readAll reads a part, bounded.
func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxReportBytes+1))
	if err != nil {
		return nil, readErr(err)
	}
	if len(b) > MaxReportBytes {
		return nil, fmt.Errorf("%w: a part larger than %d bytes", ErrMalformed, MaxReportBytes)
	}
	return b, nil
}

func readErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}

// headerBlock reads a block of header fields (the returned headers of a
// report), ended by a blank line or the end of b.
func headerBlock(b []byte) (textHeader, bool) {
	b = bytes.TrimLeft(b, "\r\n")
	m, err := mail.ReadMessage(io.MultiReader(bytes.NewReader(b), strings.NewReader("\r\n\r\n")))
	if err != nil {
		return nil, false
	}
	return textHeader(m.Header), true
}

// deliveryStatus reads a message/delivery-status body (RFC 3464 §2.1):
// the per-message fields, then a block of fields per recipient, blocks
// apart by blank lines.
func (w *walker) deliveryStatus(b []byte) error {
	tr := textproto.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(b), strings.NewReader("\r\n\r\n"))))
	for blocks := 0; ; blocks++ {
		if blocks > MaxRecipients+1 {
			return fmt.Errorf("%w: more than %d recipients", ErrMalformed, MaxRecipients)
		}
		h, err := tr.ReadMIMEHeader()
		if len(h) > 0 {
			if r, ok := recipientOf(textHeader(h)); ok {
				w.rep.Recipients = append(w.rep.Recipients, r)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: delivery-status fields: %v", ErrMalformed, err)
		}
	}
}

// recipientOf reads a per-recipient block; ok is false for the per-message
// block and for a block naming no usable address.
func recipientOf(h textHeader) (Recipient, bool) {
	addr := typed(h.get("Final-Recipient"))
	if addr == "" {
		addr = typed(h.get("Original-Recipient"))
	}
	addr = strings.Trim(addr, "<>")
	if addr == "" || !oneLine(addr) || len(addr) > 320 {
		return Recipient{}, false
	}
	action := strings.ToLower(firstWord(h.get("Action")))
	status := firstWord(h.get("Status"))
	if !isStatus(status) {
		status = ""
	}
	return Recipient{Address: addr, Action: action, Status: status, Diagnostic: clip(typed(h.get("Diagnostic-Code")))}, true
}

// typed is a typed field's value without its type: "rfc822; a@b" → "a@b",
// "smtp; 550 …" → "550 …".
func typed(v string) string {
	if _, rest, ok := strings.Cut(v, ";"); ok {
		return strings.TrimSpace(rest)
	}
	return strings.TrimSpace(v)
}

func firstWord(v string) string {
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return ""
}

// isStatus reports whether s is an enhanced status code, class.subject.detail
// (RFC 3463): 2, 4 or 5, then one to three digits twice.
func isStatus(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || (parts[0] != "2" && parts[0] != "4" && parts[0] != "5") {
		return false
	}
	for _, p := range parts[1:] {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
