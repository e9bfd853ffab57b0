package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// cluster is a throwaway PostgreSQL cluster: its data directory and
// socket live in dir, removed with it.
type cluster struct {
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string
	port int
	as   *user.User // the user the cluster runs as (postgres, when we are root), or nil
}

// newestBin returns the directory among glob's matches holding initdb and
// pg_ctl with the highest major version (15 before 9.6), or "".
func newestBin(glob string) string {
	dirs, _ := filepath.Glob(glob)
	var ok []string
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			ok = append(ok, d)
		}
	}
	sort.Slice(ok, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(ok[i])), filepath.Base(filepath.Dir(ok[j])))
	})
	if len(ok) == 0 {
		return ""
	}
	return ok[len(ok)-1]
}

// versionLess compares dotted version numbers ("9.6" < "15"); a part that
// is not a number compares as text.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errx := strconv.Atoi(as[i])
		y, erry := strconv.Atoi(bs[i])
		switch {
		case errx != nil || erry != nil:
			if as[i] != bs[i] {
				return as[i] < bs[i]
			}
		case x != y:
			return x < y
		}
	}
	return len(as) < len(bs)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// startCluster runs initdb into a new temporary directory and starts a
// server from bin on a free loopback port. As root it runs both as the
// postgres user, which must exist.
func startCluster(bin string) (*cluster, error) {
	c := &cluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, but there is no postgres user to run it as (%v): "+
				"create one (Debian's postgresql package does) or set %s", err, EnvVar)
		}
		c.as = u
	}
	dir, err := os.MkdirTemp("", "gmailrelay-pgtest-")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := c.chown(dir); err != nil {
		return nil, err
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A port found free may be taken before the server binds it: try
	// another a few times.
	for try := 0; ; try++ {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		opts := fmt.Sprintf("-k '%s' -h 127.0.0.1 -p %d -c fsync=off -c synchronous_commit=off -c full_page_writes=off", c.dir, c.port)
		out, err := c.run("pg_ctl", "-D", c.data(), "-l", c.logFile(), "-o", opts, "-w", "-t", "60", "start")
		if err == nil {
			break
		}
		if try == 2 {
			log, _ := os.ReadFile(c.logFile())
			return nil, fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, tail(log, 2000))
		}
	}
	ok = true
	return c, nil
}

// url is the cluster's connection URL (trust authentication, loopback).
func (c *cluster) url() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.port) + "/postgres?sslmode=disable"
}

// stop stops the server (immediate: nothing in it is kept) and removes
// its directory.
func (c *cluster) stop() error {
	out, err := c.run("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
	rmErr := os.RemoveAll(c.dir)
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return rmErr
}

func (c *cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *cluster) logFile() string { return filepath.Join(c.dir, "server.log") }

// run runs one of the cluster's binaries in its directory, as its user.
func (c *cluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir // readable by the postgres user, unlike the package's directory may be
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if c.as != nil {
		if err := runAs(cmd, c.as); err != nil {
			return nil, err
		}
	}
	err := cmd.Run()
	return out.Bytes(), err
}

// chown gives path to the cluster's user, when it has one.
func (c *cluster) chown(path string) error {
	if c.as == nil {
		return nil
	}
	uid, err1 := strconv.Atoi(c.as.Uid)
	gid, err2 := strconv.Atoi(c.as.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("user %s: %w", c.as.Username, err)
	}
	return os.Chown(path, uid, gid)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
