// Command gmailrelay is the relay, its Gmail emulator and their tools in one
// binary. main only wires: each subcommand lives in its own file and
// returns an exit code (2 for bad flags or configuration).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type command struct {
	name string
	help string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the relay (sandbox mode against the embedded emulator without credentials)", runServe},
		{"fakegmail", "run the Gmail emulator alone", runFakeGmail},
		{"demo", "run the three fault modes end to end against the emulator and print what happened", runDemo},
		{"msgid", "print the Message-ID derived from a job key", runMsgID},
		{"auth", "obtain a Gmail refresh token through the OAuth loopback flow", runAuth},
		{"selftest", "watch one ambiguous send reconcile (--live: against your real mailbox)", runSelftest},
		{"check", "verify an acceptance log file's invariants offline (exit 1 naming each violation)", runCheck},
		{"backup", "save a consistent copy of the acceptance log (from a running relay or a stopped one's file)", runBackup},
		{"compact", "write a compacted copy of a stopped relay's log file", runCompact},
		{"rekey", "record a new Message-ID domain (or secret) in a stopped relay's log, on purpose", runRekey},
		{"healthcheck", "ask a running relay's /healthz (for container health checks)", runHealthcheck},
		{"version", "print the version, the commit it was built from and the Go version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args[0] = "version"
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "gmailrelay: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gmailrelay <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.help)
	}
	fmt.Fprintln(w, "\nRun 'gmailrelay <command> -h' for a command's flags.")
}

// newFlagSet is subcommand name's flag set (errors and -h go to stderr).
// With a usage line, -h prints "usage: " and it, then the about lines after
// a blank line, a blank line and the flags.
func newFlagSet(name string, stderr io.Writer, usage string, about ...string) *flag.FlagSet {
	fs := flag.NewFlagSet("gmailrelay "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if usage != "" {
		fs.Usage = func() {
			fmt.Fprintln(stderr, "usage: "+usage)
			if len(about) > 0 {
				fmt.Fprintln(stderr, "\n"+strings.Join(about, "\n"))
			}
			fmt.Fprintln(stderr)
			fs.PrintDefaults()
		}
	}
	return fs
}

// failer returns subcommand name's way out: it writes "gmailrelay name: "
// and the message to stderr and returns the exit code it is given.
func failer(stderr io.Writer, name string) func(code int, format string, a ...any) int {
	return func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "gmailrelay "+name+": "+format+"\n", a...)
		return code
	}
}

// parseNoArgs is parseFlags for a subcommand that takes flags only: an
// argument left after them exits 2 through fail, naming it.
func parseNoArgs(fs *flag.FlagSet, args []string, fail func(code int, format string, a ...any) int) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q", fs.Arg(0)), false
	}
	return 0, true
}

// parseFlags parses a subcommand's flags. When it returns ok false, the
// subcommand exits with code: 0 after -h, 2 after a bad flag (the flag
// package has already said which).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
