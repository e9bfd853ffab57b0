// Package jsonpos says where in a JSON document encoding/json stopped:
// the line, the column and the byte offset a caller can find in their
// editor, instead of encoding/json's bare count of bytes read.
package jsonpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Of returns where in data the decoding error err was found, as "line L,
// column C (byte B)": line and column 1-based, the column counted in
// characters, the byte offset 0-based. For a syntax error that is the
// offending byte; for an input that ended too soon (a *json.SyntaxError
// "unexpected end", or json.Decoder's io.ErrUnexpectedEOF) it is just past
// the last byte. ok is false for any other error.
func Of(data []byte, err error) (where string, ok bool) {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		at := int(se.Offset) // bytes read, the offending one included
		if !strings.HasPrefix(se.Error(), "unexpected end") {
			at--
		}
		return At(data, at), true
	case errors.Is(err, io.ErrUnexpectedEOF):
		return At(data, len(data)), true
	}
	return "", false
}

// At is byte offset at of data as "line L, column C (byte B)"; at is
// clamped to data.
func At(data []byte, at int) string {
	at = min(max(at, 0), len(data))
	line := 1 + bytes.Count(data[:at], []byte("\n"))
	start := bytes.LastIndexByte(data[:at], '\n') + 1
	col := 1 + utf8.RuneCount(data[start:at])
	return fmt.Sprintf("line %d, column %d (byte %d)", line, col, at)
}
