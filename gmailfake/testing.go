package gmailfake

import (
	"net/http/httptest"
	"testing"
)

// NewTestServer starts an emulator configured by opts on a loopback
// httptest.Server and closes it when the test ends. It returns the server
// and its base URL (no trailing slash): point Google's client at it with
// option.WithEndpoint(url+"/").
func NewTestServer(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts.URL
}
