package main

// Temporary stubs, each replaced by its own file as the subcommand lands.

import (
	"context"
	"fmt"
	"io"
)

func notYet(name string) func(context.Context, []string, io.Writer, io.Writer) int {
	return func(_ context.Context, _ []string, _, stderr io.Writer) int {
		fmt.Fprintf(stderr, "gmailrelay %s: not implemented yet\n", name)
		return 1
	}
}

var (
	runSelftest = notYet("selftest")
)
