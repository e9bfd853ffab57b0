package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// runFakeGmail runs the Gmail emulator alone until ctx is done. Bad flags
// exit 2; a listen or serve error exits 1; a clean shutdown exits 0.
func runFakeGmail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	addr, opts, code, ok := parseFakeGmail(args, stderr)
	if !ok {
		return code
	}
	srv := gmailfake.New(opts)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay fakegmail: listen on %s: %v\n", addr, err)
		return 1
	}
	return serveFakeGmail(ctx, srv, ln, stdout, stderr)
}

// parseFakeGmail reads fakegmail's flags into the emulator's options and
// its listen address. When ok is false the command exits with code: 0
// after -h, 2 after a bad flag (said on stderr, naming it).
func parseFakeGmail(args []string, stderr io.Writer) (addr string, opts gmailfake.Options, code int, ok bool) {
	fs := newFlagSet("fakegmail", stderr, "gmailrelay fakegmail [flags]",
		"Runs the Gmail API emulator. Results against it are emulator results, not a Gmail guarantee.")
	addrFlag := fs.String("addr", "127.0.0.1:8089", "address to listen on (port 0 picks a free port)")
	indexLag := fs.String("index-lag", "0", "how long before a sent message is searchable: 0, a duration (30s) or a distribution p50=2s,p99=2m,max=20m drawn per message (get by id works at once)")
	historyLag := fs.String("history-lag", "0", "how long before a change is listed by history.list (independent of --index-lag): 0, a duration (5s) or a distribution p50=1s,p99=30s,max=5m drawn per record; records turn listable in order")
	historyRetention := fs.Duration("history-retention", gmailfake.DefaultHistoryRetention, "how long history records are kept; a startHistoryId a dropped record followed answers 404 notFound")
	indexOrder := fs.String("index-order", "fifo", "fifo: never searchable before an earlier send of the account; random: each message on its own draw")
	rewrite := fs.String("rewrite-message-id", "malformed", "which sends get a Gmail-generated Message-ID: malformed, never, always or a fraction such as 0.05 (the bare flag means always)")
	var sentDedupe, strict, header onOff
	fs.Var(&sentDedupe, "sent-dedupe", "off or on (alone: on): fold a send whose Message-ID matches a stored SENT message into it (still a second delivery)")
	fs.Var(&strict, "strict-queries", "off or on (alone: on): answer 400 to a q the emulator cannot parse (Gmail answers an empty list)")
	fs.Var(&header, "rate-limit-header", "off or on (alone: on): add a Retry-After header to quota answers (Gmail documents none)")
	rateStatus := fs.Int("rate-limit-status", http.StatusTooManyRequests, "status of per-minute quota answers: 429 (rateLimitExceeded) or 403 (userRateLimitExceeded)")
	daily := fs.Int("daily-send-limit", 0, "sends per rolling 24 h per account (Workspace 2000, trial 500; 0: off)")
	cost := fs.String("cost", "", "override quota costs per method, e.g. get=20,list=5")
	quota := fs.Int("quota-per-minute", gmailfake.DefaultQuotaPerMinute, "per-user quota in Gmail units per minute")
	latency := fs.Duration("latency", 0, "added to every Gmail call, e.g. 150ms")
	seed := fs.Int64("seed", 0, "seed of every random choice (0: from the clock; printed at start)")
	var accounts, tokens, sendAs listFlag
	fs.Var(&sendAs, "send-as", "ADDRESS or ADDRESS=ACCOUNT: a verified send-as alias of the primary account (or of ACCOUNT), repeatable; a sent From that is neither the account nor its alias is replaced by the account's address, as Gmail does")
	fs.Var(&accounts, "account", "a mailbox address the emulator serves (repeatable; the first is the primary; default "+gmailfake.DefaultAccount+")")
	fs.Var(&tokens, "token", "TOKEN=ADDRESS: a bearer token for an account (repeatable; TOKEN alone is the primary account's; none: no auth)")
	bounces := fakeBounceFlags(fs)
	fail := failer(stderr, "fakegmail")
	bad := func(code int, format string, a ...any) (string, gmailfake.Options, int, bool) {
		return "", gmailfake.Options{}, fail(code, format, a...), false
	}
	if code, ok := parseNoArgs(fs, onOffValues(bareRewriteFlag(args), onOffFlags), fail); !ok {
		return "", gmailfake.Options{}, code, false
	}
	opts = gmailfake.Options{
		SentDedupe:      bool(sentDedupe),
		StrictQueries:   bool(strict),
		RateLimitHeader: bool(header),
		QuotaStatus:     *rateStatus,
		DailySendLimit:  *daily,
		QuotaPerMinute:  *quota,
		Latency:         *latency,
		Seed:            *seed,
		Accounts:        accounts,
	}
	opts.HistoryRetention = *historyRetention
	var err error
	switch {
	case *latency < 0:
		return bad(2, "--latency must not be negative, got %s", *latency)
	case *quota <= 0:
		return bad(2, "--quota-per-minute must be positive, got %d", *quota)
	case *rateStatus != http.StatusTooManyRequests && *rateStatus != http.StatusForbidden:
		return bad(2, "--rate-limit-status must be 429 or 403, got %d", *rateStatus)
	case *daily < 0:
		return bad(2, "--daily-send-limit must not be negative, got %d", *daily)
	case *historyRetention <= 0:
		return bad(2, "--history-retention must be positive, got %s", *historyRetention)
	}
	if opts.IndexLag, opts.IndexLagDistribution, err = gmailfake.ParseIndexLag(*indexLag); err != nil {
		return bad(2, "--index-lag: %v", err)
	}
	if opts.HistoryLag, opts.HistoryLagDistribution, err = gmailfake.ParseIndexLag(*historyLag); err != nil {
		return bad(2, "--history-lag: %v", err)
	}
	if opts.IndexOrder, err = gmailfake.ParseIndexOrder(*indexOrder); err != nil {
		return bad(2, "--index-order: %v", err)
	}
	if opts.Rewrite, err = gmailfake.ParseRewritePolicy(*rewrite); err != nil {
		return bad(2, "--rewrite-message-id: %v", err)
	}
	if opts.Costs, err = gmailfake.ParseCosts(*cost); err != nil {
		return bad(2, "--cost: %v", err)
	}
	if msg := fakeAccounts(&opts, accounts, tokens, sendAs); msg != "" {
		return bad(2, "%s", msg)
	}
	if msg := bounces(&opts); msg != "" {
		return bad(2, "%s", msg)
	}
	return *addrFlag, opts, 0, true
}

// fakeBounceFlags registers the delivery-report flags on fs; the function
// it returns sets them in opts once fs is parsed (after --daily-send-limit)
// and says what is wrong with one ("" when nothing).
func fakeBounceFlags(fs *flag.FlagSet) func(*gmailfake.Options) string {
	bounce := fs.String("bounce-recipients", gmailfake.DefaultBounceRecipients.String(), "a Go regular expression on the lower-case recipient address: such a recipient is accepted, then a failure report (5.1.1) arrives in the sender's INBOX after --bounce-delay ('': none)")
	delayed := fs.String("delay-recipients", gmailfake.DefaultDelayRecipients.String(), "as --bounce-recipients, with a delay report (Action: delayed, 4.4.1) ('': none)")
	delay := fs.Duration("bounce-delay", gmailfake.DefaultBounceDelay, "how long after a send its reports, and the sending-limit notice, arrive in INBOX (on the emulator's clock)")
	lag := fs.Int("daily-limit-lag", 0, "the first N sends past --daily-send-limit are answered 200 and stored in SENT but not delivered, and a nobody@gmail.com notice arrives after --bounce-delay; then sends get the daily-limit answer")
	return func(opts *gmailfake.Options) string {
		var err error
		if opts.BounceRecipients, err = recipientsRegexp(*bounce); err != nil {
			return fmt.Sprintf("--bounce-recipients: %v", err)
		}
		if opts.DelayRecipients, err = recipientsRegexp(*delayed); err != nil {
			return fmt.Sprintf("--delay-recipients: %v", err)
		}
		switch {
		case *delay <= 0:
			return fmt.Sprintf("--bounce-delay must be positive, got %s", *delay)
		case *lag < 0:
			return fmt.Sprintf("--daily-limit-lag must not be negative, got %d", *lag)
		case *lag > 0 && opts.DailySendLimit == 0:
			return "--daily-limit-lag needs a --daily-send-limit"
		}
		opts.BounceDelay, opts.DailyLimitLag = *delay, *lag
		return ""
	}
}

// recipientsRegexp compiles a --bounce-recipients or --delay-recipients
// value; "" matches no recipient.
func recipientsRegexp(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return gmailfake.NoRecipients, nil
	}
	return regexp.Compile(expr)
}

// fakeAccounts sets opts' accounts (the default one when none is
// given), tokens and send-as aliases from their flags; it returns what is
// wrong with one ("" when nothing is).
func fakeAccounts(opts *gmailfake.Options, accounts, tokens, sendAs listFlag) string {
	if len(accounts) == 0 {
		accounts = listFlag{gmailfake.DefaultAccount}
		opts.Accounts = accounts
	}
	for _, a := range accounts {
		if p, err := mail.ParseAddress(a); err != nil || p.Address != a {
			return fmt.Sprintf("--account must be a bare email address, got %q", a)
		}
	}
	for _, tv := range tokens {
		tok, address, hasAddr := strings.Cut(tv, "=")
		switch {
		case tok == "":
			return fmt.Sprintf("--token must be TOKEN=ADDRESS (or TOKEN alone), got %q", tv)
		case !hasAddr:
			address = accounts[0]
		case !slices.ContainsFunc(accounts, func(a string) bool { return strings.EqualFold(a, address) }):
			return fmt.Sprintf("--token %s: %q is not an --account", tok, address)
		}
		if opts.Tokens == nil {
			opts.Tokens = map[string]string{}
		}
		opts.Tokens[tok] = address
	}
	for _, sv := range sendAs {
		alias, account, _ := strings.Cut(sv, "=")
		if p, err := mail.ParseAddress(alias); err != nil || p.Address != alias {
			return fmt.Sprintf("--send-as must be a bare email address (or ADDRESS=ACCOUNT), got %q", sv)
		}
		if account != "" && !slices.ContainsFunc(accounts, func(a string) bool { return strings.EqualFold(a, account) }) {
			return fmt.Sprintf("--send-as %s: %q is not an --account", alias, account)
		}
		opts.SendAs = append(opts.SendAs, gmailfake.Alias{Account: account, Address: alias})
	}
	return ""
}

// serveFakeGmail serves srv on ln until ctx is done: 0 after a clean
// shutdown, 1 when serving or shutting down failed.
func serveFakeGmail(ctx context.Context, srv *gmailfake.Server, ln net.Listener, stdout, stderr io.Writer) int {
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "Gmail emulator listening on %s (accounts %s, seed %d)\n", url, strings.Join(srv.Accounts(), ", "), srv.Seed())
	fmt.Fprintln(stdout, "This is an emulator: results against it are not a Gmail guarantee.")
	fmt.Fprintf(stdout, "Point a Gmail client at %s/ (Go: option.WithEndpoint); control API at %s/_emulator/\n", url, url)

	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Requests inherit ctx so that emulated latency ends at shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "gmailrelay fakegmail: serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(stderr, "gmailrelay fakegmail: shutdown: %v\n", err)
		return 1
	}
	<-served
	fmt.Fprintln(stdout, "Gmail emulator stopped")
	return 0
}

// onOff is a switch flag written as the emulator's docs write it, off or on;
// true/false and 1/0 work too (the first emulator's flags were Go bools),
// and the flag alone means on.
type onOff bool

func (f *onOff) String() string {
	if f != nil && bool(*f) {
		return "on"
	}
	return "off"
}

func (f *onOff) Set(v string) error {
	switch strings.ToLower(v) {
	case "on", "true", "1":
		*f = true
	case "off", "false", "0":
		*f = false
	default:
		return errors.New("want on or off (or true/false, 1/0)")
	}
	return nil
}

// IsBoolFlag lets the flag stand alone.
func (f *onOff) IsBoolFlag() bool { return true }

// onOffFlags are fakegmail's onOff flags.
var onOffFlags = []string{"sent-dedupe", "strict-queries", "rate-limit-header"}

// onOffValues joins an onOff flag and an on/off value that follows it as a
// separate argument (--sent-dedupe on → --sent-dedupe=on): the flag
// package reads a value only after "=" for a flag that may stand alone,
// and fakegmail takes no arguments that the value could be.
func onOffValues(args, names []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		var value onOff
		if name := strings.TrimLeft(a, "-"); strings.HasPrefix(a, "-") && slices.Contains(names, name) &&
			i+1 < len(args) && value.Set(args[i+1]) == nil {
			a += "=" + args[i+1]
			i++
		}
		out = append(out, a)
	}
	return out
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// bareRewriteFlag lets --rewrite-message-id stand alone, meaning always (as
// the first emulator's boolean flag did), while --rewrite-message-id VALUE
// and --rewrite-message-id=VALUE take a value.
func bareRewriteFlag(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a != "--rewrite-message-id" && a != "-rewrite-message-id" {
			out = append(out, a)
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			if _, err := gmailfake.ParseRewritePolicy(args[i+1]); err == nil {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a+"=always")
	}
	return out
}
