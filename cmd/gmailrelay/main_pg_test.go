package main

import (
	"testing"

	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// TestMain stops the throwaway PostgreSQL cluster pgtest starts for the
// --database tests (unless GMAILRELAY_TEST_DATABASE names a server).
func TestMain(m *testing.M) { pgtest.Main(m) }
