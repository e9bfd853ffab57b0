package jsonpos_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/jsonpos"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name, data, want string
		decoder          bool // json.Decoder, which says io.ErrUnexpectedEOF
	}{
		{"first byte", `x`, "line 1, column 1 (byte 0)", false},
		{"third line", "{\n  \"a\": 1,\n  \"b\": x\n}", "line 3, column 8 (byte 19)", false},
		{"column in characters", `{"é": "ü", x}`, "line 1, column 12 (byte 13)", false},
		{"cut off", "{\"a\":\n", "line 2, column 1 (byte 6)", false},
		{"cut off, decoder", "{\"a\":\n", "line 2, column 1 (byte 6)", true},
		{"bad last byte", `{"a":x`, "line 1, column 6 (byte 5)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			var err error
			if tt.decoder {
				err = json.NewDecoder(strings.NewReader(tt.data)).Decode(&v)
			} else {
				err = json.Unmarshal([]byte(tt.data), &v)
			}
			got, ok := jsonpos.Of([]byte(tt.data), err)
			if !ok || got != tt.want {
				t.Errorf("Of(%q, %v) = %q, %v; want %q", tt.data, err, got, ok, tt.want)
			}
		})
	}
	if _, ok := jsonpos.Of(nil, errors.New("other")); ok {
		t.Error("Of gave a position for an error that is not a syntax error")
	}
}
