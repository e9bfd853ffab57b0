#!/usr/bin/env bash
# e2e.sh: a real n8n loads n8n-nodes-gmailrelay and sends through a relay
# in front of the Gmail emulator (all results are emulator results).
#
# Installs n8n $N8N_VERSION once into $GMAILRELAY_N8N_CACHE (default
# ~/.cache/gmailrelay-n8n; reruns reuse it), builds the gmailrelay binary and
# the node package, starts `gmailrelay fakegmail` and `gmailrelay serve` on
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
fail() { echo "FAIL: $*"; exit 1; }

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

# 2. The relay binary and the node package.
step "building gmailrelay and n8n-nodes-gmailrelay"
(cd "$repo" && go build -o "$work/gmailrelay" ./cmd/gmailrelay)
(cd "$here" && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error >/dev/null; } && npm run --silent build)
mkdir -p "$work/ext/n8n-nodes-gmailrelay"
cp -r "$here/dist/credentials" "$here/dist/nodes" "$here/package.json" "$work/ext/n8n-nodes-gmailrelay/"

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
"$work/gmailrelay" fakegmail --addr "${emu#http://}" >"$work/fakegmail.log" 2>&1 & pids+=($!)
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

# 4. n8n: its own user folder, the node from N8N_CUSTOM_EXTENSIONS.
export N8N_USER_FOLDER="$work/n8n-home" N8N_ENCRYPTION_KEY=e2e-not-a-secret-key N8N_CUSTOM_EXTENSIONS="$work/ext"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_BLOCK_ENV_ACCESS_IN_NODE=false
export NODE_FUNCTION_ALLOW_BUILTIN=crypto GMAILRELAY_URL="$relay" DB_SQLITE_POOL_SIZE=0
export N8N_LOG_LEVEL=warn N8N_RUNNERS_ENABLED=false N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false
sed -e "s/REPLACE_WITH_API_TOKEN/$api/" -e "s#http://127.0.0.1:8080#$relay#" \
  "$repo/examples/n8n/credentials/gmailrelay.credentials.json" >"$work/credentials.json"
step "n8n import:credentials (the shipped template)"
"$n8n" import:credentials --input="$work/credentials.json" 2>&1 | grep -v '^$' | tail -2
mkdir -p "$work/workflows"
cp "$here"/e2e/*.json "$repo"/examples/n8n/manual/*.json "$work/workflows/"
step "n8n import:workflow --separate: $(cd "$work/workflows" && echo *.json)"
"$n8n" import:workflow --separate --input="$work/workflows" 2>&1 | grep -i -e 'imported' -e 'error:' | grep -v -e 'Could not find workflow' | tail -3 || true

# run ID: n8n execute --id ID --rawOutput; prints which nodes ran.
run() {
  local out="$work/run-$1-$RANDOM.json"
  "$n8n" execute --id="$1" --rawOutput >"$out" 2>"$out.err" </dev/null || { cat "$out" "$out.err"; fail "n8n execute --id=$1"; }
  python3 - "$out" <<'PY' || { { echo "--- n8n execute output:"; head -c 3000 "$out"; head -c 3000 "$out.err"; } >&2; fail "could not read the execution of $1"; }
import json, sys
text = open(sys.argv[1]).read()
data = json.loads(text[text.index('{'):])
run = data.get("data", data).get("resultData", {}).get("runData", {})
ran = sorted(n for n, r in run.items() if r and r[0].get("data", {}).get("main") and any(r[0]["data"]["main"]))
print(" ".join(n.replace(" ", "_") for n in ran))
for n, r in run.items():
    for out in (r[0].get("data", {}).get("main") or []):
        for item in out or []:
            j = item.get("json", {})
            if "outcome" in j or "message_id" in j:
                print("  %s: %s" % (n, json.dumps({k: j.get(k) for k in ("outcome", "status", "state", "message_id", "replayed", "attempts") if k in j})), file=sys.stderr)
PY
}
expect_ran() { case " $2 " in *" $1 "*) ;; *) fail "expected node $1 to run, ran: $2";; esac; }

# 5. Send once; re-run replays; ground truth stays 1.
export E2E_ORDER_ID=ord_1001 E2E_CHANNEL=default
id1=$(msgid ord_1001)
step "execute send (first run), Message-ID $id1"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Sent "$ran"
[ "$(truth "$id1")" = 1 ] || fail "ground truth after the first run: $(truth "$id1")"
step "emulator ground truth for $id1: $(truth "$id1")"
step "execute send (re-run, same order)"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Sent "$ran"
[ "$(truth "$id1")" = 1 ] || fail "ground truth after the re-run: $(truth "$id1")"
step "emulator ground truth for $id1 after the re-run: $(truth "$id1") (replayed)"

# 6. A dropped response: the node repeats the request, gets 202, ends on Pending;
# the sweeper reconciles it to sent.
export E2E_ORDER_ID=ord_1002
id2=$(msgid ord_1002)
curl -fs "${D[@]}" -X POST "$relay/admin/faults" -d '{"mode":"forward-then-drop-response","count":1}' >/dev/null
step "execute send with forward-then-drop-response armed, Message-ID $id2"
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Pending "$ran"
step "relay state $(state "$id2"), emulator ground truth $(truth "$id2")"
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
ran=$(run gmrE2eSendNode01); echo "  ran: $ran"; expect_ran Out_Pending "$ran"
curl -fs "${D[@]}" -X POST "$relay/admin/clock" -d '{"advance":"10s"}' >/dev/null
curl -fs "${D[@]}" -X POST "$relay/admin/sweep" >/dev/null
step "relay state $(state "$id3"), emulator ground truth $(truth "$id3")"
[ "$(state "$id3")" = review ] || fail "want review"
step "execute the gmailrelay Trigger workflow"
ran=$(run gmrE2eTrigger001); echo "  ran: $ran"; expect_ran Tell_a_human "$ran"

# 8. The guide's examples, Manual Trigger variants.
for wf in "$repo"/examples/n8n/manual/*.json; do
  [ -e "$wf" ] || continue
  wid=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["id"])' "$wf")
  step "execute example $(basename "$wf") ($wid)"
  ran=$(run "$wid"); echo "  ran: $ran"
  case " $ran " in *" Fix_the_workflow "*|*" Unexpected_answer "*|*" Relay_refused_it "*) fail "example $(basename "$wf") ended on a failure output";; esac
done
ex=$(curl -fs "${A[@]}" "$relay/v1/msgid?key=cus_123:order.shipped:ord_456" | python3 -c 'import json,sys;print(json.load(sys.stdin)["message_id"])')
[ "$(truth "$ex")" = 1 ] || fail "send-via-relay example: ground truth for $ex is $(truth "$ex"), want 1"
step "send-via-relay example: emulator ground truth for $ex: $(truth "$ex")"
step "emulator stats: $(curl -fs "$emu/_emulator/stats")"
step "PASS (emulator results)"
