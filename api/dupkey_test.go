package api

import (
	"bytes"
	"encoding/json"
	"testing"
)

// duplicateKeyTokens is duplicateKey as it was: a walk of json.Decoder
// tokens with a map per object. FuzzDuplicateKey holds the scanner to it.
func duplicateKeyTokens(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(prefix string) (string, bool)
	walk = func(prefix string) (string, bool) {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				k, isStr := kt.(string)
				if err != nil || !isStr {
					return "", false
				}
				path := k
				if prefix != "" {
					path = prefix + "." + k
				}
				if seen[k] {
					return path, true
				}
				seen[k] = true
				if p, stop := walk(path); stop {
					return p, true
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if p, stop := walk(prefix); stop {
					return p, true
				}
			}
			_, _ = dec.Token()
		}
		return "", false
	}
	p, _ := walk("")
	return p
}

var duplicateKeySeeds = []string{
	`{"a":1,"a":2}`, `{"a":1,"b":{"c":1,"c":2}}`, `{"a":[{"x":1},{"x":2,"x":3}]}`, `{"a":"\u0061","\u0061":1}`,
	`{"k":"v","h":{"X-A":"1","X-A":"2"}}`, `{"job":{"order_id":1,"order_id":"2"}}`, `[1,{"a":{},"a":[]}]`,
	`{"é":1,"\u00e9":2}`, `{"a\"b":1,"a\"b":2}`, `{ "a" : 1 , "b" : [ true , null , -1.5e3 ] , "a" : 0 }`,
	`{"to":["x@example.com"],"subject":"s","text":"t"}`, `"str"`, `12`, `{}`, `[]`, "{\"\xff\":1,\"\xfe\":2}",
	`{"a":{"b":1},"c":{"b":1}}`, `{"a":{"a":1}}`,
	// Objects past smallObject keys, whose keys go into a set.
	manyKeys(smallObject, `"X3":1`), manyKeys(smallObject, `"\u00583":1`), manyKeys(smallObject-1, `"X3":1`),
	manyKeys(40, `"n":{"a":1,"a":2},"X1":0`), manyKeys(40, `"X1":0,"n":{"a":1,"a":2}`), `[` + manyKeys(40, "") + `,` + manyKeys(20, `"X0":1`) + `]`,
}

func TestDuplicateKey(t *testing.T) {
	for _, in := range duplicateKeySeeds {
		if got, want := duplicateKey([]byte(in)), duplicateKeyTokens([]byte(in)); got != want {
			t.Errorf("duplicateKey(%s) = %q, the token walk says %q", in, got, want)
		}
	}
	for in, want := range map[string]string{`{"a":1,"b":{"c":1,"c":2}}`: "b.c", `{"a":{"a":1}}`: "", `{"a":"\u0061","\u0061":1}`: "a"} {
		if got := duplicateKey([]byte(in)); got != want {
			t.Errorf("duplicateKey(%s) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDuplicateKey: on valid JSON (duplicateKey's precondition) the
// scanner finds the very path the json.Decoder token walk finds.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range duplicateKeySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		if got, want := duplicateKey(data), duplicateKeyTokens(data); got != want {
			t.Fatalf("duplicateKey(%q) = %q, the token walk says %q", data, got, want)
		}
	})
}

func BenchmarkDuplicateKey(b *testing.B) {
	data := []byte(`{"key":"order-1","from":"Bench <me@example.com>","to":["rcpt@example.com"],"subject":"Your order 1 has shipped","text":"Your order has shipped.","job":{"order_id":1,"event_type":"shipped"}}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = duplicateKey(data)
		}
	})
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = duplicateKeyTokens(data)
		}
	})
}

// FuzzPlainString: a JSON string plainString reads is the string
// encoding/json decodes.
func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"\u0061"`, `"é"`, `""`, `"a b<>&"`, `"`, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := plainString(raw)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil || got != want {
			t.Fatalf("plainString(%q) = %q; encoding/json: %q, %v", raw, got, want, err)
		}
	})
}
