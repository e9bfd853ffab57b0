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

// CheckJSON refuses what encoding/json would silently repair or choose for
// the caller, before the body is decoded:
//
//   - bytes that are not UTF-8, and \u escapes of unpaired UTF-16
//     surrogates: the decoder turns both into U+FFFD, so two different keys
//     would become one and replay each other;
//   - an object holding the same key twice (compared case-insensitively, as
//     the decoder matches struct fields): the decoder keeps the last one,
//     and another reader may keep the first.
//
// Syntax errors are left to the decoder. Errors are relay.CodeInvalid *relay.Error,
// naming the duplicated key as the field, or the body (field "").
// CheckJSON allocates nothing per value: it is safe on large bodies.
func CheckJSON(data []byte) error {
	if !utf8.Valid(data) {
		return relay.Invalid("", "request body is not valid UTF-8")
	}
	var stack []map[string]bool // one per open object or array (nil)
	expectKey := false
	for i := 0; i < len(data); {
		switch data[i] {
		case '{':
			stack = append(stack, map[string]bool{})
			expectKey = true
			i++
		case '[':
			stack = append(stack, nil)
			expectKey = false
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
			i++
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
			i++
		case '"':
			end, escaped, err := scanJSONString(data, i)
			if err != nil {
				return err
			}
			if end > len(data) {
				return nil // unterminated: a syntax error, left to the decoder
			}
			if expectKey && len(stack) > 0 && stack[len(stack)-1] != nil {
				key := string(data[i+1 : end-1])
				if escaped && end-i <= maxFoldedKey {
					_ = json.Unmarshal(data[i:end], &key)
				}
				folded := strings.ToLower(key)
				if stack[len(stack)-1][folded] {
					return relay.Invalid(fieldName(key), "key %q appears more than once in one JSON object", fieldName(key))
				}
				stack[len(stack)-1][folded] = true
			}
			expectKey = false
			i = end
		default:
			i++
		}
	}
	return nil
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
