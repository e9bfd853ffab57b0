package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/relay"
)

// identity is the identity serve derives its Message-IDs with, which the
// log must have (gmailrelay.Identity): the Message-ID domain and the
// fingerprint of the Message-ID secret, if there is one.
func (c serveConfig) identity() gmailrelay.Identity {
	id := gmailrelay.Identity{MsgIDDomain: c.policy.MsgIDDomain}
	if c.msgidSecret != nil {
		id.SecretFingerprint = gmailrelay.SecretFingerprint(c.msgidSecret)
	}
	return id
}

// rekeyCommand is the gmailrelay rekey command line that records c's
// identity in c's log (the database URL without its password).
func (c serveConfig) rekeyCommand() string {
	where := "--data " + shellQuote(c.Data)
	if c.Database != "" {
		u, err := url.Parse(c.Database)
		where = "--database " + shellQuote("postgres://…")
		if err == nil {
			where = "--database " + shellQuote(u.Redacted())
		}
	}
	cmd := "gmailrelay rekey " + where + " --msgid-domain " + c.identity().MsgIDDomain
	if c.msgidSecret != nil {
		cmd += " --msgid-secret-file " + shellQuote(c.MsgIDSecretFile)
	}
	return cmd
}

// shellQuote quotes s for a shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_./:@=%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// minSecretBytes is the shortest Message-ID secret accepted: 128 bits
// when its bytes are random (openssl rand -hex 16 writes 32).
const minSecretBytes = 16

// readSecretFile reads a Message-ID secret: the file's bytes without one
// trailing newline (LF or CRLF). A missing or unreadable file, an empty
// one and one shorter than minSecretBytes are errors naming the file.
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("%s is empty", path)
	case len(b) < minSecretBytes:
		return nil, fmt.Errorf("%s holds %d bytes; a Message-ID secret needs at least %d", path, len(b), minSecretBytes)
	}
	return b, nil
}

// runRekey records a new identity (Message-ID domain, secret fingerprint)
// in a stopped relay's log, a bbolt file (--data) or a PostgreSQL log
// (--database): jobs of the earlier identity keep their Message-IDs and
// are replayed by key, so no key is sent twice because the configuration
// changed. Exit 0 after printing what changed (or that nothing did), 2
// for bad flags (a bad domain, an unreadable or too short secret), 1 when
// the log cannot be rekeyed: missing or not a log (never created), or in
// use by a running relay.
func runRekey(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rekey", stderr, "gmailrelay rekey (--data FILE | --database URL) --msgid-domain NEW [--msgid-secret-file F]",
		"Records a new Message-ID identity in a stopped relay's log, on purpose: a relay configured",
		"otherwise refuses to start. Jobs created before keep their Message-IDs and replay by key.",
		"Without --msgid-secret-file the new identity has no Message-ID secret.")
	data := fs.String("data", "", "the acceptance log file (no relay may have it open)")
	database := fs.String("database", "", "or: the postgres://… URL of a log in PostgreSQL (every replica stopped)")
	domain := fs.String("msgid-domain", "", "the new Message-ID domain")
	secretFile := fs.String("msgid-secret-file", "", "the new Message-ID secret's file (its fingerprint is recorded, never the secret)")
	fail := failer(stderr, "rekey")
	if code, ok := parseNoArgs(fs, args, fail); !ok {
		return code
	}
	if (*data == "") == (*database == "") {
		return fail(2, "give exactly one of --data FILE and --database URL")
	}
	if *domain == "" {
		return fail(2, "--msgid-domain is required")
	}
	if err := relay.ValidDomain(*domain); err != nil {
		return fail(2, "--msgid-domain: %v", err)
	}
	next := gmailrelay.Identity{MsgIDDomain: *domain}
	if *secretFile != "" {
		secret, err := readSecretFile(*secretFile)
		if err != nil {
			return fail(2, "--msgid-secret-file: %v", err)
		}
		next.SecretFingerprint = gmailrelay.SecretFingerprint(secret)
	}
	var (
		before  *gmailrelay.IdentityRecord
		changed bool
		err     error
		name    = *data
	)
	now := time.Now()
	if *database != "" {
		name = "database"
		if u, perr := url.Parse(*database); perr == nil {
			name = u.Redacted()
		}
		before, _, changed, err = pglog.Rekey(ctx, *database, next, now)
	} else {
		before, _, changed, err = acceptlog.Rekey(*data, next, now)
	}
	if errors.Is(err, gmailrelay.ErrLocked) {
		return fail(1, "%v: a relay is running on this log; stop it (every replica), then rekey", err)
	}
	if err != nil {
		return fail(1, "%v", err)
	}
	switch {
	case !changed:
		fmt.Fprintf(stdout, "rekey: %s: the log's identity already is %s; nothing changed\n", name, next)
	case before == nil:
		fmt.Fprintf(stdout, "rekey: %s: the log had no identity; it now has %s\n", name, next)
	default:
		fmt.Fprintf(stdout, "rekey: %s: %s → %s; jobs created before keep their Message-IDs and replay by key\n",
			name, before.Identity, next)
	}
	return 0
}
