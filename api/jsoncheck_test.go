package api_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
)

// allocated is the bytes f allocates: the least of three runs, so a
// goroutine of another test allocating meanwhile does not count.
func allocated(f func()) uint64 {
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// repeatTo is s repeated to at least n bytes, between open and end.
func repeatTo(n int, open, s, end string) string {
	return open + strings.Repeat(s, (n-len(open)-len(end))/len(s)+1) + end
}

// CheckJSON kept a map per "{" and a stack entry per "[": 1 MB of "{"
// allocated 92 MB, 1 MB of "[" 45 MB, 1 MB of "{}," 16 MB (a 24 MB body
// to the Gmail path peaked the relay at 1.5 GB). What it allocates must
// stay a small part of the body, whatever the body's shape.
func TestCheckJSONAllocatesLittle(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name, body string
		ok         bool
		most       float64 // bytes allocated per byte of body
	}{
		{"objects opened", strings.Repeat("{", size), false, 0.01},
		{"arrays opened", strings.Repeat("[", size), false, 0.01},
		{"objects nested by keys", strings.Repeat(`{"a":`, size/5), false, 0.01},
		{"empty objects", repeatTo(size, "[", "{},", "{}]"), true, 0.01},
		{"small objects", repeatTo(size, "[", `{"a":1,"B":2,"c":3},`, "{}]"), true, 0.01},
		{"values nested 63 deep", repeatTo(size, "[", nested(63)+",", "0]"), true, 0.01},
		// A key to decode costs a few small allocations (2.3× the body,
		// 4× under -race; 18× before), garbage at once.
		{"non-ASCII keys", repeatTo(size, "[", `{"é":1,"ü":2},`, "{}]"), true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			var err error
			got := allocated(func() { err = api.CheckJSON(body) })
			if (err == nil) != tc.ok {
				t.Errorf("CheckJSON = %v, want ok %v", err, tc.ok)
			}
			t.Logf("%d bytes allocated for a body of %d", got, len(tc.body))
			if limit := uint64(tc.most * float64(len(tc.body))); got > limit {
				t.Errorf("CheckJSON allocated %d bytes for a body of %d (%.1f×), want at most %d", got, len(tc.body), float64(got)/float64(len(tc.body)), limit)
			}
		})
	}
}

// nested is depth objects and arrays, alternately, one inside the other.
func nested(depth int) string {
	var b strings.Builder
	end := make([]byte, depth)
	for i := range depth {
		if i%2 == 0 {
			b.WriteString(`{"a":`)
			end[depth-1-i] = '}'
		} else {
			b.WriteString("[")
			end[depth-1-i] = ']'
		}
	}
	return b.String() + "0" + string(end)
}

// Bodies nested more than 64 deep are refused, as invalid naming the
// body, by CheckJSON and by DecodeSendRequest; brackets in strings do not
// count.
func TestNestingDepthIsBounded(t *testing.T) {
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{1, true}, {63, true}, {64, true}, {65, false}, {10000, false}, {10001, false}} {
		body := nested(tc.depth)
		if err := api.CheckJSON([]byte(body)); (err == nil) != tc.ok {
			t.Errorf("depth %d: CheckJSON = %v, want ok %v", tc.depth, err, tc.ok)
		} else if err != nil {
			testenv.WantInvalid(t, err, "")
		}
		// One level less: the send request's own object is the first.
		_, err := api.DecodeSendRequest([]byte(`{"headers":` + nested(tc.depth-1) + `}`))
		if tc.ok {
			if err == nil {
				t.Errorf("depth %d: DecodeSendRequest accepts a nested header", tc.depth)
			}
			continue
		}
		testenv.WantInvalid(t, err, "")
	}
	in := `{"a":"` + strings.Repeat("[{", 100) + `","b":["\"[[[[[[[["]}`
	if err := api.CheckJSON([]byte(in)); err != nil {
		t.Errorf("CheckJSON(%s) = %v", in, err)
	}
	if _, err := api.DecodeSendRequest([]byte(`{"subject":"` + strings.Repeat("[{", 100) + `","text":"\"[[[["}`)); err != nil {
		t.Errorf("DecodeSendRequest with brackets in strings: %v", err)
	}
}
