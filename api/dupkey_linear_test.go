package api

import (
	"fmt"
	"strings"
	"testing"
)

// manyKeys is a JSON object of n distinct keys X0…X(n-1) with empty
// string values, then the members of extra.
func manyKeys(n int, extra string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"X%d":""`, i)
	}
	if extra != "" {
		b.WriteString("," + extra)
	}
	b.WriteByte('}')
	return b.String()
}

// An object of n keys used to compare each key with every earlier one:
// 100 000 keys (1.2 MB) held /v1/send's decoder for 10 s of CPU before
// its 400. The walk must compare O(n) times, whatever the nesting.
func TestDuplicateKeyComparesLinearly(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name, body, want string
	}{
		{"flat", manyKeys(n, ""), ""},
		{"nested", `{"headers":` + manyKeys(n, "") + `,"to":"a@x.com"}`, ""},
		{"duplicate last", manyKeys(n, `"X7":1`), "X7"},
		{"escaped duplicate last", manyKeys(n, `"\u0058123":1`), "X123"},
		{"duplicate in a later object", `[` + manyKeys(n, "") + `,` + manyKeys(n, `"X0":1`) + `]`, "X0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dupScan{data: []byte(tc.body)}
			got, _ := d.value()
			if got != tc.want {
				t.Errorf("duplicate = %q, want %q", got, tc.want)
			}
			if limit := 3 * n; d.compared > limit {
				t.Errorf("%d key comparisons for objects of %d keys, want at most %d", d.compared, n, limit)
			}
		})
	}
}
