package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/relay"
)

func (e *env) addFault(spec map[string]any) string {
	e.t.Helper()
	r := e.must("POST", "/admin/faults", adminToken, spec)
	if r.status != 201 {
		e.t.Fatalf("add fault: %d %s", r.status, r.raw)
	}
	return fmt.Sprint(r.body["id"])
}

func TestEmulatorFailBeforeForwardThenRetry(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "fail-before-forward", "count": 1})
	r := e.must("POST", "/v1/send", apiToken, sendBody("fbf"))
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.raw), "fault") {
		t.Fatalf("faulted send: %d %v %s, want 503 with Retry-After and a fault message", r.status, r.header, r.raw)
	}
	id := relay.MessageID("fbf", domain)
	if got := e.Emulator.Count(id); got != 0 {
		t.Fatalf("emulator holds %d after fail-before-forward, want 0", got)
	}
	r = e.must("POST", "/v1/send", apiToken, sendBody("fbf"))
	if r.status != 200 {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	e.wantOneEffect(id)
}

func TestEmulatorDropResponseCutsConnection(t *testing.T) {
	e := newEnv(t, envOpts{})
	rule := e.addFault(map[string]any{"mode": "forward-then-drop-response", "key": "drop"})
	_, err := e.do("POST", "/v1/send", apiToken, sendBody("drop"))
	if err == nil {
		t.Fatal("the caller got an HTTP answer; want a cut connection")
	}
	id := relay.MessageID("drop", domain)
	if got := e.Emulator.Count(id); got != 1 {
		t.Errorf("emulator holds %d, want 1", got)
	}
	j, lines := e.job(id)
	if j.State != acceptlog.StateUnknown {
		t.Errorf("state %s, want unknown", j.State)
	}
	var faultLine bool
	for _, l := range lines {
		faultLine = faultLine || (l.Kind == acceptlog.KindFault && l.RuleID == rule)
	}
	if !faultLine {
		t.Errorf("no fault line naming rule %s in %+v", rule, lines)
	}
	// An immediate retry answers 202 and does not forward.
	r := e.must("POST", "/v1/send", apiToken, sendBody("drop"))
	if r.status != 202 || r.header.Get("Location") == "" || r.body["state"] != "unknown" {
		t.Errorf("retry: %d %v %s, want 202 unknown with Location", r.status, r.header, r.raw)
	}
	if got := e.Emulator.Count(id); got != 1 {
		t.Errorf("after retry emulator holds %d, want 1", got)
	}
	// The rules list shows the hit.
	f := e.must("GET", "/admin/faults", adminToken, nil)
	if !strings.Contains(string(f.raw), `"hits":1`) {
		t.Errorf("faults list %s, want hits 1", f.raw)
	}
}

func TestEmulatorDrop504Variant(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	r := e.must("POST", "/v1/send", apiToken, sendBody("d504"))
	if r.status != 504 {
		t.Errorf("status %d, want 504", r.status)
	}
	if _, ok := r.body["error"]; !ok {
		t.Errorf("504 body %s has no error", r.raw)
	}
}

func TestEmulatorForwardAndRespondExemptsAKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "fail-before-forward"})
	e.addFault(map[string]any{"mode": "forward-and-respond", "key": "vip"})
	if r := e.must("POST", "/v1/send", apiToken, sendBody("vip")); r.status != 200 {
		t.Errorf("exempt key: %d %s, want 200", r.status, r.raw)
	}
	if r := e.must("POST", "/v1/send", apiToken, sendBody("other")); r.status != 503 {
		t.Errorf("other key: %d, want 503", r.status)
	}
}

func TestFaultHeaderNeedsFlagAndAdminToken(t *testing.T) {
	tests := []struct {
		name   string
		flag   bool
		token  string
		status int
	}{
		{"without --fault-header", false, adminToken, 200},
		{"without the admin token", true, apiToken, 200},
		{"with both", true, adminToken, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{faultHeader: tt.flag})
			r := e.must("POST", "/v1/send", tt.token, sendBody("hdr"), "X-Relay-Fault", "fail-before-forward")
			if r.status != tt.status {
				t.Errorf("status %d %s, want %d", r.status, r.raw, tt.status)
			}
		})
	}
}

func TestAdminFaultValidation(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"mode": "explode"}, "mode"},
		{map[string]any{"mode": "fail-before-forward", "probability": 1.5}, "probability"},
		{map[string]any{"mode": "fail-before-forward", "count": -1}, "count"},
		{map[string]any{"mode": "fail-before-forward", "ttl": "soon"}, "ttl"},
		{map[string]any{"mode": "crash-after-forward"}, "mode"},
		{map[string]any{"mode": "fail-before-forward", "channel": "nope"}, "channel"},
	}
	for _, tt := range tests {
		r := e.must("POST", "/admin/faults", adminToken, tt.body)
		errObj, _ := r.body["error"].(map[string]any)
		if r.status != 400 || errObj == nil || errObj["field"] != tt.field {
			t.Errorf("%v: %d %s, want 400 naming %s", tt.body, r.status, r.raw, tt.field)
		}
	}
	id := e.addFault(map[string]any{"mode": "fail-before-forward"})
	if r := e.must("DELETE", "/admin/faults/"+id, adminToken, nil); r.status != 204 {
		t.Errorf("delete: %d", r.status)
	}
	if r := e.must("DELETE", "/admin/faults/"+id, adminToken, nil); r.status != 404 {
		t.Errorf("delete again: %d, want 404", r.status)
	}
}
