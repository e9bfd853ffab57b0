package faultmodes_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/gmailrelay/gmailrelay/faultmodes"
)

func TestParseSpecAccepts(t *testing.T) {
	one, half := 1, 0.5
	tests := []struct {
		name string
		body string
		want faultmodes.Spec
	}{
		{"mode only", `{"mode":"fail-before-forward"}`, faultmodes.Spec{Mode: faultmodes.FailBeforeForward}},
		{"all fields", `{"mode":"forward-then-drop-response","channel":"billing","key":"k1","count":1,"probability":0.5,"ttl":"5m","drop":"504"}`,
			faultmodes.Spec{Mode: faultmodes.ForwardThenDropResponse, Channel: "billing", Key: "k1", Count: &one, Probability: &half, TTL: "5m", Drop: "504"}},
		{"probability one", `{"mode":"forward-and-respond","probability":1}`, faultmodes.Spec{Mode: faultmodes.ForwardAndRespond, Probability: ptr(1.0)}},
		{"crash parses", `{"mode":"crash-after-forward"}`, faultmodes.Spec{Mode: faultmodes.CrashAfterForward}},
		{"whitespace around", " \n{\"mode\":\"fail-before-forward\"}\n ", faultmodes.Spec{Mode: faultmodes.FailBeforeForward}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := faultmodes.ParseSpec([]byte(tt.body))
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantField string
	}{
		{"empty body", ``, ""},
		{"null", `null`, ""},
		{"array", `[]`, ""},
		{"malformed", `{"mode":`, ""},
		{"trailing data", `{"mode":"fail-before-forward"} {}`, ""},
		{"missing mode", `{}`, "mode"},
		{"unknown mode", `{"mode":"explode"}`, "mode"},
		{"mode wrong type", `{"mode":3}`, "mode"},
		{"probability zero", `{"mode":"fail-before-forward","probability":0}`, "probability"},
		{"probability negative", `{"mode":"fail-before-forward","probability":-0.1}`, "probability"},
		{"probability above one", `{"mode":"fail-before-forward","probability":1.01}`, "probability"},
		{"probability string", `{"mode":"fail-before-forward","probability":"0.5"}`, "probability"},
		{"count zero", `{"mode":"fail-before-forward","count":0}`, "count"},
		{"count negative", `{"mode":"fail-before-forward","count":-1}`, "count"},
		{"count fractional", `{"mode":"fail-before-forward","count":1.5}`, "count"},
		{"bad ttl", `{"mode":"fail-before-forward","ttl":"soon"}`, "ttl"},
		{"ttl without unit", `{"mode":"fail-before-forward","ttl":"30"}`, "ttl"},
		{"ttl zero", `{"mode":"fail-before-forward","ttl":"0s"}`, "ttl"},
		{"ttl negative", `{"mode":"fail-before-forward","ttl":"-1m"}`, "ttl"},
		{"drop on wrong mode", `{"mode":"fail-before-forward","drop":"504"}`, "drop"},
		{"drop unknown value", `{"mode":"forward-then-drop-response","drop":"502"}`, "drop"},
		{"unknown field", `{"mode":"fail-before-forward","colour":"red"}`, "colour"},
		{"field in other case", `{"Mode":"fail-before-forward"}`, "Mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := faultmodes.ParseSpec([]byte(tt.body))
			var fe *faultmodes.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseSpec(%s): got %v (%T), want *FieldError", tt.body, err, err)
			}
			if got := fe.Field; got != tt.wantField {
				t.Errorf("field: got %q, want %q (error %v)", got, tt.wantField, err)
			}
			if fe.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestFieldErrorString(t *testing.T) {
	tests := []struct {
		err  faultmodes.FieldError
		want string
	}{
		{faultmodes.FieldError{Field: "ttl", Message: "must be positive"}, "ttl: must be positive"},
		{faultmodes.FieldError{Message: "empty body"}, "empty body"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    faultmodes.Mode
		wantErr bool
	}{
		{"fail-before-forward", faultmodes.FailBeforeForward, false},
		{"  Forward-Then-Drop-Response ", faultmodes.ForwardThenDropResponse, false},
		{"forward-and-respond", faultmodes.ForwardAndRespond, false},
		{"crash-after-forward", faultmodes.CrashAfterForward, false},
		{"", "", true},
		{"drop", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := faultmodes.ParseMode(tt.in)
			if tt.wantErr {
				var fe *faultmodes.FieldError
				if !errors.As(err, &fe) || fe.Field != "mode" {
					t.Fatalf("got %v, want *FieldError on mode", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestModesValid(t *testing.T) {
	for _, m := range faultmodes.Modes() {
		if !m.Valid() {
			t.Errorf("%q not valid", m)
		}
	}
	if faultmodes.Mode("FAIL-BEFORE-FORWARD").Valid() {
		t.Error("upper-case mode is valid, want exact names only")
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, seed := range []string{
		`{"mode":"fail-before-forward"}`,
		`{"mode":"forward-then-drop-response","channel":"billing","key":"k1","count":3,"probability":0.25,"ttl":"5m","drop":"504"}`,
		`{"mode":"crash-after-forward","key":"<job-abc@d>"}`,
		`{"mode":"fail-before-forward","count":0}`,
		`{"mode":"x","extra":1}`,
		`{"mode":"forward-and-respond","probability":1e-300}`,
		`[1,2]`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := faultmodes.ParseSpec(data)
		if err != nil {
			var fe *faultmodes.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is %T, want *FieldError", err, err)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("accepted spec fails Validate: %v", err)
		}
		// What we accept, we can write back and read again unchanged.
		out, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := faultmodes.ParseSpec(out)
		if err != nil {
			t.Fatalf("re-parse %s: %v", out, err)
		}
		if !reflect.DeepEqual(again, spec) {
			t.Fatalf("round trip: got %+v, want %+v", again, spec)
		}
		// Every accepted non-crash spec can be added to a Set.
		s := faultmodes.New(faultmodes.Options{Seed: 1, AllowCrash: true})
		if _, err := s.Add(spec); err != nil {
			t.Fatalf("Add of accepted spec: %v", err)
		}
	})
}

func ptr[T any](v T) *T { return &v }
