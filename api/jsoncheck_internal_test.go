package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay/relay"
)

// checkJSONMaps is CheckJSON as it was, with a map per object and no
// bound on depth. FuzzCheckJSONAgreesWithMaps holds CheckJSON to it.
func checkJSONMaps(data []byte) error {
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
			switch {
			case err != nil:
				return err
			case end > len(data):
				return nil
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

// FuzzCheckJSONAgreesWithMaps: CheckJSON refuses what checkJSONMaps
// refuses, with the same error, unless it stops first at maxJSONDepth.
func FuzzCheckJSONAgreesWithMaps(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"A":2}`, `{"a":1,"\u0041":2}`, `{"é":1,"É":2}`, `{"\u00e9":1,"É":2}`, `{"K":1,"\u212a":2}`,
		`[{"a":1},{"a":1}]`, `{"a":{"a":1},"b":{"b":1,"B":2}}`, `{"a":"\ud800"}`, `{"a\"b":1,"A\"B":2}`,
		`{"":1,"":2}`, `{"x":1` + strings.Repeat(`,"y":1`, 20) + `}`, manyKeys(20, `"\u00583":1`), manyKeys(20, `"x3":1`),
		manyKeys(20, `"n":{"a":1,"A":2},"X1":0`), `{"a":[1,{"b":2}],"c":3,"C":4}`, `}{"a":1,"a":2}`, `{"a" "a":1}`,
		`{"` + strings.Repeat("a", maxFoldedKey) + `\u0041":1,"` + strings.Repeat("a", maxFoldedKey) + `\u0061":2}`,
		strings.Repeat("[", 70), `{"Ⱥ":1,"ⱥ":2}`, `{"ſ":1,"s":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := CheckJSON(data), checkJSONMaps(data)
		if got != nil && got.Error() == errTooDeep().Error() {
			return
		}
		var re *relay.Error
		if (got == nil) != (want == nil) || got != nil && (got.Error() != want.Error() || !errors.As(got, &re) || re.Code != relay.CodeInvalid) {
			t.Fatalf("CheckJSON(%q) = %v; with a map per object: %v", data, got, want)
		}
	})
}
