package n8n_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestReviewAlertLinksToTheConsole runs the alert's Code node (both the
// scheduled workflow and its Manual Trigger variant) in Node.js on one
// listed job: the alert names the mail (subject, recipients) and links
// to the console page that decides it, /ui/jobs/{message_id} escaped;
// the API address is only a second, read-only pointer, and no
// hand-crafted resolve POST is asked of the operator.
func TestReviewAlertLinksToTheConsole(t *testing.T) {
	nodejs, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is needed in CI")
		}
		t.Skip("node not found: the alert's code is not run")
	}
	input, _ := json.Marshal(map[string]any{"jobs": []map[string]any{{
		"message_id": "<job-a1/b@inbound.example.com>", "key": "cus_1:invoice.paid:ord_1", "channel": "billing",
		"attempts": 1, "updated_at": "2026-12-05T10:00:00Z", "to": []string{"ann@example.org", "bob@example.com"},
		"subject": "Your invoice INV-1"}}, "next": ""})
	for _, name := range []string{"review-queue-alert.json", "manual/review-queue-alert.manual.json"} {
		wf, _ := load(t, name)
		script := "const $env = {GMAILRELAY_URL: 'http://relay:8080'};\n" +
			"const $input = {first: () => ({json: " + string(input) + "})};\n" +
			"const out = (() => {\n" + codeNode(wf) + "\n})();\nprocess.stdout.write(JSON.stringify(out));\n"
		got, err := exec.Command(nodejs, "-e", script).Output()
		if err != nil {
			t.Fatalf("%s: run the Code node: %v", name, err)
		}
		var items []struct {
			JSON struct{ Text string } `json:"json"`
		}
		if err := json.Unmarshal(got, &items); err != nil || len(items) != 1 {
			t.Fatalf("%s: output %s: %v", name, got, err)
		}
		text := items[0].JSON.Text
		for _, want := range []string{"decide:   http://relay:8080/ui/jobs/%3Cjob-a1%2Fb%40inbound.example.com%3E",
			"Your invoice INV-1", "ann@example.org, bob@example.com"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the alert lacks %q:\n%s", name, want, text)
			}
		}
		if strings.Contains(text, "POST") || strings.Contains(text, "/resolve") {
			t.Errorf("%s: the alert still asks for a hand-crafted resolve call:\n%s", name, text)
		}
	}
}
