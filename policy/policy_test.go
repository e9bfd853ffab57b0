package policy_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/policy"
)

func TestDefault(t *testing.T) {
	p := policy.Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("Default().Validate: %v", err)
	}
	wantPolicy(t, p, "gmailrelay.local",
		policy.Channel{Name: "default", OnUnknown: policy.Retry, Grace: 3 * time.Minute, Checks: 2, MaxAttempts: 3})
	// Each call is a fresh value.
	p.Channels["x"] = policy.Channel{}
	if _, ok := policy.Default().Channels["x"]; ok {
		t.Error("Default() shares its map between calls")
	}
}

// TestBuiltInChannels: the channels are the built-in ones without a file
// and with a file that names none, never when a file names them (serve's
// sandbox shortens only a built-in grace).
func TestBuiltInChannels(t *testing.T) {
	if !policy.Default().BuiltInChannels {
		t.Error("Default(): BuiltInChannels false")
	}
	for file, want := range map[string]bool{
		"retention: 90d\n": true,
		"mailboxes:\n  default: {daily_send_limit: 100}\n":       true,
		"channels:\n  default: {on_unknown: retry}\n":            false,
		"channels:\n  default: {on_unknown: retry, grace: 3m}\n": false,
	} {
		p, err := policy.Parse([]byte(file))
		if err != nil {
			t.Fatalf("Parse(%q): %v", file, err)
		}
		if p.BuiltInChannels != want {
			t.Errorf("Parse(%q).BuiltInChannels = %v, want %v", file, p.BuiltInChannels, want)
		}
	}
}

func TestExampleFile(t *testing.T) {
	p, err := policy.Load("example.yaml")
	if err != nil {
		t.Fatalf("Load example.yaml: %v", err)
	}
	wantPolicy(t, p, "inbound.example.com",
		policy.Channel{Name: "default", OnUnknown: policy.Retry, Grace: 3 * time.Minute, Checks: 2, MaxAttempts: 3},
		policy.Channel{Name: "receipts", OnUnknown: policy.Retry, Grace: 5 * time.Minute, Checks: 2, MaxAttempts: 3},
		policy.Channel{Name: "billing", OnUnknown: policy.Review, Grace: 3 * time.Minute, Checks: 1, MaxAttempts: 3})
}

// wantPolicy checks that got is exactly a policy with msgid_domain domain,
// verify_handle first, no mailboxes or retention, and these channels.
func wantPolicy(t *testing.T, got *policy.Policy, domain string, chans ...policy.Channel) {
	t.Helper()
	want := &policy.Policy{MsgIDDomain: domain, VerifyHandle: policy.VerifyFirst, Channels: map[string]policy.Channel{}}
	for _, c := range chans {
		want.Channels[c.Name] = c
	}
	g := *got
	g.BuiltInChannels = false // TestBuiltInChannels checks it
	got = &g
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *policy.Policy
	}{
		{"contract example, flow style", `
msgid_domain: inbound.example.com
verify_handle: always
channels:
  default:  {on_unknown: retry,  grace: 3m, checks: 2, max_attempts: 3}
  billing:  {on_unknown: review, grace: 90s, checks: 1}
`, &policy.Policy{MsgIDDomain: "inbound.example.com", VerifyHandle: policy.VerifyAlways, Channels: map[string]policy.Channel{
			"default": {Name: "default", OnUnknown: policy.Retry, Grace: 3 * time.Minute, Checks: 2, MaxAttempts: 3},
			"billing": {Name: "billing", OnUnknown: policy.Review, Grace: 90 * time.Second, Checks: 1, MaxAttempts: 3},
		}}},
		{"defaults for omitted fields, no default channel", `
channels:
  receipts_v2: {on_unknown: retry}
`, &policy.Policy{MsgIDDomain: "gmailrelay.local", VerifyHandle: policy.VerifyFirst, Channels: map[string]policy.Channel{
			"receipts_v2": {Name: "receipts_v2", OnUnknown: policy.Retry, Grace: 3 * time.Minute, Checks: 2, MaxAttempts: 3},
		}}},
		{"msgid_secret_file names the secret's file", `
msgid_secret_file: /etc/gmailrelay/msgid.secret
channels:
  default: {on_unknown: retry}
`, &policy.Policy{MsgIDDomain: "gmailrelay.local", MsgIDSecretFile: "/etc/gmailrelay/msgid.secret", VerifyHandle: policy.VerifyFirst, Channels: map[string]policy.Channel{
			"default": {Name: "default", OnUnknown: policy.Retry, Grace: 3 * time.Minute, Checks: 2, MaxAttempts: 3},
		}}},
		{"verify never, anchors and quoted duration", `
verify_handle: never
channels:
  a: &base {on_unknown: review, grace: "1h30m", checks: 4, max_attempts: 1}
  b-2: *base
`, &policy.Policy{MsgIDDomain: "gmailrelay.local", VerifyHandle: policy.VerifyNever, Channels: map[string]policy.Channel{
			"a":   {Name: "a", OnUnknown: policy.Review, Grace: 90 * time.Minute, Checks: 4, MaxAttempts: 1},
			"b-2": {Name: "b-2", OnUnknown: policy.Review, Grace: 90 * time.Minute, Checks: 4, MaxAttempts: 1},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		wantField string
		wantLine  int // 0: not checked
		wantMsg   string
	}{
		{"empty file", ``, "", 0, "empty"},
		{"only a comment", "# nothing\n", "", 0, "empty"},
		{"null document", "~\n", "", 0, "empty"},
		{"syntax error", "channels: [\n", "", 0, "invalid YAML"},
		{"two documents", "channels: {default: {on_unknown: retry}}\n---\nchannels: {}\n", "", 2, "more than one"},
		{"top level not a mapping", "- a\n- b\n", "", 1, "mapping"},
		{"unknown top-level key", "channels: {default: {on_unknown: retry}}\nmsgid_domian: x.com\n", "msgid_domian", 2, "unknown key"},
		{"blank msgid_secret_file", "msgid_secret_file: ' '\nchannels: {d: {on_unknown: retry}}\n", "msgid_secret_file", 1, "must name"},
		{"duplicate top-level key", "verify_handle: first\nverify_handle: never\nchannels: {d: {on_unknown: retry}}\n", "verify_handle", 2, "duplicate"},
		{"unknown channel key", "channels:\n  billing:\n    on_unknown: review\n    graze: 3m\n", "channels.billing.graze", 4, "unknown key"},
		{"duplicate channel", "channels:\n  a: {on_unknown: retry}\n  a: {on_unknown: review}\n", "channels.a", 3, "duplicate"},
		{"null channels", "channels:\n", "channels", 1, "at least one"},
		{"empty channels", "channels: {}\n", "channels", 1, "at least one"},
		{"channels is a list", "channels: [default]\n", "channels", 1, "mapping"},
		{"channel is a scalar", "channels:\n  default: retry\n", "channels.default", 2, "mapping"},
		{"channel is null", "channels:\n  default:\n", "channels.default", 2, "mapping"},
		{"bad channel name upper", "channels:\n  Billing: {on_unknown: review}\n", "channels.Billing", 2, "invalid channel name"},
		{"bad channel name dot", "channels:\n  a.b: {on_unknown: review}\n", "channels.a.b", 2, "invalid channel name"},
		{"empty channel name", "channels:\n  '': {on_unknown: review}\n", "channels.", 2, "empty"},
		{"channel key is a list", "channels:\n  [a]: {on_unknown: review}\n", "channels", 2, "plain names"},
		{"missing on_unknown", "channels:\n  default: {grace: 3m}\n", "channels.default.on_unknown", 2, "required"},
		{"unknown on_unknown", "channels:\n  default: {on_unknown: resend}\n", "channels.default.on_unknown", 2, "retry or review"},
		{"null on_unknown", "channels:\n  default: {on_unknown: }\n", "channels.default.on_unknown", 2, "empty"},
		{"on_unknown a list", "channels:\n  default: {on_unknown: [retry]}\n", "channels.default.on_unknown", 2, "single value"},
		{"grace zero", "channels:\n  default: {on_unknown: retry, grace: 0s}\n", "channels.default.grace", 2, "positive"},
		{"grace bare zero", "channels:\n  default: {on_unknown: retry, grace: 0}\n", "channels.default.grace", 2, "positive"},
		{"grace negative", "channels:\n  default: {on_unknown: retry, grace: -1m}\n", "channels.default.grace", 2, "positive"},
		{"grace without unit", "channels:\n  default: {on_unknown: retry, grace: 180}\n", "channels.default.grace", 2, "duration"},
		{"grace unparseable", "channels:\n  default: {on_unknown: retry, grace: three minutes}\n", "channels.default.grace", 2, "duration"},
		{"max_unwitnessed zero", "channels:\n  default: {on_unknown: retry, max_unwitnessed: 0s}\n", "channels.default.max_unwitnessed", 2, "positive"},
		{"max_unwitnessed unparseable", "channels:\n  default: {on_unknown: retry, max_unwitnessed: 1 hour}\n", "channels.default.max_unwitnessed", 2, "duration"},
		{"checks zero", "channels:\n  default: {on_unknown: retry, checks: 0}\n", "channels.default.checks", 2, "at least 1"},
		{"checks negative", "channels:\n  default: {on_unknown: review, checks: -2}\n", "channels.default.checks", 2, "at least 1"},
		{"checks quoted", "channels:\n  default: {on_unknown: retry, checks: \"2\"}\n", "channels.default.checks", 2, "whole number"},
		{"checks fractional", "channels:\n  default: {on_unknown: retry, checks: 1.5}\n", "channels.default.checks", 2, "whole number"},
		{"checks overflow", "channels:\n  default: {on_unknown: retry, checks: 99999999999999999999999}\n", "channels.default.checks", 2, "whole number"},
		{"max_attempts zero", "channels:\n  default: {on_unknown: retry, max_attempts: 0}\n", "channels.default.max_attempts", 2, "at least 1"},
		{"max_attempts word", "channels:\n  default: {on_unknown: retry, max_attempts: many}\n", "channels.default.max_attempts", 2, "whole number"},
		{"unknown verify_handle", "verify_handle: sometimes\nchannels: {d: {on_unknown: retry}}\n", "verify_handle", 1, "first, always or never"},
		{"msgid_domain with @", "msgid_domain: a@b.com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "invalid hostname"},
		{"msgid_domain with space", "msgid_domain: a b.com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "invalid hostname"},
		{"msgid_domain empty label", "msgid_domain: a..com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "empty label"},
		{"msgid_domain leading hyphen", "msgid_domain: -a.com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "hyphen"},
		{"msgid_domain empty string", "msgid_domain: ''\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "empty"},
		{"msgid_domain null", "msgid_domain:\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "empty"},
		{"msgid_domain too long", "msgid_domain: " + strings.Repeat("a.", 130) + "com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "253"},
		{"msgid_domain long label", "msgid_domain: " + strings.Repeat("a", 64) + ".com\nchannels: {d: {on_unknown: retry}}\n", "msgid_domain", 1, "63"},
		{"history_settle below 1s", "channels:\n  default: {on_unknown: retry, history_settle: 500ms}\n", "channels.default.history_settle", 2, "at least 1s"},
		{"history_settle unparseable", "channels:\n  default: {on_unknown: retry, history_settle: 1 minute}\n", "channels.default.history_settle", 2, "duration"},
		{"unknown witness", "channels:\n  default: {on_unknown: retry, witness: mailbox}\n", "channels.default.witness", 2, "search or history"},
		{"limit_bounce_window zero", "limit_bounce_window: 0s\nchannels: {d: {on_unknown: retry}}\n", "limit_bounce_window", 1, "positive"},
		{"merge key is not supported", "channels:\n  b: {<<: {on_unknown: retry}}\n", "channels.b.<<", 2, "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.yaml))
			var fe *policy.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v (%T), policy %+v; want *FieldError", err, err, p)
			}
			if got := fe.Field; got != tt.wantField {
				t.Errorf("field: got %q, want %q (%v)", got, tt.wantField, err)
			}
			if tt.wantLine != 0 && fe.Line != tt.wantLine {
				t.Errorf("line: got %d, want %d (%v)", fe.Line, tt.wantLine, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message: got %q, want it to contain %q", err.Error(), tt.wantMsg)
			}
			if p != nil {
				t.Errorf("got policy %+v with an error", p)
			}
		})
	}
}

func TestSyntaxErrorKeepsLine(t *testing.T) {
	_, err := policy.Parse([]byte("channels:\n  default: {on_unknown: retry}\n  billing: x: y\n"))
	var fe *policy.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want *FieldError", err)
	}
	if fe.Line != 3 || !strings.HasPrefix(err.Error(), "line 3: invalid YAML: ") {
		t.Errorf("got line %d, %q; want line 3 and the message once", fe.Line, err)
	}
}

func TestValidate(t *testing.T) {
	good := func() *policy.Policy {
		p := policy.Default()
		p.Channels["billing"] = policy.Channel{Name: "billing", OnUnknown: policy.Review, Grace: time.Minute, Checks: 1, MaxAttempts: 1}
		return p
	}
	tests := []struct {
		name      string
		edit      func(p *policy.Policy)
		wantField string
	}{
		{"valid", func(*policy.Policy) {}, ""},
		{"bad domain", func(p *policy.Policy) { p.MsgIDDomain = "exa mple.com" }, "msgid_domain"},
		{"empty domain", func(p *policy.Policy) { p.MsgIDDomain = "" }, "msgid_domain"},
		{"bad verify", func(p *policy.Policy) { p.VerifyHandle = "" }, "verify_handle"},
		{"no channels", func(p *policy.Policy) { p.Channels = nil }, "channels"},
		{"bad name", func(p *policy.Policy) {
			p.Channels["Bad"] = policy.Channel{Name: "Bad", OnUnknown: policy.Retry, Grace: 1, Checks: 1, MaxAttempts: 1}
		}, "channels.Bad"},
		{"name differs from key", func(p *policy.Policy) { c := p.Channels["billing"]; c.Name = "money"; p.Channels["billing"] = c }, "channels.billing"},
		{"bad on_unknown", func(p *policy.Policy) { c := p.Channels["billing"]; c.OnUnknown = "maybe"; p.Channels["billing"] = c }, "channels.billing.on_unknown"},
		{"zero grace", func(p *policy.Policy) { c := p.Channels["billing"]; c.Grace = 0; p.Channels["billing"] = c }, "channels.billing.grace"},
		{"zero checks", func(p *policy.Policy) { c := p.Channels["default"]; c.Checks = 0; p.Channels["default"] = c }, "channels.default.checks"},
		{"zero max_attempts", func(p *policy.Policy) { c := p.Channels["default"]; c.MaxAttempts = 0; p.Channels["default"] = c }, "channels.default.max_attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.edit(p)
			err := p.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var fe *policy.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want *FieldError", err)
			}
			if fe.Field != tt.wantField {
				t.Errorf("field: got %q, want %q (%v)", fe.Field, tt.wantField, err)
			}
		})
	}
}

func TestChannel(t *testing.T) {
	p, err := policy.Parse([]byte("channels:\n  billing: {on_unknown: review}\n  receipts: {on_unknown: retry}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Channel("billing")
	if err != nil || got.Name != "billing" || got.OnUnknown != policy.Review {
		t.Errorf("Channel(billing): got %+v, %v", got, err)
	}
	tests := []struct {
		name    string
		wantMsg string
	}{
		{"x", `unknown channel "x" (known: billing, receipts)`},
		{"", `unknown channel "default" (known: billing, receipts)`}, // no default channel in this file
	}
	for _, tt := range tests {
		_, err := p.Channel(tt.name)
		var fe *policy.FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("Channel(%q): got %v, want *FieldError", tt.name, err)
		}
		if fe.Field != "channel" || fe.Message != tt.wantMsg {
			t.Errorf("Channel(%q): got %q %q, want channel %q", tt.name, fe.Field, fe.Message, tt.wantMsg)
		}
	}

	d := policy.Default()
	if got, err := d.Channel(""); err != nil || got.Name != "default" {
		t.Errorf("Default().Channel(\"\"): got %+v, %v; want the default channel", got, err)
	}
}

func TestFieldErrorString(t *testing.T) {
	tests := []struct {
		err  policy.FieldError
		want string
	}{
		{policy.FieldError{Field: "channels.a.grace", Message: "must be positive", Line: 7}, "line 7: channels.a.grace: must be positive"},
		{policy.FieldError{Field: "channels", Message: "required"}, "channels: required"},
		{policy.FieldError{Message: "empty policy file"}, "empty policy file"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestLoadErrorsStartWithPath(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("channels:\n  default: {on_unknown: retry, grace: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Fatalf("got %v, want an error starting with %q", err, bad)
	}
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "channels.default.grace" {
		t.Errorf("got %v, want it to wrap a *FieldError on channels.default.grace", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = policy.Load(missing)
	if err == nil || !strings.HasPrefix(err.Error(), missing+": ") {
		t.Fatalf("got %v, want an error starting with %q", err, missing)
	}
	if strings.Count(err.Error(), missing) != 1 {
		t.Errorf("path repeated in %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want it to match fs.ErrNotExist", err)
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		"channels:\n  default: {on_unknown: retry, grace: 3m, checks: 2, max_attempts: 3}\n",
		"msgid_domain: a.b\nverify_handle: never\nchannels: {x: {on_unknown: review}}\n",
		"channels:\n  a: &x {on_unknown: retry}\n  b: *x\n",
		"channels: {a: {on_unknown: retry, grace: 0}}\n",
		"channels:\n  a: {<<: *x}\n",
		"--- \n...\n", "[", "~", "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			var fe *policy.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is %T, want *FieldError", err, err)
			}
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted policy fails Validate: %v", err)
		}
		for _, name := range p.Names() {
			if c, err := p.Channel(name); err != nil || c.Name != name {
				t.Fatalf("Channel(%q): %+v, %v", name, c, err)
			}
		}
	})
}

func TestMaxUnwitnessed(t *testing.T) {
	p, err := policy.Parse([]byte("channels:\n  a: {on_unknown: retry, max_unwitnessed: 20m}\n  b: {on_unknown: review}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Channels["a"].Unwitnessed(); got != 20*time.Minute {
		t.Errorf("a: max_unwitnessed %s, want 20m", got)
	}
	if got := p.Channels["b"].Unwitnessed(); got != time.Hour {
		t.Errorf("b: max_unwitnessed %s, want the default 1h", got)
	}
}

// history_settle and witness per channel, limit_bounce_window for the
// policy: set values are kept, unset ones read as the defaults.
func TestHistorySettleWitnessAndBounceWindow(t *testing.T) {
	p, err := policy.Parse([]byte("limit_bounce_window: 2h\nchannels:\n  a: {on_unknown: retry, history_settle: 5s, witness: history}\n  b: {on_unknown: review}\n  c: {on_unknown: retry, witness: search}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := p.Channels["a"], p.Channels["b"], p.Channels["c"]
	if a.Settle() != 5*time.Second || !a.ResendOnHistory() {
		t.Errorf("a: settle %s, resend on history %v; want 5s, true", a.Settle(), a.ResendOnHistory())
	}
	if b.Settle() != policy.DefaultHistorySettle || b.ResendOnHistory() || c.ResendOnHistory() {
		t.Errorf("b: settle %s, resend on history %v, c %v; want %s, false, false", b.Settle(), b.ResendOnHistory(), c.ResendOnHistory(), policy.DefaultHistorySettle)
	}
	if p.BounceWindow() != 2*time.Hour || policy.Default().BounceWindow() != time.Hour {
		t.Errorf("bounce window %s, default %s; want 2h, 1h", p.BounceWindow(), policy.Default().BounceWindow())
	}
}
