-- State every replica shares beyond the jobs.

-- Fault rules (POST /admin/faults through any replica): the rule as JSON
-- (faultmodes encodes it), its remaining count (NULL: unlimited) and hits,
-- taken atomically by UPDATE … WHERE remaining > 0.
CREATE TABLE fault_rules (
    seq       bigserial PRIMARY KEY,
    data      bytea   NOT NULL,
    remaining integer,
    hits      integer NOT NULL DEFAULT 0
);

-- Daily budget holds: an attempt admitted by a replica and not yet logged
-- as a forwarding line. The forwarding line's transaction deletes one of
-- its replica's holds; a refund deletes one; a replica that dies leaves
-- holds that stop counting after a few minutes.
CREATE TABLE send_holds (
    id      bigserial PRIMARY KEY,
    mailbox text COLLATE "C" NOT NULL,
    owner   text   NOT NULL,
    at_ns   bigint NOT NULL
);
CREATE INDEX send_holds_mailbox ON send_holds (mailbox, at_ns);
CREATE INDEX send_holds_owner ON send_holds (owner, mailbox, id);

-- A pause Gmail asked for (429 / rate-limit 403), shared by every replica.
ALTER TABLE mailboxes ADD COLUMN paused_until_ns bigint;

-- Due jobs claimed by one replica's sweeper pass (FOR UPDATE SKIP LOCKED),
-- so two replicas do not search the same job at once; any write of the job
-- clears the claim.
ALTER TABLE jobs ADD COLUMN claimed_by text, ADD COLUMN claimed_until_ns bigint;
