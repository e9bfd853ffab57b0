package api

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"

	"github.com/gmailrelay/gmailrelay/internal/jsonpos"
	"github.com/gmailrelay/gmailrelay/relay"
)

// fieldRequest is the field a 413 names: the request as a whole, not
// "body", which /v1/send also takes as a field (the alias of text).
const fieldRequest = "request"

// jsonError turns an error of encoding/json reading data into a
// relay.CodeInvalid *relay.Error: a syntax error (or a body cut off) says
// where (jsonpos.Of: line, column and byte offset) and, like CheckJSON's
// errors about the body as a whole, names no field; a value of the wrong
// type names its field and the type wanted.
func jsonError(data []byte, err error) *relay.Error {
	if where, ok := jsonpos.Of(data, err); ok {
		msg := "unexpected end of JSON input"
		var se *json.SyntaxError
		if errors.As(err, &se) {
			msg = se.Error()
		}
		return relay.Invalid("", "request body is not valid JSON: %s at %s", msg, where)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return relay.Invalid(te.Field, "%s must be %s, not %s", te.Field, kindWord(te.Type), te.Value)
	}
	if errors.Is(err, io.EOF) {
		return relay.Invalid("", "request body is empty; want a JSON object")
	}
	return relay.Invalid("", "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// kindWord names the JSON value a Go type takes.
func kindWord(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return kindWord(t.Elem())
	}
	return "another type"
}
