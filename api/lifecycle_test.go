package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/api"
)

// A second server on the same Metrics must not panic (before the fix the
// stats collector was registered again on every api.New).
func TestTwoServersShareOneMetrics(t *testing.T) {
	e := newEnv(t, envOpts{})
	m := api.NewMetrics()
	for range 2 {
		_ = api.New(api.Config{Relay: e.Service, Log: e.Log, Policy: e.Policy, Faults: e.Faults, Now: e.Clock.Now, Sweeper: e.sw, APIToken: apiToken, AdminToken: adminToken,
			MsgIDDomain: domain, Mode: "sandbox", Metrics: m, Logger: zerolog.Nop()})
	}
}

// A caller that gave up must not make /readyz report its
// context.Canceled as the provider's health for the next 15 s.
func TestReadyzDoesNotCacheACallersCancellation(t *testing.T) {
	e := newEnv(t, envOpts{})
	var calls atomic.Int32
	srv := api.New(api.Config{Relay: e.Service, Log: e.Log, Policy: e.Policy, Faults: e.Faults, Now: e.Clock.Now, Sweeper: e.sw, APIToken: apiToken, AdminToken: adminToken,
		MsgIDDomain: domain, Mode: "sandbox", Metrics: api.NewMetrics(), Logger: zerolog.Nop(),
		Probe: func(ctx context.Context) error {
			calls.Add(1)
			return ctx.Err()
		}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil).WithContext(ctx)
	srv.ServeHTTP(httptest.NewRecorder(), req)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz after a cancelled caller = %d %s, want 200", rec.Code, rec.Body)
	}
	if calls.Load() == 0 {
		t.Error("probe never called")
	}

}

// /v1/log refuses a limit the log would silently cap (before: limit=5000
// was accepted and 1000 lines returned).
func TestLogLimitAboveThePageSizeIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	rep, err := e.do(http.MethodGet, "/v1/log?limit=5000", adminToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.status != http.StatusBadRequest {
		t.Errorf("limit=5000: %d, want 400", rep.status)
	}
	if rep, err = e.do(http.MethodGet, "/v1/log?limit=1000", adminToken, nil); err != nil || rep.status != http.StatusOK {
		t.Errorf("limit=1000: %d %v, want 200", rep.status, err)
	}
}
