package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestNewestBin(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "13", "16"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		names := []string{"initdb", "pg_ctl"}
		if v == "16" {
			names = names[:1] // a client-only or broken install: no pg_ctl
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(bin, n), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := newestBin(filepath.Join(root, "*", "bin")), filepath.Join(root, "15", "bin"); got != want {
		t.Errorf("newestBin = %q, want %q (16 has no pg_ctl; 15 is newer than 13 and 9.6)", got, want)
	}
	if got := newestBin(filepath.Join(t.TempDir(), "*", "bin")); got != "" {
		t.Errorf("newestBin with nothing installed = %q, want \"\"", got)
	}
}

// TestThrowawayCluster starts a cluster from the installed binaries (as
// the postgres user when root), checks that it answers with fsync off and
// its socket in its own directory, and that stop removes that directory.
func TestThrowawayCluster(t *testing.T) {
	bin := newestBin(BinGlob)
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no PostgreSQL binaries in " + BinGlob + ": with CI=true this test must run")
		}
		t.Skip("no PostgreSQL binaries in " + BinGlob + " (Debian: apt-get install postgresql)")
	}
	began := time.Now()
	c, err := startCluster(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster from %s up in %s", bin, time.Since(began).Round(time.Millisecond))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url())
	if err != nil {
		_ = c.stop()
		t.Fatal(err)
	}
	var fsync, sockets string
	err = conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('unix_socket_directories')").Scan(&fsync, &sockets)
	conn.Close(ctx)
	if err != nil {
		_ = c.stop()
		t.Fatal(err)
	}
	if fsync != "off" || sockets != c.dir {
		t.Errorf("fsync %q, socket directory %q; want off and %q", fsync, sockets, c.dir)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("cluster directory %s after stop: %v, want it removed", c.dir, err)
	}
}

// Where no binaries are installed there is no server, and the reason
// names the package to install.
func TestNoBinariesSaysWhatToInstall(t *testing.T) {
	defer func(g string) { binGlob = g }(binGlob)
	binGlob = filepath.Join(t.TempDir(), "*", "bin")
	u, skip, err := start()
	if u != "" || err != nil || !strings.Contains(skip, "apt-get install postgresql") || !strings.Contains(skip, EnvVar) {
		t.Errorf("start() = %q, %q, %v; want no server, a reason naming apt-get install postgresql and %s", u, skip, err, EnvVar)
	}
}
