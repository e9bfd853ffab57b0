#!/usr/bin/env bash
# e2e.sh: a real n8n loads n8n-nodes-gmailrelay and sends through a relay
# in front of the Gmail emulator (all results are emulator results).
#
# Installs n8n $N8N_VERSION once into $GMAILRELAY_N8N_CACHE (default
# ~/.cache/gmailrelay-n8n; reruns reuse it), builds the gmailrelay binary,
# packs the node package (`npm pack`) and installs the tarball into n8n's
# community nodes folder (scripts/install-packed.sh), starts `gmailrelay fakegmail` and `gmailrelay serve` on
# free loopback ports, imports the credential template and workflows with
# the n8n CLI and runs them with `n8n execute --id` (no UI step), then checks
# the emulator's ground truth (GET /_emulator/messages?rfc822msgid=).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
N8N_VERSION="${N8N_VERSION:-1.123.0}"
cache="${GMAILRELAY_N8N_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gmailrelay-n8n}/n8n-$N8N_VERSION"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${E2E_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
start=$(date +%s)
step() { echo "[$(( $(date +%s) - start ))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. n8n at the pinned version, cached. n8n 1.123 depends on xlsx from
# cdn.sheetjs.com; the override takes the same package from the npm registry.
if [ ! -x "$cache/node_modules/.bin/n8n" ]; then
  step "installing n8n@$N8N_VERSION into $cache (cold cache)"
  mkdir -p "$cache"
  echo '{"name":"n8n-e2e","private":true,"overrides":{"xlsx":"0.18.5"}}' >"$cache/package.json"
  (cd "$cache" && npm install --no-audit --no-fund --loglevel=error "n8n@$N8N_VERSION" >/dev/null)
else
  step "n8n@$N8N_VERSION from cache $cache"
fi
n8n="$cache/node_modules/.bin/n8n"

# 2. The relay binary, and the node package as a user gets it: the tarball
# of `npm pack`, installed into n8n's community nodes folder
# ($N8N_USER_FOLDER/.n8n/nodes) with npm, as docs/n8n.md says.
step "building gmailrelay and n8n-nodes-gmailrelay"
(cd "$repo" && go build -o "$work/gmailrelay" ./cmd/gmailrelay)
(cd "$here" && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error >/dev/null; } && npm run --silent build)
tgz="$work/$(cd "$here" && npm pack --silent --pack-destination "$work")"
export N8N_USER_FOLDER="$work/n8n-home"
"$here/scripts/install-packed.sh" "$tgz"
[ -f "$N8N_USER_FOLDER/.n8n/nodes/node_modules/n8n-nodes-gmailrelay/dist/nodes/GmailRelay/GmailRelay.node.json" ] || fail "the packed node is not in n8n's nodes folder"
[ ! -e "$N8N_USER_FOLDER/.n8n/nodes/node_modules/n8n-workflow" ] || fail "npm installed a second n8n-workflow beside the node"
step "installed $(basename "$tgz") ($(du -k "$tgz" | cut -f1) KiB) into $N8N_USER_FOLDER/.n8n/nodes"

# 3. Emulator and relay on free loopback ports; a trial policy (short grace,
# a review channel) and a manual clock, so grace passes without waiting.
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
emu="http://127.0.0.1:$(port)"
relay="http://127.0.0.1:$(port)"
api=e2e-api-token-0123456789
admin=e2e-admin-token-0123456789
cat >"$work/trial.yaml" <<'YAML'
msgid_domain: e2e.gmailrelay.test
channels:
  default: {on_unknown: retry,  grace: 1s, checks: 1, max_attempts: 3}
  billing: {on_unknown: review, grace: 1s, checks: 1}
YAML
# Bounce reports for @bounce.test arrive in INBOX 1 s after the send (the
# emulator's clock is the real one). The raw example sends From
# shop@example.com: a verified send-as alias of the mailbox here, as it must
# be in Gmail (the relay refuses a From Gmail would replace).
"$work/gmailrelay" fakegmail --addr "${emu#http://}" --bounce-delay 1s --send-as shop@example.com >"$work/fakegmail.log" 2>&1 & pids+=($!)
"$work/gmailrelay" serve --addr "${relay#http://}" --data "$work/relay.db" --gmail-endpoint "$emu" \
  --policy "$work/trial.yaml" --api-token "$api" --admin-token "$admin" --clock manual \
  --sweep-interval 1h --log-level warn >"$work/serve.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -fs "$relay/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "$relay/readyz" >/dev/null || { cat "$work/serve.log"; fail "relay not ready"; }
step "relay $relay, emulator $emu"

A=(-H "Authorization: Bearer $api")
D=(-H "Authorization: Bearer $admin" -H 'Content-Type: application/json')
msgid() { curl -fs "${A[@]}" "$relay/v1/msgid?customer_id=cus_e2e&event_type=order.shipped&order_id=$1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["message_id"])'; }
truth() { curl -fs --get --data-urlencode "rfc822msgid=$1" "$emu/_emulator/messages" | python3 -c 'import json,sys;print(json.load(sys.stdin)["count"])'; }
state() { curl -fs "${A[@]}" "$relay/v1/jobs/$(python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1],safe=""))' "$1")" | python3 -c 'import json,sys;print(json.load(sys.stdin)["state"])'; }

# 4. n8n: its own user folder (set above), the node from its nodes folder.
export N8N_ENCRYPTION_KEY=e2e-not-a-secret-key
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_BLOCK_ENV_ACCESS_IN_NODE=false
# No NODE_FUNCTION_ALLOW_BUILTIN: the raw example's Code node needs no crypto.
export GMAILRELAY_URL="$relay" DB_SQLITE_POOL_SIZE=0
# `n8n execute` prints its result with the logger at level info (n8n 1.123:
# packages/cli/dist/commands/execute.js calls this.log → logger.info), so a
# level of warn or error prints nothing at all; text format prints bare
# messages, and the script picks the JSON out of them.
export N8N_LOG_LEVEL=info N8N_LOG_FORMAT=text N8N_RUNNERS_ENABLED=false N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false
sed -e "s/REPLACE_WITH_API_TOKEN/$api/" -e "s#http://127.0.0.1:8080#$relay#" \
  "$repo/examples/n8n/credentials/gmailrelay.credentials.json" >"$work/credentials.json"
step "n8n import:credentials (the shipped template)"
"$n8n" import:credentials --input="$work/credentials.json" 2>&1 | grep -v '^$' | tail -2
mkdir -p "$work/workflows"
cp "$here"/e2e/*.json "$repo"/examples/n8n/manual/*.json "$repo"/examples/n8n/node/*.json "$work/workflows/"
step "n8n import:workflow --separate: $(cd "$work/workflows" && echo *.json)"
"$n8n" import:workflow --separate --input="$work/workflows" 2>&1 | grep -i -e 'imported' -e 'error:' | grep -v -e 'Could not find workflow' | tail -3 || true

# run ID: n8n execute --id ID --rawOutput; prints "Node:output" for every
# node that emitted items (output 0..n of a node are named by its index; the
# Send node's are 0 Sent, 1 Pending, 2 Retry Later, 3 Needs Fix, and 4 Error
# with "Continue (using error output)") and "result:OUTCOME:STATUS:REPLAYED"
# for every Send result; on stderr the fields of each Send result.
# run_failed ID: the execution must fail; prints "failed:ERROR_NAME:NODE" and
# the error's message on stderr.
run() {
  local out="$work/run-$1-$RANDOM.json"
  "$n8n" execute --id="$1" --rawOutput >"$out" 2>"$out.err" </dev/null || { { tail -c 3000 "$out"; tail -c 3000 "$out.err"; } >&2; fail "n8n execute --id=$1"; }
  read_run "$1" "$out"
}
run_failed() {
  local out="$work/run-$1-$RANDOM.json"
  if "$n8n" execute --id="$1" --rawOutput >"$out" 2>"$out.err" </dev/null; then fail "n8n execute --id=$1 succeeded; want a failed execution"; fi
  E2E_WANT_FAILED=1 read_run "$1" "$out"
}
read_run() {
  local out="$2"
  python3 - "$out" <<'PY' || { { echo "--- n8n execute output:"; tail -c 3000 "$out"; tail -c 3000 "$out.err"; } >&2; fail "could not read the execution of $1"; }
import json, os, sys
lines = open(sys.argv[1]).read().split("\n")
# The result is JSON.stringify(run, null, 2): a line "{" ... a line "}".
# Other info lines (community packages, migrations) may come before it.
data = None
for i, line in enumerate(lines):
    if line == "{":
        try:
            data, _ = json.JSONDecoder().raw_decode("\n".join(lines[i:]))
            break
        except ValueError:
            continue
if not isinstance(data, dict) or "data" not in data:
    sys.exit("no execution JSON in the output")
res = data["data"]["resultData"]
if os.environ.get("E2E_WANT_FAILED"):
    err = res.get("error")
    if not err:
        sys.exit("the execution did not fail")
    print("  %s in %s: %s (item %s)" % (err.get("name"), (err.get("node") or {}).get("name"), err.get("message"), (err.get("context") or {}).get("itemIndex")), file=sys.stderr)
    print("failed:%s:%s" % (err.get("name"), (err.get("node") or {}).get("name", "").replace(" ", "_")))
    sys.exit(0)
if res.get("error"):
    sys.exit("execution error: %s" % res["error"].get("message"))
names = {0: "Sent", 1: "Pending", 2: "Retry_Later", 3: "Needs_Fix", 4: "Error"}
ran = []
for node, runs in res.get("runData", {}).items():
    for r in runs:
        for idx, items in enumerate((r.get("data") or {}).get("main") or []):
            if not items:
                continue
            ran.append("%s:%d" % (node.replace(" ", "_"), idx))
            for item in items:
                j = item.get("json", {})
                if node.startswith("Send Email") and "error" in j and "outcome" not in j:
                    ran.append("error_item:%d" % idx)
                    print("  %s output %d (%s): %s" % (node, idx, names.get(idx, "?"), json.dumps(j)), file=sys.stderr)
                if "outcome" in j and node.startswith("Send Email"):
                    ran.append("result:%s:%s:%s" % (j["outcome"], j.get("status"), str(j.get("replayed")).lower()))
                    print("  %s output %d (%s): %s" % (node, idx, names.get(idx, "?"), json.dumps({k: j.get(k) for k in ("outcome", "status", "state", "message_id", "replayed", "http_tries", "error") if k in j})), file=sys.stderr)
print(" ".join(sorted(ran)))
PY
}
# expect_ran NODE:OUTPUT "$ran": the node emitted items on that output.
# NODE:OUTPUT may be a glob (result:pending:202:*).
expect_ran() { case " $2 " in *" "$1" "*) ;; *) fail "expected $1 in: $2";; esac; }

# 5. Send once; re-run replays; ground truth stays 1.
export E2E_ORDER_ID=ord_1001 E2E_CHANNEL=default
id1=$(msgid ord_1001)
step "execute send (first run), Message-ID $id1"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Sent:0 "$ran"; expect_ran result:sent:200:false "$ran"
[ "$(truth "$id1")" = 1 ] || fail "ground truth after the first run: $(truth "$id1")"
step "emulator ground truth for $id1: $(truth "$id1")"
step "execute send (re-run, same order)"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Sent:0 "$ran"; expect_ran result:sent:200:true "$ran"
[ "$(truth "$id1")" = 1 ] || fail "ground truth after the re-run: $(truth "$id1")"
step "emulator ground truth for $id1 after the re-run: $(truth "$id1") (replayed)"

# 5b. A refusal is an n8n error: with On Error "Stop Workflow" (send.json) the
# node fails the execution with a NodeApiError (what starts an Error
# Workflow); with "Continue (using error output)" (refused.json) the item
# {error} leaves on n8n's Error output. Nothing is sent either way.
export E2E_ORDER_ID=ord_1008 E2E_TO='not an address'
id8=$(msgid ord_1008)
step "execute send with To 'not an address' (the relay answers 400)"
ran=$(run_failed gmrE2eSendNode01); echo "  ran: $ran"; expect_ran 'failed:NodeApiError:Send_Email_(safe_retry)' "$ran"
unset E2E_TO
step "execute refused.json (same refusal, On Error: continue using error output)"
ran=$(run gmrE2eRefused001); echo "  ran: $ran"; expect_ran Out_Error:0 "$ran"; expect_ran error_item:4 "$ran"
[ "$(truth "$id8")" = 0 ] || fail "a refused send reached the mailbox: ground truth $(truth "$id8")"

# 6. A dropped response: the node repeats the request, gets 202, ends on Pending;
# the sweeper reconciles it to sent.
export E2E_ORDER_ID=ord_1002
id2=$(msgid ord_1002)
curl -fs "${D[@]}" -X POST "$relay/admin/faults" -d '{"mode":"forward-then-drop-response","count":1}' >/dev/null
step "execute send with forward-then-drop-response armed, Message-ID $id2"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Pending:0 "$ran"; expect_ran 'result:pending:202:*' "$ran"
step "relay state $(state "$id2"), emulator ground truth $(truth "$id2")"
[ "$(state "$id2")" = unknown ] || fail "before the sweep the job is $(state "$id2"), want unknown (the sweep reconciles it)"
curl -fs "${D[@]}" -X POST "$relay/admin/clock" -d '{"advance":"10s"}' >/dev/null
curl -fs "${D[@]}" -X POST "$relay/admin/sweep" >/dev/null
[ "$(state "$id2")" = sent ] || fail "after the sweep the job is $(state "$id2"), want sent"
[ "$(truth "$id2")" = 1 ] || fail "ground truth after reconciliation: $(truth "$id2")"
step "after clock +10s and POST /admin/sweep: relay state $(state "$id2"), emulator ground truth $(truth "$id2")"

# 7. A review job (billing is a review channel): the emulator stores the send
# twice (duplicate), the relay's answer is dropped, the sweep finds it twice.
export E2E_ORDER_ID=ord_1003 E2E_CHANNEL=billing
id3=$(msgid ord_1003)
curl -fs -X POST "$emu/_emulator/faults" -H 'Content-Type: application/json' -d '{"method":"send","action":"duplicate"}' >/dev/null
curl -fs "${D[@]}" -X POST "$relay/admin/faults" -d '{"mode":"forward-then-drop-response","count":1}' >/dev/null
step "execute send on billing with emulator duplicate + dropped response, Message-ID $id3"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Pending:0 "$ran"; expect_ran 'result:pending:202:*' "$ran"
curl -fs "${D[@]}" -X POST "$relay/admin/clock" -d '{"advance":"10s"}' >/dev/null
curl -fs "${D[@]}" -X POST "$relay/admin/sweep" >/dev/null
step "relay state $(state "$id3"), emulator ground truth $(truth "$id3")"
[ "$(state "$id3")" = review ] || fail "want review"

# 7b. A bounce: one of two recipients is @bounce.test; the emulator accepts
# the send and puts a delivery report in INBOX a second later; the relay's
# history tail (sweep passes on its manual clock) records it on the job,
# which stays sent. The Trigger below must emit it with reason "bounced".
export E2E_ORDER_ID=ord_1004 E2E_CHANNEL=default E2E_TO='ok@example.org, x@bounce.test'
id4=$(msgid ord_1004)
step "execute send to ok@example.org and x@bounce.test, Message-ID $id4"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Sent:0 "$ran"
unset E2E_TO
delivery() { curl -fs "${A[@]}" "$relay/v1/jobs/$(python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1],safe=""))' "$1")" | python3 -c 'import json,sys;d=json.load(sys.stdin);print(d["state"], (d.get("delivery") or {}).get("state"), ",".join((d.get("delivery") or {}).get("bounced") or []))'; }
for _ in $(seq 60); do
  curl -fs "${D[@]}" -X POST "$relay/admin/clock" -d '{"advance":"5s"}' >/dev/null
  curl -fs "${D[@]}" -X POST "$relay/admin/sweep" >/dev/null
  [ "$(delivery "$id4")" = "sent partly_bounced x@bounce.test" ] && break
  sleep 0.5
done
step "relay: $(delivery "$id4") (state, delivery, bounced); emulator bounced: $(curl -fs --get --data-urlencode "rfc822msgid=$id4" "$emu/_emulator/messages" | python3 -c 'import json,sys;print(json.dumps(json.load(sys.stdin).get("bounced")))')"
[ "$(delivery "$id4")" = "sent partly_bounced x@bounce.test" ] || fail "the bounce is not on the job: $(delivery "$id4")"
# The Trigger is a polling trigger: `n8n execute` only starts workflows at a
# Manual Trigger (n8n's STARTING_NODES) and runs a poller only in "manual"
# mode, never in "cli". So the n8n way: start n8n on a loopback port,
# activate the workflow, and read its execution from n8n's database. n8n
# polls once at activation (n8n-core active-workflows.js: activatePolling
# runs executeTrigger before registering the cron), so no minute passes.
# `n8n update:workflow --active=true` cannot activate a workflow that came
# from `n8n import:workflow` in 1.123.0 (SQLITE_CONSTRAINT: FOREIGN KEY: the
# import writes no workflow_history version for activeVersionId to point at),
# so the script does what the editor's Active toggle does, with n8n's REST
# API: set up the owner, then PATCH the workflow with active: true (which
# saves a version and activates it in the running n8n).
n8nurl="http://127.0.0.1:$(port)"
step "n8n start on $n8nurl; activate the Trigger workflows through n8n's REST API"
N8N_PORT="${n8nurl##*:}" N8N_LISTEN_ADDRESS=127.0.0.1 N8N_HOST=127.0.0.1 N8N_SECURE_COOKIE=false \
  N8N_GRACEFUL_SHUTDOWN_TIMEOUT=5 N8N_PERSONALIZATION_ENABLED=false N8N_TEMPLATES_ENABLED=false \
  "$n8n" start >"$work/n8n-start.log" 2>&1 </dev/null & n8npid=$!; pids+=($n8npid)
# n8n listens (and answers /healthz, even /rest/settings) before it has
# registered its REST controllers; it prints "Editor is now accessible via"
# once the server has started and the active workflows are loaded.
ready=""
for _ in $(seq 900); do
  grep -q 'Editor is now accessible via' "$work/n8n-start.log" && { ready=1; break; }
  kill -0 "$n8npid" 2>/dev/null || break
  sleep 0.2
done
[ -n "$ready" ] || { tail -40 "$work/n8n-start.log"; fail "n8n start did not get ready within 180 s"; }
jar="$work/n8n-cookies"; B=(-H 'browser-id: gmailrelay-e2e' -H 'Content-Type: application/json' -b "$jar" -c "$jar")
curl -fsS "${B[@]}" -X POST "$n8nurl/rest/owner/setup" \
  -d '{"email":"owner@e2e.gmailrelay.test","firstName":"e2e","lastName":"owner","password":"E2e-not-a-secret-1"}' >/dev/null || fail "n8n owner setup"
# The codex file beside each node reached n8n (its nodes panel reads it).
curl -fsS "${B[@]}" "$n8nurl/types/nodes.json" | python3 -c '
import json, sys
types = {t["name"]: t for t in json.load(sys.stdin)}
for name in ("n8n-nodes-gmailrelay.gmailRelay", "n8n-nodes-gmailrelay.gmailRelayTrigger"):
    codex = (types.get(name) or {}).get("codex") or {}
    if codex.get("categories") != ["Communication"] or not codex.get("resources", {}).get("primaryDocumentation"):
        sys.exit("%s: codex not loaded: %s" % (name, json.dumps(codex)))
print("  n8n loaded both nodes from the package with their codex (category Communication, documentation links)")' || fail "codex"
# activate ID: what the editor's Active toggle does (PATCH with the current versionId and name).
activate() {
  curl -fsS "${B[@]}" "$n8nurl/rest/workflows/$1" | python3 -c 'import json,sys;d=json.load(sys.stdin)["data"];d={"versionId":d["versionId"],"name":d["name"],"active":True};print(json.dumps(d))' >"$work/activate-$1.req" || fail "GET workflow $1"
  curl -sS "${B[@]}" -X PATCH "$n8nurl/rest/workflows/$1" -d @"$work/activate-$1.req" >"$work/activate-$1.json" || fail "PATCH workflow $1"
  python3 -c 'import json,sys;d=json.load(open(sys.argv[1]));d=d.get("data",d);sys.exit(0 if d.get("active") else "not active: %s" % json.dumps(d)[:800])' "$work/activate-$1.json" || { tail -20 "$work/n8n-start.log"; fail "activating workflow $1"; }
}
activate gmrE2eTrigger001
activate gmrExBounce00001 # examples/n8n/node/notify-on-bounce.json, as the guide ships it
step "Trigger workflows active; waiting for their executions in n8n's database"
# wait_execution WORKFLOW_ID: the first finished execution of that workflow,
# checked (the review and the bounced job; see the Python below).
wait_execution() {
E2E_WORKFLOW="$1" python3 - "$N8N_USER_FOLDER/.n8n/database.sqlite" "$id3" "${E2E_TRIGGER_DEADLINE:-180}" "$n8npid" "$id4" <<'PY'
import json, os, sqlite3, sys, time
db, want, deadline, pid, bounced = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def unflatten(text):
    # n8n stores execution data with `flatted`: a list whose first element is
    # the root; string values inside objects and lists are indices into it.
    arr, memo = json.loads(text), {}
    def rev(i):
        if i in memo:
            return memo[i]
        v = arr[i]
        if isinstance(v, dict):
            out = memo[i] = {}
            for k, x in v.items():
                out[k] = rev(int(x)) if isinstance(x, str) else x
            return out
        if isinstance(v, list):
            out = memo[i] = []
            out.extend(rev(int(x)) if isinstance(x, str) else x for x in v)
            return out
        return v
    return rev(0)

while True:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("n8n start exited before the Trigger's execution finished")
    row = None
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=2)
        row = con.execute(
            "SELECT e.id, e.status, e.mode, d.data FROM execution_entity e JOIN execution_data d ON d.executionId = e.id "
            "WHERE e.workflowId = ? AND e.status IN ('success', 'error', 'crashed') ORDER BY e.id LIMIT 1", (os.environ.get("E2E_WORKFLOW", "gmrE2eTrigger001"),)).fetchone()
        con.close()
    except sqlite3.Error:
        pass  # the database or its tables are not there yet
    if row:
        break
    if time.time() > deadline:
        sys.exit("no finished execution of the Trigger workflow before the deadline")
    time.sleep(0.5)
eid, status, mode, data = row
if status != "success":
    sys.exit("the Trigger's execution %s ended %s" % (eid, status))
run = unflatten(data)["resultData"]["runData"]
if os.environ.get("E2E_WORKFLOW") == "gmrExBounce00001":
    # The guide's notify-on-bounce workflow: the bounced job reaches Notify
    # formatted; the review job leaves Bounced? on its false branch.
    notes = [i["json"] for i in run["Notify"][0]["data"]["main"][0]]
    other = [i["json"].get("reason") for i in run["Review or queued"][0]["data"]["main"][0]]
    if [n.get("message_id") for n in notes] != [bounced] or notes[0].get("bounced") != ["x@bounce.test"] or "x@bounce.test" not in notes[0].get("text", "") or other != ["review"]:
        sys.exit("notify-on-bounce execution %s: Notify got %s, Review or queued got %s" % (eid, json.dumps(notes)[:800], other))
    print("execution %s (mode %s, %s): Notify got %s: %s" % (eid, mode, status, notes[0]["subject"], notes[0]["text"].split("\n")[0]))
    sys.exit(0)
items = [i["json"] for i in run["Tell a human"][0]["data"]["main"][0]]
hits = [j for j in items if j.get("message_id") == want and j.get("state") == "review" and j.get("reason") == "review"
        and "/ui/jobs/" in (j.get("url") or "") and "/ui/jobs/" in (j.get("resolve_url") or "")]
if not hits:
    sys.exit("the Trigger's execution %s did not carry %s in review: %s" % (eid, want, json.dumps(items)[:500]))
b = [j for j in items if j.get("message_id") == bounced and j.get("reason") == "bounced" and j.get("state") == "sent" and j.get("bounced") == 1
     and (j.get("delivery") or {}).get("bounced") == ["x@bounce.test"] and "/ui/jobs/" in (j.get("url") or "")]
if not b:
    sys.exit("the Trigger's execution %s did not carry %s as bounced: %s" % (eid, bounced, json.dumps(items)[:800]))
print("execution %s (mode %s, %s): Tell a human got %d item(s), %s state=review reason=review resolve_url=%s" % (eid, mode, status, len(items), want, hits[0].get("resolve_url")))
print("  and %s state=sent reason=bounced delivery=%s" % (bounced, json.dumps(b[0]["delivery"])))
PY
}
trig=$(wait_execution gmrE2eTrigger001) || { tail -40 "$work/n8n-start.log"; fail "the gmailrelay Trigger did not fire for the review and the bounced job"; }
echo "  $trig"
trig=$(wait_execution gmrExBounce00001) || { tail -40 "$work/n8n-start.log"; fail "the notify-on-bounce example did not notify"; }
echo "  $trig"
kill "$n8npid" 2>/dev/null; wait "$n8npid" 2>/dev/null || true
step "n8n start stopped"

# 8. The guide's examples, Manual Trigger variants, each with the output it
# must end on (the review alert sees the billing job left in review above).
declare -A want_out=([gmrExManualSend1]=Sent:0 [gmrExManualRaw01]=Done:0 [gmrExManualAlrt1]=Email_the_operator:0)
for wf in "$repo"/examples/n8n/manual/*.json; do
  wid=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["id"])' "$wf")
  [ -n "${want_out[$wid]:-}" ] || fail "example $(basename "$wf") ($wid) has no expected output in e2e.sh"
  step "execute example $(basename "$wf") ($wid)"
  ran=$(run "$wid"); echo "  ran: $ran"
  case " $ran " in *" Fix_the_workflow:"*|*" Unexpected_answer:"*|*" Relay_refused_it:"*) fail "example $(basename "$wf") ended on a failure output";; esac
  expect_ran "${want_out[$wid]}" "$ran"
done
# Each example sends one job: send-via-relay ord_456 (/v1/send), the raw
# recipe ord_457 (the Gmail API path, Message-ID from GET /v1/msgid).
for o in ord_456:send-via-relay ord_457:gmail-compatible-raw; do
  ex=$(curl -fs "${A[@]}" "$relay/v1/msgid?key=cus_123:order.shipped:${o%%:*}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["message_id"])')
  [ "$(truth "$ex")" = 1 ] || fail "${o#*:} example: ground truth for $ex is $(truth "$ex"), want 1"
  step "${o#*:} example: emulator ground truth for $ex: $(truth "$ex")"
done
# Every e-mail the emulator delivered: ord_1001, ord_1002, ord_1003 twice (the
# duplicate fault, the review job), ord_1004 (delivered to ok@example.org,
# bounced for x@bounce.test), ord_456, ord_457; the re-run added none.
stats=$(curl -fs "$emu/_emulator/stats")
step "emulator stats: $stats"
[ "$(echo "$stats" | python3 -c 'import json,sys;print(json.load(sys.stdin)["deliveries"])')" = 7 ] || fail "emulator deliveries: want 7"
step "PASS (emulator results)"
