package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/relay"
)

// DecodeSendRequest decodes the JSON body of POST /v1/send (docs/api.md) into the domain value relay.SendRequest. Every field is a
// string except to, cc, bcc and reply_to (a string or a list of strings),
// headers (an object of strings) and job (an object of customer_id,
// event_type and order_id). It decodes strictly: the body must be one
// JSON object, field names must match exactly, and every field must have its
// type. An unknown field, a wrongly typed one or a body that is not a JSON
// object (or nests objects and arrays more than 64 deep) is a
// relay.CodeInvalid *relay.Error naming the field (empty for the body
// itself). job's fields also accept an integer number, kept as written.
func DecodeSendRequest(data []byte) (relay.SendRequest, error) {
	var req relay.SendRequest
	var fields map[string]rawField
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return req, jsonError(data, se)
		}
		return req, relay.Invalid("", "request body must be a JSON object")
	}
	// Deeper than any send request: duplicateKey's walk would hold a key
	// and a stack frame per level.
	if deeperThan(data, maxJSONDepth) {
		return req, errTooDeep()
	}
	if path := duplicateKey(data); path != "" {
		return req, relay.Invalid(fieldName(path), "%s is given more than once", fieldName(path))
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		raw := json.RawMessage(fields[name])
		// encoding/json would replace invalid UTF-8 with U+FFFD silently:
		// the message sent would not be the one the caller wrote.
		if !utf8.Valid(raw) {
			return relay.SendRequest{}, relay.Invalid(fieldName(name), "%s is not valid UTF-8", fieldName(name))
		}
		if err := checkSurrogates(fieldName(name), raw); err != nil {
			return relay.SendRequest{}, err
		}
		var err error
		switch name {
		case "key":
			err = decodeString(name, raw, &req.Key)
		case "channel":
			err = decodeString(name, raw, &req.Channel)
		case "from":
			err = decodeString(name, raw, &req.From)
		case "subject":
			err = decodeString(name, raw, &req.Subject)
		case "text":
			err = decodeString(name, raw, &req.Text)
		case "html":
			err = decodeString(name, raw, &req.HTML)
		case "body":
			err = decodeString(name, raw, &req.Body)
		case "thread_id":
			err = decodeString(name, raw, &req.ThreadID)
		case "raw":
			err = decodeString(name, raw, &req.Raw)
		case "send_at":
			err = decodeString(name, raw, &req.SendAt)
		case "when_busy":
			err = decodeString(name, raw, &req.WhenBusy)
		case "mailbox":
			err = decodeString(name, raw, &req.Mailbox)
		case "to":
			err = decodeAddressList(name, raw, &req.To)
		case "cc":
			err = decodeAddressList(name, raw, &req.Cc)
		case "bcc":
			err = decodeAddressList(name, raw, &req.Bcc)
		case "reply_to":
			err = decodeAddressList(name, raw, &req.ReplyTo)
		case "headers":
			if jerr := json.Unmarshal(raw, &req.Headers); jerr != nil {
				err = relay.Invalid(name, "headers must be an object of strings")
			}
		case "job":
			req.Job, err = decodeJob(raw)
		default:
			err = relay.Invalid(fieldName(name), "unknown field %q", name)
		}
		if err != nil {
			return relay.SendRequest{}, err
		}
	}
	return req, nil
}

// duplicateKey returns the dotted path ("key", "job.order_id",
// "headers.X-A") of the first object key that appears twice in the JSON
// document data, or "" when there is none. encoding/json keeps the last of
// two, where another reader may keep the first. data must be valid JSON;
// a syntax error ends the walk with "".
//
// It scans data in place: keys are compared as their bytes in data, and
// only a key holding an escape or a non-ASCII byte is decoded (as
// encoding/json decodes it, so "a" and "\u0061" are one key). Its time and
// memory are linear in data whatever the body holds (see smallObject).
// FuzzDuplicateKey holds it to a walk of json.Decoder tokens with a map
// per object.
func duplicateKey(data []byte) string {
	d := dupScan{data: data, keys: make([][]byte, 0, 32)}
	p, _ := d.value()
	return p
}

// dupScan is duplicateKey's walk: keys holds the keys read so far of every
// open object of at most smallObject keys (each object's from where it
// started; a larger object keeps a set instead), path the key of each
// enclosing member.
type dupScan struct {
	data []byte
	i    int
	keys [][]byte
	path [][]byte
	// compared counts key comparisons and set look-ups, for the test
	// that holds the walk to linear time.
	compared int
}

func (d *dupScan) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

// str reads the string at d.i (its opening quote) and returns its
// content as written and whether it needs decoding.
func (d *dupScan) str() (raw []byte, plain, ok bool) {
	start := d.i + 1
	plain = true
	for j := start; j < len(d.data); j++ {
		switch c := d.data[j]; {
		case c == '\\':
			plain = false
			j++
		case c == '"':
			d.i = j + 1
			return d.data[start:j], plain, true
		case c >= 0x80:
			plain = false
		}
	}
	return nil, false, false
}

// value walks the value at d.i; found reports a duplicate, at path.
func (d *dupScan) value() (path string, found bool) {
	d.space()
	if d.i >= len(d.data) {
		return "", false
	}
	switch d.data[d.i] {
	case '{':
		d.i++
		start := len(d.keys)
		var set map[string]struct{} // this object's keys once it has many
		defer func() { d.keys = d.keys[:start] }()
		for d.member('}') {
			if d.data[d.i] != '"' {
				return "", false
			}
			raw, plain, ok := d.str()
			if !ok {
				return "", false
			}
			key := raw
			if !plain {
				var k string
				if json.Unmarshal(d.data[d.i-len(raw)-2:d.i], &k) != nil {
					return "", false
				}
				key = []byte(k)
			}
			if d.seen(&set, start, key) {
				return d.pathTo(key), true
			}
			d.space()
			if d.i >= len(d.data) || d.data[d.i] != ':' {
				return "", false
			}
			d.i++
			d.path = append(d.path, key)
			p, found := d.value()
			d.path = d.path[:len(d.path)-1]
			if found {
				return p, true
			}
		}
	case '[':
		d.i++
		for d.member(']') {
			if p, found := d.value(); found {
				return p, true
			}
		}
	case '"':
		_, _, _ = d.str()
	default: // a number, true, false or null
		for d.i < len(d.data) && !endsLiteral(d.data[d.i]) {
			d.i++
		}
	}
	return "", false
}

// member moves past white space and commas to the next member of the
// object or array that end closes: false at its end (moved past) or at
// the end of the data.
func (d *dupScan) member(end byte) bool {
	for {
		d.space()
		if d.i >= len(d.data) {
			return false
		}
		switch d.data[d.i] {
		case end:
			d.i++
			return false
		case ',':
			d.i++
		default:
			return true
		}
	}
}

// smallObject is how many keys of one object dupScan compares one by one;
// past it the object's keys go into a set, so an object of n keys costs
// O(n), not O(n²): a body of 100 000 keys (1.2 MB) is refused in
// milliseconds, not seconds.
const smallObject = 16

// seen reports whether key is among the keys read so far of the object
// whose keys start at d.keys[start], and adds it to them. *set is nil
// while the object has at most smallObject keys.
func (d *dupScan) seen(set *map[string]struct{}, start int, key []byte) bool {
	if *set == nil && len(d.keys)-start >= smallObject {
		*set = make(map[string]struct{}, 2*smallObject)
		for _, k := range d.keys[start:] {
			(*set)[string(k)] = struct{}{}
		}
		d.keys = d.keys[:start]
	}
	if *set != nil {
		d.compared++
		if _, ok := (*set)[string(key)]; ok {
			return true
		}
		(*set)[string(key)] = struct{}{}
		return false
	}
	for _, k := range d.keys[start:] {
		d.compared++
		if bytes.Equal(k, key) {
			return true
		}
	}
	d.keys = append(d.keys, key)
	return false
}

// endsLiteral reports whether c ends a number or a literal.
func endsLiteral(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// pathTo is the dotted path of key inside the members being walked.
// A segment joins with a dot only after a non-empty path (as the token
// walk built it: an empty key leaves no dot behind).
func (d *dupScan) pathTo(key []byte) string {
	var b []byte
	for _, k := range append(d.path, key) {
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = append(b, k...)
	}
	return string(b)
}

// fieldName bounds a client-chosen name before it is echoed as an error's
// field.
func fieldName(name string) string { return name[:min(len(name), 64)] }

// rawField is json.RawMessage without the copy: it keeps the slice of
// the request body encoding/json hands it (the body is never modified
// while the request is decoded), so that a request holds its raw message
// once, not twice.
type rawField []byte

// UnmarshalJSON implements json.Unmarshaler.
func (r *rawField) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// plainString is the value of a JSON string written without escapes, in
// printable ASCII: exactly what encoding/json decodes it to, without its
// decoder. ok is false for any other value (decodeString then asks
// encoding/json).
func plainString(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	for _, c := range in {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return string(in), true
}

func decodeString(field string, raw json.RawMessage, dst *string) error {
	if v, ok := plainString(raw); ok {
		*dst = v
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return relay.Invalid(field, "%s must be a string", field)
	}
	return nil
}

func decodeAddressList(field string, raw json.RawMessage, dst *relay.AddressList) error {
	if err := dst.UnmarshalJSON(raw); err != nil {
		var re *relay.Error
		if errors.As(err, &re) {
			return relay.Invalid(field, "%s %s", field, re.Message)
		}
		return relay.Invalid(field, "%s must be a string or a list of strings", field)
	}
	return nil
}

// integerLiteral matches the JSON integers a job field may be given as.
var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// decodeJob decodes job strictly: an object with customer_id, event_type and
// order_id, each a string or an integer; null is no job.
func decodeJob(raw json.RawMessage) (*relay.JobRef, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, relay.Invalid("job", "job must be an object")
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	var job relay.JobRef
	for _, name := range names {
		var dst *string
		switch name {
		case "customer_id":
			dst = &job.CustomerID
		case "event_type":
			dst = &job.EventType
		case "order_id":
			dst = &job.OrderID
		default:
			return nil, relay.Invalid(fieldName("job."+name), "unknown field %q in job", name)
		}
		v := bytes.TrimSpace(fields[name])
		if integerLiteral.Match(v) {
			*dst = string(v)
			continue
		}
		if err := decodeString("job."+name, v, dst); err != nil {
			return nil, relay.Invalid("job."+name, "job.%s must be a string or an integer", name)
		}
	}
	return &job, nil
}
