package n8n_test

// These tests check that the example workflows have the shape n8n's own
// workflow format gives them, so that they import: the interfaces
// IWorkflowBase, INode, IConnections and IConnection of the n8n-workflow
// package (checked against n8n-workflow 1.120.0, the version n8n 1.123.0
// depends on; the same interfaces in n8n-workflow 2.41.0 only add optional
// fields), and the node types and versions n8n-nodes-base 1.121.0 declares.
// They also check what the relay needs of them: the right endpoints, Retry On
// Fail within n8n's limits, a send body the relay's strict decoder accepts,
// credentials by name only and no secrets.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/relay"
)

// workflow is IWorkflowBase (n8n-workflow 1.120.0, interfaces.d.ts): every
// field it declares, and no other, so that strict decoding refuses a field
// n8n does not know.
type workflow struct {
	ID              string                     `json:"id"`
	Name            string                     `json:"name"`
	Description     *string                    `json:"description"`
	Active          *bool                      `json:"active"`
	IsArchived      *bool                      `json:"isArchived"`
	CreatedAt       string                     `json:"createdAt"`
	StartedAt       string                     `json:"startedAt"`
	UpdatedAt       string                     `json:"updatedAt"`
	Nodes           []node                     `json:"nodes"`
	Connections     map[string]nodeConnections `json:"connections"`
	Settings        map[string]any             `json:"settings"`
	StaticData      map[string]any             `json:"staticData"`
	PinData         map[string]any             `json:"pinData"`
	VersionID       string                     `json:"versionId"`
	ActiveVersionID *string                    `json:"activeVersionId"`
	VersionCounter  *int                       `json:"versionCounter"`
	Meta            map[string]any             `json:"meta"`
}

// node is INode: every field it declares.
type node struct {
	ID                   string                        `json:"id"`
	Name                 string                        `json:"name"`
	TypeVersion          *float64                      `json:"typeVersion"`
	Type                 string                        `json:"type"`
	Position             []float64                     `json:"position"`
	Disabled             bool                          `json:"disabled"`
	Notes                string                        `json:"notes"`
	NotesInFlow          bool                          `json:"notesInFlow"`
	RetryOnFail          bool                          `json:"retryOnFail"`
	MaxTries             *int                          `json:"maxTries"`
	WaitBetweenTries     *int                          `json:"waitBetweenTries"`
	AlwaysOutputData     bool                          `json:"alwaysOutputData"`
	ExecuteOnce          bool                          `json:"executeOnce"`
	OnError              string                        `json:"onError"`
	ContinueOnFail       bool                          `json:"continueOnFail"`
	Parameters           map[string]any                `json:"parameters"`
	Credentials          map[string]credentialsDetails `json:"credentials"`
	WebhookID            string                        `json:"webhookId"`
	ExtendsCredential    string                        `json:"extendsCredential"`
	RewireOutputLogTo    string                        `json:"rewireOutputLogTo"`
	ForceCustomOperation map[string]string             `json:"forceCustomOperation"`
}

// credentialsDetails is INodeCredentialsDetails: id is string | null.
type credentialsDetails struct {
	ID   *string `json:"id"`
	Name string  `json:"name"`
}

// nodeConnections is INodeConnections: connection type → NodeInputConnections
// (Array<IConnection[] | null>), one entry per output of the source node.
type nodeConnections map[string][][]connection

// connection is IConnection.
type connection struct {
	Node  string `json:"node"`
	Type  string `json:"type"`
	Index *int   `json:"index"`
}

// nodeTypes are the node types the examples may use, with the versions
// n8n-nodes-base 1.121.0 declares for each.
var nodeTypes = map[string][]float64{
	"n8n-nodes-base.httpRequest":     {1, 2, 3, 4, 4.1, 4.2, 4.3},
	"n8n-nodes-base.webhook":         {1, 1.1, 2, 2.1},
	"n8n-nodes-base.manualTrigger":   {1},
	"n8n-nodes-base.scheduleTrigger": {1, 1.1, 1.2, 1.3},
	"n8n-nodes-base.set":             {1, 2, 3, 3.1, 3.2, 3.3, 3.4},
	"n8n-nodes-base.code":            {1, 2},
	"n8n-nodes-base.switch":          {1, 2, 3, 3.1, 3.2, 3.3, 3.4},
	"n8n-nodes-base.if":              {1, 2, 2.1, 2.2, 2.3},
	"n8n-nodes-base.wait":            {1, 1.1},
	"n8n-nodes-base.noOp":            {1},
	"n8n-nodes-base.stopAndError":    {1},
	"n8n-nodes-base.emailSend":       {1, 2, 2.1},
}

// triggers start a workflow: they have no input.
var triggers = map[string]bool{
	"n8n-nodes-base.webhook": true, "n8n-nodes-base.manualTrigger": true, "n8n-nodes-base.scheduleTrigger": true,
}

const httpRequest = "n8n-nodes-base.httpRequest"

// relayURL is how every HTTP Request node names the relay.
const relayURL = "={{ $env.GMAILRELAY_URL }}"

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// files lists the example workflows; there must be the three of the guide.
func files(t *testing.T) []string {
	t.Helper()
	got, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gmail-compatible-raw.json", "review-queue-alert.json", "send-via-relay.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("example workflows = %v, want %v", got, want)
	}
	return got
}

func load(t *testing.T, name string) (workflow, []byte) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var wf workflow
	if err := dec.Decode(&wf); err != nil {
		t.Fatalf("%s does not decode as n8n's IWorkflowBase: %v", name, err)
	}
	return wf, data
}

func TestWorkflowsHaveN8nShape(t *testing.T) {
	for _, name := range files(t) {
		t.Run(name, func(t *testing.T) {
			wf, _ := load(t, name)
			if strings.TrimSpace(wf.Name) == "" {
				t.Error("workflow has no name")
			}
			if wf.Active == nil || *wf.Active {
				t.Error("active must be present and false: an imported example must not start on its own")
			}
			if len(wf.Nodes) == 0 {
				t.Fatal("no nodes")
			}
			byName := map[string]node{}
			ids := map[string]bool{}
			for i, n := range wf.Nodes {
				where := fmt.Sprintf("nodes[%d] %q", i, n.Name)
				if n.Name == "" {
					t.Errorf("%s: no name", where)
				}
				if _, dup := byName[n.Name]; dup {
					t.Errorf("%s: node names must be unique (connections refer to them)", where)
				}
				byName[n.Name] = n
				if !uuidPattern.MatchString(n.ID) || ids[n.ID] {
					t.Errorf("%s: id %q is not a unique UUID", where, n.ID)
				}
				ids[n.ID] = true
				versions, known := nodeTypes[n.Type]
				if !known {
					t.Errorf("%s: type %q is not one of the n8n-nodes-base types the examples use", where, n.Type)
				}
				if n.TypeVersion == nil {
					t.Errorf("%s: no typeVersion", where)
				} else if known && !slices.Contains(versions, *n.TypeVersion) {
					t.Errorf("%s: %s has no typeVersion %v (known: %v)", where, n.Type, *n.TypeVersion, versions)
				}
				if len(n.Position) != 2 {
					t.Errorf("%s: position = %v, want [x, y]", where, n.Position)
				}
				if n.Parameters == nil {
					t.Errorf("%s: parameters missing (use {} for none)", where)
				}
				for typ, c := range n.Credentials {
					if c.ID != nil {
						t.Errorf("%s: credential %s has id %q; reference credentials by name only (id null)", where, typ, *c.ID)
					}
					if strings.TrimSpace(c.Name) == "" {
						t.Errorf("%s: credential %s has no name", where, typ)
					}
				}
				if n.RetryOnFail {
					// n8n clamps maxTries to 2..5 and waitBetweenTries to 0..5000 ms
					// (n8n-core 1.122.0, workflow-execute.js): stay inside so the
					// numbers shown are the numbers used.
					if n.MaxTries == nil || *n.MaxTries < 2 || *n.MaxTries > 5 {
						t.Errorf("%s: maxTries = %v, want 2..5", where, n.MaxTries)
					}
					if n.WaitBetweenTries == nil || *n.WaitBetweenTries < 0 || *n.WaitBetweenTries > 5000 {
						t.Errorf("%s: waitBetweenTries = %v, want 0..5000", where, n.WaitBetweenTries)
					}
				}
			}
			checkConnections(t, wf, byName)
		})
	}
}

// outputs is how many main outputs a node has.
func outputs(n node) int {
	switch n.Type {
	case "n8n-nodes-base.if":
		return 2
	case "n8n-nodes-base.switch":
		rules, _ := n.Parameters["rules"].(map[string]any)
		values, _ := rules["values"].([]any)
		k := len(values)
		if opts, _ := n.Parameters["options"].(map[string]any); opts["fallbackOutput"] == "extra" {
			k++
		}
		return k
	case "n8n-nodes-base.stopAndError":
		return 0
	}
	return 1
}

func checkConnections(t *testing.T, wf workflow, byName map[string]node) {
	t.Helper()
	incoming := map[string]int{}
	for from, conns := range wf.Connections {
		src, ok := byName[from]
		if !ok {
			t.Errorf("connections: source %q is not a node", from)
			continue
		}
		for typ, outs := range conns {
			if typ != "main" {
				t.Errorf("connections[%q]: type %q, want only main", from, typ)
			}
			if len(outs) > outputs(src) {
				t.Errorf("connections[%q]: %d outputs wired, the node has %d", from, len(outs), outputs(src))
			}
			for o, targets := range outs {
				for _, c := range targets {
					dst, ok := byName[c.Node]
					switch {
					case !ok:
						t.Errorf("connections[%q].main[%d]: target %q is not a node", from, o, c.Node)
					case c.Type != "main":
						t.Errorf("connections[%q].main[%d]: type %q, want main", from, o, c.Type)
					case c.Index == nil || *c.Index != 0:
						t.Errorf("connections[%q].main[%d]: index %v, want 0 (every target has one input)", from, o, c.Index)
					case triggers[dst.Type]:
						t.Errorf("connections[%q].main[%d]: %q is a trigger and takes no input", from, o, c.Node)
					}
					incoming[c.Node]++
				}
			}
		}
	}
	for name, n := range byName {
		switch {
		case triggers[n.Type] && incoming[name] > 0:
			t.Errorf("trigger %q has an input", name)
		case !triggers[n.Type] && incoming[name] == 0:
			t.Errorf("node %q is not connected to anything upstream", name)
		}
	}
}

// relayPaths are the relay endpoints the examples call, with the method.
var relayPaths = map[string]string{
	"/v1/send":                         "POST",
	"/gmail/v1/users/me/messages/send": "POST",
	"/v1/jobs":                         "GET",
	"/v1/msgid":                        "GET",
}

func TestHTTPRequestNodesCallTheRelay(t *testing.T) {
	calls := 0
	for _, name := range files(t) {
		wf, _ := load(t, name)
		for _, n := range wf.Nodes {
			if n.Type != httpRequest {
				continue
			}
			calls++
			t.Run(name+"/"+n.Name, func(t *testing.T) {
				if got, want := *n.TypeVersion, 4.2; got != want {
					t.Errorf("typeVersion = %v, want %v", got, want)
				}
				url, _ := n.Parameters["url"].(string)
				path, ok := strings.CutPrefix(url, relayURL)
				if !ok {
					t.Fatalf("url = %q, want it to start with %s", url, relayURL)
				}
				method, known := relayPaths[path]
				if !known {
					t.Fatalf("url path %q is not a relay endpoint the guide documents", path)
				}
				got, _ := n.Parameters["method"].(string)
				if got == "" {
					got = "GET" // the node's default
				}
				if got != method {
					t.Errorf("method = %q, want %q", got, method)
				}
				if n.Parameters["authentication"] != "genericCredentialType" || n.Parameters["genericAuthType"] != "httpHeaderAuth" {
					t.Errorf("authentication = %v/%v, want a Header Auth credential", n.Parameters["authentication"], n.Parameters["genericAuthType"])
				}
				if _, ok := n.Credentials["httpHeaderAuth"]; !ok {
					t.Error("no httpHeaderAuth credential (the bearer token)")
				}
				if method != "POST" {
					return
				}
				if !n.RetryOnFail {
					t.Error("a send must have Retry On Fail on: the relay makes it safe")
				}
				opts, _ := n.Parameters["options"].(map[string]any)
				resp, _ := opts["response"].(map[string]any)
				r, _ := resp["response"].(map[string]any)
				if r["fullResponse"] != true || r["neverError"] != true {
					t.Errorf("options.response.response = %v, want fullResponse and neverError on (branch on the status)", r)
				}
				if n.Parameters["sendBody"] != true || n.Parameters["specifyBody"] != "json" {
					t.Errorf("sendBody/specifyBody = %v/%v, want a JSON body", n.Parameters["sendBody"], n.Parameters["specifyBody"])
				}
			})
		}
	}
	if calls < 3 {
		t.Errorf("%d HTTP Request nodes in the examples, want at least 3", calls)
	}
}

// bodyKeys reads the object literal of a jsonBody expression written as
// JSON.stringify({ a: ..., b: { c: ..., }, }), one key per line, and
// returns the keys as paths ("job.customer_id").
func bodyKeys(expr string) []string {
	key := regexp.MustCompile(`^\s*([A-Za-z_]+):\s*(\{)?`)
	var keys, stack []string
	for _, line := range strings.Split(expr, "\n") {
		if strings.TrimSpace(line) == "}," || strings.TrimSpace(line) == "}" {
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		m := key.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[2] == "{" {
			stack = append(stack, m[1])
			continue
		}
		keys = append(keys, strings.Join(append(slices.Clone(stack), m[1]), "."))
	}
	return keys
}

// TestSendBodyIsAcceptedByTheRelay builds a body with exactly the fields
// the send workflow's expression writes and hands it to the relay's own
// strict decoder and Prepare: an unknown or misspelt field fails here
// before it fails in n8n.
func TestSendBodyIsAcceptedByTheRelay(t *testing.T) {
	wf, _ := load(t, "send-via-relay.json")
	var expr string
	for _, n := range wf.Nodes {
		if n.Type == httpRequest && strings.HasSuffix(n.Parameters["url"].(string), "/v1/send") {
			expr, _ = n.Parameters["jsonBody"].(string)
		}
	}
	keys := bodyKeys(expr)
	want := []string{"job.customer_id", "job.event_type", "job.order_id", "channel", "to", "subject", "body"}
	if !slices.Equal(keys, want) {
		t.Fatalf("jsonBody fields = %v, want %v", keys, want)
	}
	body := map[string]any{}
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, "job."):
			job, _ := body["job"].(map[string]any)
			if job == nil {
				job = map[string]any{}
				body["job"] = job
			}
			job[strings.TrimPrefix(k, "job.")] = "x_" + k
		case k == "to":
			body[k] = "customer@example.org"
		case k == "channel":
			body[k] = "default"
		default:
			body[k] = "text of " + k
		}
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := api.DecodeSendRequest(data)
	if err != nil {
		t.Fatalf("the relay refuses the workflow's body %s: %v", data, err)
	}
	p, err := relay.Prepare(req, "", "inbound.example.com", time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatalf("the relay cannot prepare the workflow's body: %v", err)
	}
	if got, want := p.Key, "x_job.customer_id:x_job.event_type:x_job.order_id"; got != want {
		t.Errorf("key = %q, want %q (customer_id:event_type:order_id)", got, want)
	}
}

// TestSendRoutesEveryAnswer checks that the status switch names every
// answer of POST /v1/send the guide explains.
func TestSendRoutesEveryAnswer(t *testing.T) {
	wf, _ := load(t, "send-via-relay.json")
	var sw node
	for _, n := range wf.Nodes {
		if n.Type == "n8n-nodes-base.switch" {
			sw = n
		}
	}
	data, err := json.Marshal(sw.Parameters["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Values []struct {
			OutputKey  string `json:"outputKey"`
			Conditions struct {
				Conditions []struct {
					LeftValue string `json:"leftValue"`
				} `json:"conditions"`
			} `json:"conditions"`
		} `json:"values"`
	}
	if err := json.Unmarshal(data, &rules); err != nil {
		t.Fatalf("switch rules: %v", err)
	}
	want := map[string][]string{
		"sent or replayed": {"200"},
		"relay owns it":    {"202"},
		"retry later":      {"409", "429", "503"},
		"fix the workflow": {"400", "401", "413", "422", "502"},
	}
	for _, r := range rules.Values {
		codes, ok := want[r.OutputKey]
		if !ok {
			t.Errorf("unexpected switch output %q", r.OutputKey)
			continue
		}
		delete(want, r.OutputKey)
		if len(r.Conditions.Conditions) != 1 {
			t.Errorf("output %q: %d conditions, want 1", r.OutputKey, len(r.Conditions.Conditions))
			continue
		}
		expr := r.Conditions.Conditions[0].LeftValue
		for _, c := range codes {
			if !strings.Contains(expr, c) {
				t.Errorf("output %q: condition %q does not route %s", r.OutputKey, expr, c)
			}
		}
	}
	for k := range want {
		t.Errorf("switch has no output %q", k)
	}
}

// TestRawRecipeMatchesTheRelay checks that the Code node builds the
// Message-ID with the same recipe as relay.MessageID.
func TestRawRecipeMatchesTheRelay(t *testing.T) {
	wf, _ := load(t, "gmail-compatible-raw.json")
	code := codeNode(wf)
	// The Message-ID comes from the relay (GET /v1/msgid), never from a
	// domain written into the Code node (a hard-coded inbound.example.com
	// would disagree with a plain serve's domain).
	for _, bad := range []string{"DOMAIN", "inbound.example.com", "createHash"} {
		if strings.Contains(code, bad) {
			t.Errorf("Code node still derives the Message-ID itself (%q)", bad)
		}
	}
	var ask *node
	for i, n := range wf.Nodes {
		if n.Type == httpRequest && strings.HasSuffix(fmt.Sprint(n.Parameters["url"]), "/v1/msgid") {
			ask = &wf.Nodes[i]
		}
	}
	if ask == nil {
		t.Fatal("no HTTP Request node asks GET /v1/msgid")
	}
	q, _ := ask.Parameters["queryParameters"].(map[string]any)
	var names []string
	for _, p := range q["parameters"].([]any) {
		names = append(names, fmt.Sprint(p.(map[string]any)["name"]))
	}
	if got := strings.Join(names, ","); got != "customer_id,event_type,order_id" {
		t.Errorf("GET /v1/msgid query = %s, want the job's three parts", got)
	}
	for _, want := range []string{
		"const messageId = item.json.message_id;",
		"const o = orders[i].json;",
		"'Message-ID: ' + messageId",
		"key: item.json.key, message_id: messageId, raw: b64url(raw)",
	} {
		if !strings.Contains(code, want) {
			t.Errorf("Code node lacks %q", want)
		}
	}
	// The send asks for the outbox (the Gmail path answers 429 unless
	// X-Relay-When-Busy: queue: docs/api.md#outbox): a burst over the quota, a Gmail
	// rate limit or an unreachable Gmail is 202 queued, which the IF node
	// passes, instead of a 429 or 503 that would stop the workflow.
	// It also sends the job's key as Idempotency-Key: a Message-ID of the
	// relay's own <job-…@domain> shape is accepted only with the key that
	// derives it (409 reserved_message_id otherwise: docs/api.md#conventions).
	var busy, idemKey string
	for _, n := range wf.Nodes {
		if n.Type != httpRequest || !strings.Contains(fmt.Sprint(n.Parameters["url"]), "/messages/send") {
			continue
		}
		if h, ok := n.Parameters["headerParameters"].(map[string]any); ok && n.Parameters["sendHeaders"] == true {
			for _, p := range h["parameters"].([]any) {
				switch m := p.(map[string]any); m["name"] {
				case "X-Relay-When-Busy":
					busy = fmt.Sprint(m["value"])
				case "Idempotency-Key":
					idemKey = fmt.Sprint(m["value"])
				}
			}
		}
	}
	if busy != "queue" {
		t.Errorf("the Gmail-path send's X-Relay-When-Busy = %q, want queue", busy)
	}
	if idemKey != "={{ $json.key }}" {
		t.Errorf("the Gmail-path send's Idempotency-Key = %q, want the Code node's key", idemKey)
	}
	// The recipe's test vector (docs/design.md#the-handle-a-derived-message-id),
	// computed by the relay.
	if got, want := relay.MessageID("cus_123:order.shipped:ord_456", "inbound.yourdomain.com"),
		"<job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com>"; got != want {
		t.Errorf("relay.MessageID = %s, want %s", got, want)
	}
}

// secretLike matches values that look like credentials pasted into a
// workflow: bearer tokens, Google OAuth tokens and client secrets, private keys.
var secretLike = regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/-]{8,}|ya29\.|1//0[A-Za-z0-9_-]{10,}|GOCSPX-|-----BEGIN [A-Z ]*PRIVATE KEY|"(password|apiKey|api_key|secret|client_secret|refresh_token|access_token|token)"\s*:\s*"[^"]+"`)

func TestNoSecrets(t *testing.T) {
	for _, name := range files(t) {
		t.Run(name, func(t *testing.T) {
			_, data := load(t, name)
			if m := secretLike.Find(data); m != nil {
				t.Errorf("looks like a secret: %q", m)
			}
		})
	}
}

func TestSecretPatternCatches(t *testing.T) {
	for _, s := range []string{
		`"value": "Bearer abcdefgh12345"`, `"token": "x"`, `ya29.a0AfH6`, `"password": "hunter2"`,
	} {
		if !secretLike.MatchString(s) {
			t.Errorf("secret pattern misses %q", s)
		}
	}
}

// The review alert lists one page of the queue (limit=100): its count must
// not claim that page is all of it. The Code node reads `next` and says
// "100+" (and where the rest is) when more jobs wait; count stays the
// number of jobs listed.
func TestReviewAlertCountsOnlyWhatItSaw(t *testing.T) {
	wf, _ := load(t, "review-queue-alert.json")
	code := codeNode(wf)
	for _, want := range []string{"$input.first().json.next", "${more ? '+' : ''} job(s)", "state=review&after="} {
		if !strings.Contains(code, want) {
			t.Errorf("the alert's Code node lacks %q: with more than one page waiting its count is wrong", want)
		}
	}
}

// codeNode returns the JavaScript of wf's Code node ("" without one).
func codeNode(wf workflow) string {
	for _, n := range wf.Nodes {
		if n.Type == "n8n-nodes-base.code" {
			code, _ := n.Parameters["jsCode"].(string)
			return code
		}
	}
	return ""
}
