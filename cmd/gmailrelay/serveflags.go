package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// serveConfig is everything `gmailrelay serve` is configured with.
type serveConfig struct {
	Addr             string
	Data             string
	Database         string
	GmailEndpoint    string
	Credentials      string
	Subject          string
	Mailbox          string
	PolicyPath       string
	MsgIDDomain      string
	MsgIDSecretFile  string
	APIToken         string
	AdminToken       string
	Sandbox          bool
	AllowCrashFaults bool
	MaxInflightBytes int64
	MinBodyRate      int64
	FaultHeader      bool
	FaultSeed        int64
	LogLevel         string
	LogFormat        string
	QuotaPerMinute   int
	SweepInterval    time.Duration
	// History turns the sweeper's history tail on (--history, default
	// true): each mailbox's SENT history read as a second witness.
	History     bool
	SendTimeout time.Duration
	Clock       string
	ClockStart  string

	policy *policy.Policy
	// msgidSecret is the Message-ID secret read from MsgIDSecretFile (or
	// the policy's msgid_secret_file) by validate, once; nil for none.
	msgidSecret []byte
	// gmail holds the Gmail client of each mailbox that has credentials,
	// built by validate (which reads and parses each credentials file
	// there, once); nil in sandbox mode. buildMailboxes uses them.
	gmail map[string]*gmailapi.Client
	// storedToken: Credentials is the token `gmailrelay auth` stored, not
	// a --credentials the user gave (errors name it so).
	storedToken bool
	// In-process users (demo, selftest) may pass these.
	clock      *testclock.Clock   // the manual clock to use (with Clock "manual")
	emulator   *gmailfake.Server  // the sandbox emulator to reuse across restarts
	crashPoint func(point string) // CrashPoint hook
	// logWatchInterval is the LogWatch's (0: its default).
	logWatchInterval time.Duration
}

// parseServeFlags reads defaults, then the policy file, then GMAILRELAY_*
// environment variables, then flags (flags win), and validates.
func parseServeFlags(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("gmailrelay serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&c.Data, "data", "gmailrelay.db", "acceptance log file (bbolt)")
	fs.StringVar(&c.Database, "database", "", "postgres://… URL: keep the acceptance log in PostgreSQL (shared by several relays) instead of --data")
	fs.StringVar(&c.GmailEndpoint, "gmail-endpoint", "", "base URL of a Gmail-compatible API (default: Google's)")
	fs.StringVar(&c.Credentials, "credentials", "", "Google credentials JSON (authorized user or service account)")
	fs.StringVar(&c.Subject, "subject", "", "user a service account acts for (domain-wide delegation)")
	fs.StringVar(&c.Mailbox, "mailbox", "me", "Gmail userId to send as")
	fs.StringVar(&c.PolicyPath, "policy", "", "channel policy file (YAML)")
	fs.StringVar(&c.MsgIDDomain, "msgid-domain", "", "domain part of derived Message-IDs (overrides the policy's msgid_domain)")
	fs.StringVar(&c.MsgIDSecretFile, "msgid-secret-file", "", "file holding the Message-ID secret: Message-IDs become HMAC-SHA256(secret, key), which nobody without it can predict (overrides the policy's msgid_secret_file)")
	fs.StringVar(&c.APIToken, "api-token", "", "bearer token that may send and read")
	fs.StringVar(&c.AdminToken, "admin-token", "", "bearer token that may also change faults, resolve jobs and sweep")
	fs.BoolVar(&c.Sandbox, "sandbox", false, "send to the embedded Gmail emulator even if credentials are given")
	fs.BoolVar(&c.AllowCrashFaults, "allow-crash-faults", false, "permit the crash-after-forward fault (the process really exits)")
	fs.BoolVar(&c.FaultHeader, "fault-header", false, "honour X-Relay-Fault on requests with the admin token")
	fs.Int64Var(&c.FaultSeed, "fault-seed", 0, "seed for probabilistic fault rules (0: random, logged)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "json or console")
	fs.IntVar(&c.QuotaPerMinute, "quota-per-minute", 6000, "the relay's Gmail quota budget per mailbox, in Gmail units per minute")
	fs.Int64Var(&c.MaxInflightBytes, "max-inflight-bytes", api.DefaultMaxInflightBytes, "request body bytes handled at once; a request that does not fit is answered 503 + Retry-After")
	fs.Int64Var(&c.MinBodyRate, "min-body-rate", api.DefaultMinBodyRate, "slowest request body accepted, in bytes per second after its first 10s; a slower one is cut with 408 (0: no minimum)")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", 5*time.Second, "how often the sweeper looks for due jobs")
	fs.BoolVar(&c.History, "history", true, "read each mailbox's SENT history (users.history.list) as a second witness: ambiguous sends known in seconds (--history=false: searches only)")
	fs.DurationVar(&c.SendTimeout, "send-timeout", 60*time.Second, "deadline of each Gmail call")
	fs.StringVar(&c.Clock, "clock", "real", "real, or manual (for tests: time moves only through POST /admin/clock)")
	fs.StringVar(&c.ClockStart, "clock-start", "", "with --clock manual: the clock's first reading (RFC 3339; default now)")
	// Environment twins: GMAILRELAY_<FLAG>, applied before the command line.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "GMAILRELAY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.validate()
}

// validate checks the flags and derives what serve needs from them (the
// policy, the clock, the Gmail clients). The checks run in a fixed order,
// so the first flag at fault is the one named.
func (c *serveConfig) validate() error {
	for _, step := range []func() error{
		c.validatePolicy,
		c.loadMsgIDSecret,
		c.validateListen,
		c.validateLimits,
		c.validateStorage,
		c.validateLogging,
		c.validateClock,
		c.validateCredentials,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	if c.sandbox() && c.policy.BuiltInChannels {
		ch := c.policy.Channels[policy.DefaultChannel]
		ch.Grace = sandboxGrace
		c.policy.Channels[policy.DefaultChannel] = ch
	}
	return c.loadGmailClients()
}

// validatePolicy loads --policy (or the default policy) and applies
// --msgid-domain to it.
func (c *serveConfig) validatePolicy() error {
	if c.PolicyPath != "" {
		p, err := policy.Load(c.PolicyPath)
		if err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
		c.policy = p
	} else {
		c.policy = policy.Default()
	}
	if c.MsgIDDomain != "" {
		if err := relay.ValidDomain(c.MsgIDDomain); err != nil {
			return fmt.Errorf("--msgid-domain: %w", err)
		}
		c.policy.MsgIDDomain = c.MsgIDDomain
	}
	return nil
}

// validateListen checks --addr and the tokens that guard it.
func (c *serveConfig) validateListen() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	if !loopback(c.Addr) && c.APIToken == "" {
		return fmt.Errorf("--addr %s is not a loopback address: set --api-token (and --admin-token) first", c.Addr)
	}
	// A guessable token is an open mail gateway, on loopback too: any local
	// process, or a page a browser was tricked into, could guess it.
	for _, t := range []struct{ flag, v string }{{"api-token", c.APIToken}, {"admin-token", c.AdminToken}} {
		if n := utf8.RuneCountInString(t.v); t.v != "" && n < minToken {
			return fmt.Errorf("--%s (or GMAILRELAY_%s): %d characters is too short; use at least %d (e.g. openssl rand -hex 16)",
				t.flag, strings.ToUpper(strings.ReplaceAll(t.flag, "-", "_")), n, minToken)
		}
	}
	if c.APIToken != "" && c.APIToken == c.AdminToken {
		return errors.New("--admin-token must differ from --api-token")
	}
	return nil
}

// validateLimits checks the request limits (--max-inflight-bytes,
// --min-body-rate).
func (c *serveConfig) validateLimits() error {
	if err := validateInflight(c.MaxInflightBytes); err != nil { // httpserver.go
		return err
	}
	if c.MinBodyRate < 0 {
		return fmt.Errorf("--min-body-rate must be 0 (no minimum) or a number of bytes per second, got %d", c.MinBodyRate)
	}
	return nil
}

// validateStorage checks where the log lives (--data or --database) and
// the quota and timing flags.
func (c *serveConfig) validateStorage() error {
	if c.Data == "" && c.Database == "" {
		return errors.New("--data: a file path is required")
	}
	if c.Database != "" {
		u, err := url.Parse(c.Database)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return errors.New("--database: want a postgres://user:password@host:port/dbname URL")
		}
	}
	if c.QuotaPerMinute < 1 {
		return errors.New("--quota-per-minute must be at least 1")
	}
	if c.SweepInterval <= 0 || c.SendTimeout <= 0 {
		return errors.New("--sweep-interval and --send-timeout must be positive")
	}
	return nil
}

// validateLogging checks --log-format and --log-level.
func (c *serveConfig) validateLogging() error {
	switch c.LogFormat {
	case "json", "console":
	default:
		return fmt.Errorf("--log-format must be json or console, not %q", c.LogFormat)
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// validateClock checks --clock and --clock-start and sets the manual clock.
func (c *serveConfig) validateClock() error {
	if c.Clock != "real" && c.Clock != "manual" {
		return fmt.Errorf("--clock must be real or manual, not %q", c.Clock)
	}
	if c.ClockStart != "" {
		t, err := time.Parse(time.RFC3339Nano, c.ClockStart)
		if err != nil || c.Clock != "manual" {
			return fmt.Errorf("--clock-start needs --clock manual and an RFC 3339 time, got %q", c.ClockStart)
		}
		c.clock = testclock.At(t)
	}
	if c.Clock == "manual" && c.clock == nil {
		c.clock = testclock.At(time.Now())
	}
	return nil
}

// validateCredentials checks the Gmail endpoint and credentials, the
// global ones and each policy mailbox's, and picks up the token
// `gmailrelay auth` stored when no other credentials are given.
func (c *serveConfig) validateCredentials() error {
	if err := validEndpoint(c.GmailEndpoint); err != nil {
		return err
	}
	if c.Credentials == "" && c.GmailEndpoint == "" && !c.Sandbox {
		// The token `gmailrelay auth` stored, if there is one.
		if p := defaultTokenPath(); p != "" {
			if _, err := os.Stat(p); err == nil {
				c.Credentials, c.storedToken = p, true
			}
		}
	}
	if c.Subject != "" && c.Credentials == "" {
		return errors.New("--subject needs --credentials (a service-account key)")
	}
	for _, m := range c.policy.MailboxList() {
		if m.Credentials != "" {
			if _, err := os.Stat(m.Credentials); err != nil {
				return fmt.Errorf("--policy: mailboxes.%s.credentials: %w", m.Name, err)
			}
		}
		if m.Subject != "" && m.Credentials == "" && c.Credentials == "" && !c.Sandbox {
			return fmt.Errorf("--policy: mailboxes.%s.subject needs a service-account key: its credentials, or --credentials", m.Name)
		}
	}
	return nil
}

// loadMsgIDSecret reads the Message-ID secret, once: --msgid-secret-file
// (or GMAILRELAY_MSGID_SECRET_FILE), else the policy's msgid_secret_file.
// A missing, unreadable, empty or short file is an error naming the
// setting and the file.
func (c *serveConfig) loadMsgIDSecret() error {
	path, setting := c.MsgIDSecretFile, "--msgid-secret-file"
	if path == "" {
		path, setting = c.policy.MsgIDSecretFile, "--policy: msgid_secret_file"
	}
	if path == "" {
		return nil
	}
	secret, err := readSecretFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	c.MsgIDSecretFile, c.msgidSecret = path, secret
	return nil
}

// ids is the scheme serve derives Message-IDs with.
func (c *serveConfig) ids() relay.IDScheme {
	return relay.NewIDScheme(c.policy.MsgIDDomain, c.msgidSecret)
}

// sandboxGrace is the default channel's grace in sandbox mode when no
// policy file names channels: the embedded emulator indexes a send at
// once, so a dropped response is reconciled within seconds of a try
// instead of Gmail's 3 minutes.
const sandboxGrace = 10 * time.Second

// validEndpoint checks --gmail-endpoint: empty (Google's), or an absolute
// http or https URL with a host.
func validEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("--gmail-endpoint: want an absolute http:// or https:// URL, got %q", endpoint)
	}
	return nil
}

// now is the clock serve runs on: the manual clock with --clock manual,
// else the real one.
func (c *serveConfig) now() func() time.Time {
	if c.Clock == "manual" && c.clock != nil {
		return c.clock.Now
	}
	return time.Now
}

// sandbox reports whether serve uses the embedded emulator: asked for,
// or no Gmail credentials (no --credentials, none in the policy's
// mailboxes) and no --gmail-endpoint.
func (c *serveConfig) sandbox() bool {
	return c.Sandbox || (c.Credentials == "" && c.GmailEndpoint == "" && !c.policyCredentials())
}

// minToken is the shortest token serve accepts, on every address.
const minToken = 16

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newLogger(w io.Writer, format, level string) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(level)
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}
