package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// postSend sends a JSON send from from and returns the status and body.
func postSend(t *testing.T, url, key, from string) (int, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"from":%q,"to":"customer@example.net","subject":"s","text":"t"}`, key, from)
	resp, err := http.Post(url+"/v1/send", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// serve reads each mailbox's send-as list before it serves its first
// request: a From Gmail would replace is refused from the first send on,
// a --send-as alias is sent; one read, one unit (emulator results).
func TestServeReadsSendAsAtStart(t *testing.T) {
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{SendAs: []gmailfake.Alias{{Address: "sales@example.com"}}})
	rs := startTestRelay(t, "--gmail-endpoint", emuURL)
	t.Cleanup(func() { rs.close(context.Background()) })

	code, out := postSend(t, rs.URL, "k-ceo", "ceo@example.com")
	if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "from_not_verified" || e["field"] != "from" {
		t.Errorf("first send, from ceo@example.com: %d %v, want 400 from_not_verified", code, out)
	}
	if code, out := postSend(t, rs.URL, "k-sales", "sales@example.com"); code != http.StatusOK {
		t.Errorf("from the alias: %d %v, want 200", code, out)
	}
	if st := emu.Stats(); st.Calls[gmailfake.MethodSendAs] != 1 || st.Deliveries != 1 {
		t.Errorf("emulator: %d sendAs.list calls, %d deliveries; want 1 and 1", st.Calls[gmailfake.MethodSendAs], st.Deliveries)
	}
}

// In sandbox mode the embedded emulator takes the policy's send_as as
// the mailbox's verified aliases, so a sandbox sends from them.
func TestSandboxPolicySendAsIsVerified(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("mailboxes:\n  shop: {address: shop@example.com, send_as: [sales@example.com]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := startTestRelay(t, "--policy", pol)
	t.Cleanup(func() { rs.close(context.Background()) })
	if code, out := postSend(t, rs.URL, "k-sales", "sales@example.com"); code != http.StatusOK {
		t.Errorf("sandbox, from the policy's send_as: %d %v, want 200", code, out)
	}
	if st := rs.Emulator.Stats(); st.Calls[gmailfake.MethodSendAs] != 1 {
		t.Errorf("sandbox emulator: %d sendAs.list calls, want 1", st.Calls[gmailfake.MethodSendAs])
	}
}
