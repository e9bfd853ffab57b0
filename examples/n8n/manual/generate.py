#!/usr/bin/env python3
"""Writes the Manual Trigger variants of the three example workflows.

Run from examples/n8n/manual: python3 generate.py. Each variant can be run
with `n8n execute --id <id>` after `n8n import:credentials` of
../credentials/gmailrelay.credentials.json (credentials are referenced by
the template's ids, so the import never meets "Found credential with no ID.").
"""
import copy
import json

CRED_IDS = {"gmailrelay API token": "gmrCredHeaderTk1"}
SAMPLE_WEBHOOK = {
    "body": {"customer_id": "cus_123", "event_type": "order.shipped", "order_id": "ord_456",
             "email": "ada@example.com", "name": "Ada"}
}


def load(name):
    with open("../" + name) as f:
        return json.load(f)


def creds(w):
    for n in w["nodes"]:
        for c in (n.get("credentials") or {}).values():
            if c.get("name") in CRED_IDS:
                c["id"] = CRED_IDS[c["name"]]


def node(w, name):
    return next(n for n in w["nodes"] if n["name"] == name)


def manual_trigger(n):
    keep = {k: n[k] for k in ("id", "name", "position")}
    n.clear()
    n.update(keep, parameters={}, type="n8n-nodes-base.manualTrigger", typeVersion=1)


def sample_after(w, trigger, name, data, uid, pos):
    """Inserts a Code node that outputs data between trigger and its successors."""
    code = {
        "parameters": {"jsCode": "// Sample data standing in for the real trigger's output.\nreturn [{ json: " + json.dumps(data) + " }];"},
        "id": uid, "name": name, "type": "n8n-nodes-base.code", "typeVersion": 2, "position": pos,
    }
    w["nodes"].append(code)
    w["connections"][name] = w["connections"][trigger]
    w["connections"][trigger] = {"main": [[{"node": name, "type": "main", "index": 0}]]}


VERSION_IDS = {
    "gmrExManualSend1": "0e8a6b2d-3c4f-4a1b-9d7e-5f6a7b8c9d01",
    "gmrExManualRaw01": "0e8a6b2d-3c4f-4a1b-9d7e-5f6a7b8c9d02",
    "gmrExManualAlrt1": "0e8a6b2d-3c4f-4a1b-9d7e-5f6a7b8c9d03",
}


def write(w, wid, name, fname):
    w = copy.deepcopy(w)
    # n8n import:workflow needs an id (for `n8n execute --id`) and a versionId.
    w["id"], w["name"], w["active"], w["versionId"] = wid, name, False, VERSION_IDS[wid]
    w.pop("meta", None)
    creds(w)
    with open(fname, "w") as f:
        json.dump(w, f, indent=2)
        f.write("\n")


# 1. send-via-relay: Webhook -> Manual Trigger + a sample webhook call.
w = load("send-via-relay.json")
t = node(w, "Order shipped")
t.pop("webhookId", None)
manual_trigger(t)
sample_after(w, "Order shipped", "Sample webhook call", SAMPLE_WEBHOOK, "3f4c2a9e-1b7d-4c55-9e0a-7f1d2c3b4a01", [110, 160])
write(w, "gmrExManualSend1", "gmailrelay: send an order email (Manual Trigger variant)", "send-via-relay.manual.json")

# 2. gmail-compatible-raw already starts with a Manual Trigger and sample data.
w = load("gmail-compatible-raw.json")
write(w, "gmrExManualRaw01", "gmailrelay: raw MIME through the Gmail API path (Manual Trigger variant)", "gmail-compatible-raw.manual.json")

# 3. review-queue-alert: Schedule -> Manual Trigger; the SMTP node becomes a
# No-Op stand-in so the variant runs without an SMTP server.
w = load("review-queue-alert.json")
manual_trigger(node(w, "Every 15 minutes"))
node(w, "Every 15 minutes")["name"] = "Every 15 minutes"
mail = node(w, "Email the operator")
keep = {k: mail[k] for k in ("id", "name", "position")}
mail.clear()
mail.update(keep, parameters={}, type="n8n-nodes-base.noOp", typeVersion=1,
            notes="Stand-in for the Send Email (SMTP) node of review-queue-alert.json; its input is the alert {count, subject, text}.")
write(w, "gmrExManualAlrt1", "gmailrelay: review queue alert (Manual Trigger variant)", "review-queue-alert.manual.json")
