package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Parse parses and validates a policy file (YAML, docs/policy.md). Every error is a *FieldError naming the field by its dotted path,
// with the line it is on.
//
// Rules: unknown keys are errors at every level, as are duplicate keys;
// msgid_domain defaults to DefaultMsgIDDomain and verify_handle to "first";
// channels is required and must not be empty; in each channel on_unknown is
// required (no silent choice between resending and review), and grace
// (default 3m, a Go duration string such as "90s" or "3m", at least 1s), checks
// (default 2, >= 1) and max_attempts (default 3, >= 1) may be omitted.
// A policy without a "default" channel is valid: every send must then name
// its channel. Only one YAML document is allowed.
//
// The file is walked as a yaml.Node tree rather than decoded into structs
// with KnownFields(true), because the decoder's unknown-field error names a
// Go type, not the path of the offending key in the file.
func Parse(data []byte) (*Policy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, emptyFile()
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, &FieldError{Line: extra.Line, Message: "more than one YAML document; want one"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, emptyFile()
	}
	root := resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, emptyFile()
	}

	p := &Policy{MsgIDDomain: DefaultMsgIDDomain, VerifyHandle: VerifyFirst}
	entries, err := mapping(root, "")
	if err != nil {
		return nil, err
	}
	err = parseFields(entries, fieldParsers{
		"msgid_domain":        into(&p.MsgIDDomain, checked(checkDomain)),
		"msgid_secret_file":   into(&p.MsgIDSecretFile, checked(checkSecretPath)),
		"verify_handle":       into(&p.VerifyHandle, enum[Verify](verifyMessage)),
		"retention":           into(&p.Retention, retention),
		"mailboxes":           into(&p.Mailboxes, ofNode(mailboxes)),
		"channels":            into(&p.Channels, ofNode(channels)),
		"limit_bounce_window": into(&p.LimitBounceWindow, positiveDuration("30m or 2h")),
	})
	if err != nil {
		return nil, err
	}
	// channels refuses an empty or null mapping, so nil means the key is
	// missing: a file that names only mailboxes or a retention (the
	// mailboxes snippet of docs/gmail-setup.md is such a file) keeps the
	// default channel.
	if p.Channels == nil {
		p.Channels, p.BuiltInChannels = Default().Channels, true
	}
	// Parse applied every rule already; Validate guards against the two
	// drifting apart.
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func emptyFile() *FieldError {
	return &FieldError{Message: "empty policy file; want channels, mailboxes or another key (see the example policy)"}
}

// yamlError turns a YAML syntax error into a *FieldError, keeping the line
// number yaml.v3 puts in its message.
func yamlError(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	fe := &FieldError{Message: "invalid YAML: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if v, err := strconv.Atoi(num); err == nil && v > 0 {
				fe.Line = v
				fe.Message = "invalid YAML: " + tail
			}
		}
	}
	return fe
}

// entry is one key of a YAML mapping.
type entry struct {
	name  string
	path  string // dotted path of the key in the file
	key   *yaml.Node
	value *yaml.Node
}

// resolve follows aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// mapping returns the entries of n, which must be a mapping with scalar,
// unique keys. prefix is the path of n ("" at the top).
func mapping(n *yaml.Node, prefix string) ([]entry, error) {
	n = resolve(n)
	field := strings.TrimSuffix(prefix, ".")
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, &FieldError{Field: field, Line: line(n), Message: "must be a mapping of keys to values"}
	}
	seen := make(map[string]int, len(n.Content)/2)
	out := make([]entry, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			return nil, &FieldError{Field: field, Line: line(k), Message: "keys must be plain names"}
		}
		path := prefix + k.Value
		if first, dup := seen[k.Value]; dup {
			return nil, &FieldError{Field: path, Line: k.Line, Message: fmt.Sprintf("duplicate key (first on line %d)", first)}
		}
		seen[k.Value] = k.Line
		out = append(out, entry{name: k.Value, path: path, key: k, value: v})
	}
	return out, nil
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

func unknownKey(e entry) *FieldError {
	return &FieldError{Field: e.path, Line: e.key.Line, Message: "unknown key"}
}

// str returns the value of a non-null scalar.
func str(n *yaml.Node, path string) (string, error) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", &FieldError{Field: path, Line: line(n), Message: "must be a single value"}
	}
	if n.Tag == "!!null" {
		return "", &FieldError{Field: path, Line: n.Line, Message: "must not be empty"}
	}
	return n.Value, nil
}

// integer returns the value of an integer scalar (not a quoted string).
func integer(n *yaml.Node, path string) (int, error) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		v := ""
		if n != nil {
			v = n.Value
		}
		return 0, &FieldError{Field: path, Line: line(n), Message: fmt.Sprintf("must be a whole number, got %q", v)}
	}
	var i int
	if err := n.Decode(&i); err != nil {
		return 0, &FieldError{Field: path, Line: n.Line, Message: fmt.Sprintf("must be a whole number, got %q", n.Value)}
	}
	return i, nil
}

// channels parses the channels mapping.
func channels(n *yaml.Node, path string) (map[string]Channel, error) {
	if r := resolve(n); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!null" {
		return nil, &FieldError{Field: path, Line: r.Line, Message: "at least one channel is required"}
	}
	entries, err := mapping(n, path+".")
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, &FieldError{Field: path, Line: line(resolve(n)), Message: "at least one channel is required"}
	}
	out := make(map[string]Channel, len(entries))
	for _, e := range entries {
		if msg := checkChannelName(e.name); msg != "" {
			return nil, &FieldError{Field: e.path, Line: e.key.Line, Message: msg}
		}
		c, err := channel(e)
		if err != nil {
			return nil, err
		}
		out[e.name] = c
	}
	return out, nil
}

// channel parses one channel's mapping, applying the defaults.
func channel(ch entry) (Channel, error) {
	c := Channel{Name: ch.name, Grace: DefaultGrace, Checks: DefaultChecks, MaxAttempts: DefaultMaxAttempts}
	entries, err := mapping(ch.value, ch.path+".")
	if err != nil {
		return c, err
	}
	err = parseFields(entries, fieldParsers{
		"on_unknown":      into(&c.OnUnknown, enum[OnUnknown](onUnknownMessage)),
		"grace":           into(&c.Grace, grace),
		"max_unwitnessed": into(&c.MaxUnwitnessed, positiveDuration("30m or 1h")),
		"checks":          into(&c.Checks, atLeastOne),
		"max_attempts":    into(&c.MaxAttempts, atLeastOne),
		"history_settle":  into(&c.HistorySettle, settle),
		"witness":         into(&c.Witness, enum[Witness](witnessMessage)),
	})
	if err != nil {
		return c, err
	}
	if c.OnUnknown == "" {
		return c, &FieldError{Field: ch.path + ".on_unknown", Line: line(resolve(ch.value)), Message: "required: retry or review"}
	}
	return c, nil
}

// fieldParsers maps each key a mapping may hold to what reads its value.
type fieldParsers map[string]func(e entry) error

// parseFields hands each entry to the parser of its key, in file order; a
// key without a parser is an unknown key. The first error stops it.
func parseFields(entries []entry, parsers fieldParsers) error {
	for _, e := range entries {
		parse, ok := parsers[e.name]
		if !ok {
			return unknownKey(e)
		}
		if err := parse(e); err != nil {
			return err
		}
	}
	return nil
}

// into returns a parser that stores what read makes of the value in *dst
// (and leaves *dst alone when read refuses it).
func into[T any](dst *T, read func(entry) (T, error)) func(entry) error {
	return func(e entry) error {
		v, err := read(e)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
}

// ofNode adapts a reader of a node and its dotted path to an entry reader.
func ofNode[T any](read func(n *yaml.Node, path string) (T, error)) func(entry) (T, error) {
	return func(e entry) (T, error) { return read(e.value, e.path) }
}

// checked returns a reader of a string value that refuses it with check's
// message when check returns one ("" means the value is good).
func checked(check func(string) string) func(entry) (string, error) {
	return func(e entry) (string, error) {
		s, err := str(e.value, e.path)
		if err != nil {
			return "", err
		}
		if msg := check(s); msg != "" {
			return "", &FieldError{Field: e.path, Line: e.value.Line, Message: msg}
		}
		return s, nil
	}
}

// enum returns a reader of a value of the string type T that refuses one
// T's Valid method does not know, with bad's message.
func enum[T interface {
	~string
	Valid() bool
}](bad func(string) string) func(entry) (T, error) {
	valid := checked(func(s string) string {
		if T(s).Valid() {
			return ""
		}
		return bad(s)
	})
	return func(e entry) (T, error) {
		s, err := valid(e)
		return T(s), err
	}
}

// verifyMessage says why v is not a verify_handle value.
func verifyMessage(v string) string {
	return fmt.Sprintf("unknown value %q; want first, always or never", v)
}

// retention reads the top-level retention period (see ParseRetention).
func retention(e entry) (time.Duration, error) {
	s, err := str(e.value, e.path)
	if err != nil {
		return 0, err
	}
	d, err := ParseRetention(s)
	if err != nil {
		return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: err.Error()}
	}
	return d, nil
}

// witnessMessage says why w is not a witness value.
func witnessMessage(w string) string {
	return fmt.Sprintf("unknown value %q; want search or history", w)
}

// settle reads a channel's history_settle: a duration of at least
// MinGrace.
func settle(e entry) (time.Duration, error) {
	d, err := positiveDuration("30s or 2m")(e)
	if err != nil {
		return 0, err
	}
	if d < MinGrace {
		return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("must be at least %s, got %s", MinGrace, e.value.Value)}
	}
	return d, nil
}

// grace reads a channel's grace: a positive duration of at least MinGrace.
func grace(e entry) (time.Duration, error) {
	d, err := positiveDuration("90s or 3m")(e)
	if err != nil {
		return 0, err
	}
	if d < MinGrace {
		return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("must be at least %s (Gmail's index needs time), got %s", MinGrace, e.value.Value)}
	}
	return d, nil
}

// positiveDuration returns a reader of a Go duration above zero; examples
// go in the message of a value that is not one.
func positiveDuration(examples string) func(entry) (time.Duration, error) {
	return func(e entry) (time.Duration, error) {
		s, err := str(e.value, e.path)
		if err != nil {
			return 0, err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("not a Go duration such as %s: %q", examples, s)}
		}
		if d <= 0 {
			return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("must be positive, got %s", s)}
		}
		return d, nil
	}
}

// atLeastOne reads a whole number of at least 1.
func atLeastOne(e entry) (int, error) {
	i, err := integer(e.value, e.path)
	if err != nil {
		return 0, err
	}
	if i < 1 {
		return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("must be at least 1, got %d", i)}
	}
	return i, nil
}

// between reads a whole number from lo to hi.
func between(lo, hi int) func(entry) (int, error) {
	return func(e entry) (int, error) {
		i, err := integer(e.value, e.path)
		if err != nil {
			return 0, err
		}
		if i < lo || i > hi {
			return 0, &FieldError{Field: e.path, Line: e.value.Line, Message: fmt.Sprintf("must be from %d to %d, got %d", lo, hi, i)}
		}
		return i, nil
	}
}

// ParseRetention reads a retention period: a number of days ("90d") or a Go
// duration ("2160h"), at least MinRetention.
func ParseRetention(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100*365 {
			return 0, fmt.Errorf("%q: too many days", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("not a number of days such as 90d or a Go duration such as 2160h: %q", s)
		}
	}
	if d < MinRetention {
		return 0, fmt.Errorf("must be at least %s, got %s", MinRetention, s)
	}
	return d, nil
}
