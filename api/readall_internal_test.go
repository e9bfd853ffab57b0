package api

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// readAllSized returns every byte of the body, whether it reads in chunks
// (not the oldest body), moves to one buffer part-way (becomes the oldest)
// or meets a body longer than it declared.
func TestReadAllSizedReadsEveryByte(t *testing.T) {
	for _, size := range []int{0, 1, 64 << 10, 64<<10 + 1, 3<<20 + 7} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		for name, oldest := range map[string]func() bool{
			"not oldest": func() bool { return false },
			"oldest":     func() bool { return true },
			"none":       nil,
			"later oldest": func() func() bool {
				calls := 0
				return func() bool { calls++; return calls > 3 }
			}(),
		} {
			got, err := readAllSized(iotest.HalfReader(bytes.NewReader(body)), int64(size), 1<<30, oldest)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes, %s: got %d bytes, %v", size, name, len(got), err)
			}
		}
		// Declared one byte short: still every byte.
		if size > 0 {
			got, err := readAllSized(bytes.NewReader(body), int64(size-1), 1<<30, func() bool { return false })
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes declared %d: got %d bytes, %v", size, size-1, len(got), err)
			}
		}
	}
	if got, err := readAllSized(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 100, nil); err == nil || len(got) != 0 {
		t.Fatalf("a failing read: %q %v", got, err)
	}
}
