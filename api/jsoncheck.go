package api

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/relay"
)

// maxFoldedKey bounds the object keys CheckJSON decodes to compare; longer
// keys are compared as written (no field of any request is that long, so
// they are refused as unknown anyway).
const maxFoldedKey = 1024

// maxJSONDepth is how deeply a request body may nest objects and arrays.
// No request the relay reads comes near it (a send request nests 2 deep);
// encoding/json allows 10 000, and following a body that deep cost the
// checks up to 100 bytes of memory per byte of body.
const maxJSONDepth = 64

// deeperThan reports whether the JSON text data nests objects and arrays
// more than max deep. It skips strings; data need not be valid JSON.
func deeperThan(data []byte, max int) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			if depth++; depth > max {
				return true
			}
		case '}', ']':
			depth--
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		}
	}
	return false
}

// errTooDeep is the error for a body deeper than maxJSONDepth.
func errTooDeep() error {
	return relay.Invalid("", "request body nests objects and arrays more than %d deep", maxJSONDepth)
}

// CheckJSON refuses what encoding/json would silently repair or choose for
// the caller, before the body is decoded:
//
//   - bytes that are not UTF-8, and \u escapes of unpaired UTF-16
//     surrogates: the decoder turns both into U+FFFD, so two different keys
//     would become one and replay each other;
//   - an object holding the same key twice (compared case-insensitively, as
//     the decoder matches struct fields): the decoder keeps the last one,
//     and another reader may keep the first;
//   - objects and arrays nested more than maxJSONDepth deep.
//
// Other syntax errors are left to the decoder. Errors are relay.CodeInvalid
// *relay.Error, naming the duplicated key as the field, or the body (field "").
// Its memory is bounded by a small part of the body, whatever the body's
// shape (TestCheckJSONAllocatesLittle: at most 1 % for ASCII keys): the
// keys of the open objects are kept as slices of data, compared in place
// (an escaped or non-ASCII key is decoded), a set of them only for an
// object of more than smallObject keys, and at most maxJSONDepth objects
// and arrays are open at once (a map per object would cost 16 bytes a
// byte of body for 1 MB of small objects).
func CheckJSON(data []byte) error {
	if !utf8.Valid(data) {
		return relay.Invalid("", "request body is not valid UTF-8")
	}
	var c jsonCheck
	expectKey := false
	for i := 0; i < len(data); {
		switch data[i] {
		case '{', '[':
			if len(c.stack) == maxJSONDepth {
				return errTooDeep()
			}
			expectKey = data[i] == '{'
			c.stack = append(c.stack, openValue{object: expectKey, keys: len(c.keys)})
			i++
		case '}', ']':
			if n := len(c.stack); n > 0 {
				c.keys = c.keys[:c.stack[n-1].keys]
				c.stack = c.stack[:n-1]
			}
			expectKey = false
			i++
		case ',':
			expectKey = len(c.stack) > 0 && c.stack[len(c.stack)-1].object
			i++
		case '"':
			end, escaped, err := scanJSONString(data, i)
			if err != nil {
				return err
			}
			if end > len(data) {
				return nil // unterminated: a syntax error, left to the decoder
			}
			if expectKey && len(c.stack) > 0 && c.stack[len(c.stack)-1].object {
				if c.addKey(data[i:end], escaped) {
					key := keyName(data[i:end], escaped)
					return relay.Invalid(fieldName(key), "key %q appears more than once in one JSON object", fieldName(key))
				}
			}
			expectKey = false
			i = end
		default:
			i++
		}
	}
	return nil
}

// jsonCheck is CheckJSON's state: stack holds the open objects and
// arrays, keys the keys read so far of every open object of at most
// smallObject keys (each object's from openValue.keys on).
type jsonCheck struct {
	stack []openValue
	keys  []objectKey
}

// openValue is an object or an array CheckJSON is in.
type openValue struct {
	object bool
	keys   int                 // where the object's keys start in jsonCheck.keys
	set    map[string]struct{} // the object's folded keys once it has more than smallObject
}

// objectKey is an object key as CheckJSON compares it: its lower case.
// A key of printable ASCII without escapes is kept as written (ascii),
// and lowered only as it is compared; any other key is decoded and
// lowered once (folded).
type objectKey struct {
	ascii  []byte
	folded string
}

// newObjectKey is the key quoted (quotes included); escaped reports a
// backslash in it.
func newObjectKey(quoted []byte, escaped bool) objectKey {
	if raw := quoted[1 : len(quoted)-1]; !escaped && isASCII(raw) {
		return objectKey{ascii: raw}
	}
	return objectKey{folded: strings.ToLower(keyName(quoted, escaped))}
}

// keyName is the key quoted (quotes included) decoded, or as written when
// it is longer than maxFoldedKey.
func keyName(quoted []byte, escaped bool) string {
	key := string(quoted[1 : len(quoted)-1])
	if escaped && len(quoted) <= maxFoldedKey {
		_ = json.Unmarshal(quoted, &key)
	}
	return key
}

// lower is k's lower case, as strings.ToLower gives it.
func (k objectKey) lower() string {
	if k.ascii == nil {
		return k.folded
	}
	return strings.ToLower(string(k.ascii))
}

// equal reports whether k and o have the same lower case.
func (k objectKey) equal(o objectKey) bool {
	switch {
	case k.ascii == nil && o.ascii == nil:
		return k.folded == o.folded
	case k.ascii == nil:
		return o.lowerIs(k.folded)
	case o.ascii == nil:
		return k.lowerIs(o.folded)
	}
	if len(k.ascii) != len(o.ascii) {
		return false
	}
	for i, c := range k.ascii {
		if asciiLower(c) != asciiLower(o.ascii[i]) {
			return false
		}
	}
	return true
}

// lowerIs reports whether s is the lower case of k, an ASCII key.
func (k objectKey) lowerIs(s string) bool {
	if len(k.ascii) != len(s) {
		return false
	}
	for i, c := range k.ascii {
		if asciiLower(c) != s[i] {
			return false
		}
	}
	return true
}

// addKey adds the key quoted (quotes included) to the innermost open
// object, or reports that the object holds it already.
func (c *jsonCheck) addKey(quoted []byte, escaped bool) (dup bool) {
	k := newObjectKey(quoted, escaped)
	top := &c.stack[len(c.stack)-1]
	if top.set == nil && len(c.keys)-top.keys >= smallObject {
		top.set = make(map[string]struct{}, 2*smallObject)
		for _, seen := range c.keys[top.keys:] {
			top.set[seen.lower()] = struct{}{}
		}
		c.keys = c.keys[:top.keys]
	}
	if top.set != nil {
		lower := k.lower()
		if _, dup := top.set[lower]; dup {
			return true
		}
		top.set[lower] = struct{}{}
		return false
	}
	for _, seen := range c.keys[top.keys:] {
		if seen.equal(k) {
			return true
		}
	}
	c.keys = append(c.keys, k)
	return false
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// scanJSONString returns the index after the string that starts at
// data[start] (a quote), whether it holds escapes, and an error for an
// escaped unpaired surrogate. An unterminated string gives end
// len(data)+1 (the decoder reports the syntax error).
func scanJSONString(data []byte, start int) (end int, escaped bool, err error) {
	i := start + 1
	for i < len(data) {
		switch data[i] {
		case '"':
			return i + 1, escaped, nil
		case '\\':
			escaped = true
			if i+1 < len(data) && data[i+1] == 'u' {
				r, ok := hex4(data, i+2)
				switch {
				case !ok:
					i += 2
					continue
				case r >= 0xd800 && r <= 0xdbff:
					lo, ok := -1, false
					if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						lo, ok = hex4(data, i+8)
					}
					if !ok || lo < 0xdc00 || lo > 0xdfff {
						return 0, false, relay.Invalid("", "request body holds an unpaired UTF-16 surrogate escape (\\u%04x)", r)
					}
					i += 12
					continue
				case r >= 0xdc00 && r <= 0xdfff:
					return 0, false, relay.Invalid("", "request body holds an unpaired UTF-16 surrogate escape (\\u%04x)", r)
				}
				i += 6
				continue
			}
			i += 2
		default:
			i++
		}
	}
	return len(data) + 1, escaped, nil
}

// hex4 reads four hex digits at data[i:].
func hex4(data []byte, i int) (int, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	n := 0
	for _, c := range data[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case 'A' <= c && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// checkSurrogates refuses, in the JSON value raw of field, a \u escape of an
// unpaired UTF-16 surrogate, which encoding/json would turn into U+FFFD
// silently ("k\ud800" and "k\udc00" would be one key).
func checkSurrogates(field string, raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		end, _, err := scanJSONString(raw, i)
		if err != nil {
			return relay.Invalid(field, "%s holds an unpaired UTF-16 surrogate escape", field)
		}
		i = end - 1
	}
	return nil
}
