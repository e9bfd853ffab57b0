-- The relays using the log, so each takes its share of a mailbox's
-- per-minute quota (LiveReplicas). A relay upserts its row each time it
-- counts and deletes it on Close; it counts while one of its sessions
-- (application_name 'gmailrelay-' || owner) is in pg_stat_activity. A row
-- whose relay died is deleted by another relay's count once it has not
-- been seen for a while.
CREATE TABLE replicas (
    owner   text PRIMARY KEY,
    seen_ns bigint NOT NULL
);
