-- The acceptance log: one row per job (the Message-ID unique), its lines
-- under one global sequence, raw messages, mailbox records.
CREATE TABLE jobs (
    message_id    text COLLATE "C" PRIMARY KEY,
    state         text  NOT NULL,
    channel       bytea NOT NULL,
    next_check_ns bigint,  -- NextCheckAt (UnixNano) when a check is scheduled
    unknown_ns    bigint,  -- AmbiguousAt when state is unknown and it is set
    prunable_ns   bigint,  -- UpdatedAt when the job is prunable
    data          bytea NOT NULL -- the job as JSON
);
CREATE INDEX jobs_state ON jobs (state, message_id);
CREATE INDEX jobs_due ON jobs (next_check_ns, message_id) WHERE next_check_ns IS NOT NULL;
CREATE INDEX jobs_unknown ON jobs (unknown_ns, message_id) WHERE unknown_ns IS NOT NULL;
CREATE INDEX jobs_prunable ON jobs (prunable_ns, message_id) WHERE prunable_ns IS NOT NULL;

-- line_seq is the last Seq given out. Writers take it with the job row
-- locked, as their last step before commit, so lines commit in Seq order and
-- a reader paging with Lines(after) never skips one committed later.
CREATE TABLE line_seq (one boolean PRIMARY KEY DEFAULT true CHECK (one), last bigint NOT NULL);
INSERT INTO line_seq (last) VALUES (0);

CREATE TABLE lines (
    seq        bigint PRIMARY KEY,
    message_id text COLLATE "C" NOT NULL REFERENCES jobs (message_id),
    kind       text  NOT NULL,
    reason     bytea NOT NULL,
    data       bytea NOT NULL -- the line as JSON
);
CREATE INDEX lines_job ON lines (message_id, seq);

CREATE TABLE bodies (
    message_id text COLLATE "C" PRIMARY KEY REFERENCES jobs (message_id),
    raw        bytea NOT NULL
);

CREATE TABLE mailboxes (
    name text COLLATE "C" PRIMARY KEY,
    data bytea NOT NULL
);
