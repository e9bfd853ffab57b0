package gmailfake

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The subset of Gmail's search language the relay needs:
//
//	query   = and
//	and     = or { or }                   (implicit AND between terms)
//	or      = primary { "OR" primary }
//	primary = term | "{" primary { primary } "}" | "(" and ")"
//	term    = "rfc822msgid:" value | "in:" name | "label:" name
//	        | ("after:" | "before:") (epoch-seconds | YYYY/MM/DD)
//	        | "from:" value
//
// A brace group matches when any of its members matches (Gmail's shorthand
// for OR). Operators are case-insensitive, OR must be upper case (as in
// Gmail). A value may be wrapped in angle brackets or double quotes.
// after:T matches internalDate >= T and before:T internalDate < T (a date
// is midnight UTC; Gmail reads dates in the account's time zone and
// recommends epoch seconds for exact instants), so after: and before: of
// one instant split the mailbox in two. from:V matches a message whose
// From field (decoded) contains V, case-insensitively, so an address, a
// domain or a word of the name finds it. newer: and older: are Gmail's
// synonyms. Anything else is a parse error, which messages.list answers,
// like Gmail, with an empty list (400 with Options.StrictQueries).

const (
	maxQueryLen   = 8192
	maxQueryDepth = 32
)

// queryNode is a parsed query: it says whether a stored message matches.
type queryNode interface {
	match(m *stored) bool
}

type matchAll struct{}

func (matchAll) match(*stored) bool { return true }

type msgIDTerm struct{ id string } // normalised: no angle brackets

func (t msgIDTerm) match(m *stored) bool { return m.msgIDKey == t.id }

type labelTerm struct{ label string } // upper case

func (t labelTerm) match(m *stored) bool {
	if t.label == "ANYWHERE" {
		return true
	}
	for _, l := range m.LabelIDs {
		if strings.EqualFold(l, t.label) {
			return true
		}
	}
	return false
}

// dateTerm matches messages dated at or after (after true) or before an
// instant, in milliseconds since the epoch.
type dateTerm struct {
	after bool
	ms    int64
}

func (t dateTerm) match(m *stored) bool {
	if t.after {
		return m.StoredAt.UnixMilli() >= t.ms
	}
	return m.StoredAt.UnixMilli() < t.ms
}

type fromTerm struct{ v string } // lower case

func (t fromTerm) match(m *stored) bool { return strings.Contains(m.from, t.v) }

type andNode []queryNode

func (n andNode) match(m *stored) bool {
	for _, c := range n {
		if !c.match(m) {
			return false
		}
	}
	return true
}

type orNode []queryNode

func (n orNode) match(m *stored) bool {
	for _, c := range n {
		if c.match(m) {
			return true
		}
	}
	return false
}

var errQuery = errors.New("invalid query")

// parseQuery parses q. An empty or blank q matches every message.
func parseQuery(q string) (queryNode, error) {
	if len(q) > maxQueryLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", errQuery, maxQueryLen)
	}
	toks, err := tokenize(q)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return matchAll{}, nil
	}
	p := &queryParser{toks: toks}
	n, err := p.parseAnd(0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("%w: unexpected %q", errQuery, p.toks[p.pos].text)
	}
	return n, nil
}

type tokKind int

const (
	tokWord tokKind = iota
	tokOR
	tokLBrace
	tokRBrace
	tokLParen
	tokRParen
)

type token struct {
	kind tokKind
	text string
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// punctuation maps the characters that are tokens on their own to their
// kinds; they also end a word.
var punctuation = map[byte]tokKind{'{': tokLBrace, '}': tokRBrace, '(': tokLParen, ')': tokRParen}

func isPunctuation(c byte) bool {
	_, ok := punctuation[c]
	return ok
}

func tokenize(q string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(q) {
		c := q[i]
		kind, isPunct := punctuation[c]
		switch {
		case isSpace(c):
			i++
		case isPunct:
			toks = append(toks, token{kind, q[i : i+1]})
			i++
		default:
			start := i
			for i < len(q) && !isSpace(q[i]) && !isPunctuation(q[i]) {
				switch q[i] {
				case '<': // a bracketed value runs to its closing bracket
					end := strings.IndexByte(q[i:], '>')
					if end < 0 {
						return nil, fmt.Errorf("%w: unclosed <", errQuery)
					}
					i += end + 1
				case '"':
					end := strings.IndexByte(q[i+1:], '"')
					if end < 0 {
						return nil, fmt.Errorf("%w: unclosed quote", errQuery)
					}
					i += end + 2
				default:
					i++
				}
			}
			w := q[start:i]
			if w == "OR" {
				toks = append(toks, token{tokOR, w})
			} else {
				toks = append(toks, token{tokWord, w})
			}
		}
	}
	return toks, nil
}

type queryParser struct {
	toks []token
	pos  int
}

func (p *queryParser) peek() (token, bool) {
	if p.pos >= len(p.toks) {
		return token{}, false
	}
	return p.toks[p.pos], true
}

// parseAnd reads terms until the end of input or a closing bracket.
func (p *queryParser) parseAnd(depth int) (queryNode, error) {
	var terms andNode
	for {
		t, ok := p.peek()
		if !ok || t.kind == tokRParen || t.kind == tokRBrace {
			break
		}
		n, err := p.parseOr(depth)
		if err != nil {
			return nil, err
		}
		terms = append(terms, n)
	}
	switch len(terms) {
	case 0:
		return nil, fmt.Errorf("%w: empty expression", errQuery)
	case 1:
		return terms[0], nil
	}
	return terms, nil
}

func (p *queryParser) parseOr(depth int) (queryNode, error) {
	first, err := p.parsePrimary(depth)
	if err != nil {
		return nil, err
	}
	alts := orNode{first}
	for {
		t, ok := p.peek()
		if !ok || t.kind != tokOR {
			break
		}
		p.pos++
		n, err := p.parsePrimary(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return first, nil
	}
	return alts, nil
}

func (p *queryParser) parsePrimary(depth int) (queryNode, error) {
	if depth > maxQueryDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errQuery, maxQueryDepth)
	}
	t, ok := p.peek()
	if !ok {
		return nil, fmt.Errorf("%w: expression expected at end", errQuery)
	}
	p.pos++
	switch t.kind {
	case tokWord:
		return parseTerm(t.text)
	case tokLParen:
		n, err := p.parseAnd(depth + 1)
		if err != nil {
			return nil, err
		}
		if c, ok := p.peek(); !ok || c.kind != tokRParen {
			return nil, fmt.Errorf("%w: ( without )", errQuery)
		}
		p.pos++
		return n, nil
	case tokLBrace:
		var alts orNode
		for {
			c, ok := p.peek()
			if !ok {
				return nil, fmt.Errorf("%w: { without }", errQuery)
			}
			if c.kind == tokRBrace {
				p.pos++
				break
			}
			n, err := p.parseOr(depth + 1)
			if err != nil {
				return nil, err
			}
			alts = append(alts, n)
		}
		if len(alts) == 0 {
			return nil, fmt.Errorf("%w: empty {}", errQuery)
		}
		if len(alts) == 1 {
			return alts[0], nil
		}
		return alts, nil
	}
	return nil, fmt.Errorf("%w: unexpected %q", errQuery, t.text)
}

func parseTerm(w string) (queryNode, error) {
	op, val, ok := strings.Cut(w, ":")
	if !ok {
		return nil, fmt.Errorf("%w: free-text search %q is not supported by the emulator", errQuery, w)
	}
	if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
		val = val[1 : len(val)-1]
	}
	switch strings.ToLower(op) {
	case "rfc822msgid":
		id := normalizeMsgID(val)
		if id == "" || strings.ContainsAny(id, " \t\r\n<>") {
			return nil, fmt.Errorf("%w: bad rfc822msgid value %q", errQuery, val)
		}
		return msgIDTerm{id: id}, nil
	case "in", "label":
		if val == "" || strings.ContainsAny(val, "<>\"") {
			return nil, fmt.Errorf("%w: bad %s value %q", errQuery, op, val)
		}
		return labelTerm{label: strings.ToUpper(val)}, nil
	case "from":
		if val == "" || strings.ContainsAny(val, "\"") {
			return nil, fmt.Errorf("%w: bad from value %q", errQuery, val)
		}
		return fromTerm{v: strings.ToLower(val)}, nil
	case "after", "newer", "before", "older":
		ms, err := parseDateValue(val)
		if err != nil {
			return nil, fmt.Errorf("%w: bad %s value %q: %v", errQuery, op, val, err)
		}
		after := strings.EqualFold(op, "after") || strings.EqualFold(op, "newer")
		return dateTerm{after: after, ms: ms}, nil
	}
	return nil, fmt.Errorf("%w: operator %q is not supported by the emulator", errQuery, op)
}

// parseDateValue reads epoch seconds or YYYY/MM/DD (midnight UTC) and
// returns milliseconds since the epoch.
func parseDateValue(v string) (int64, error) {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > math.MaxInt64/1000 {
			return 0, errors.New("epoch seconds out of range")
		}
		return n * 1000, nil
	}
	t, err := time.Parse("2006/1/2", v)
	if err != nil {
		return 0, errors.New("want epoch seconds or YYYY/MM/DD")
	}
	return t.UnixMilli(), nil
}

// normalizeMsgID strips surrounding blanks and one pair of angle brackets.
func normalizeMsgID(id string) string {
	id = strings.TrimSpace(id)
	if strings.HasPrefix(id, "<") && strings.HasSuffix(id, ">") && len(id) >= 2 {
		id = strings.TrimSpace(id[1 : len(id)-1])
	}
	return id
}
