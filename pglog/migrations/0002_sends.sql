-- The daily sending budget's index: one row per attempt handed to Gmail
-- (every forwarding line), by mailbox and time. It outlives retention's
-- pruning of a job's lines; PruneSends drops rows older than a cut-off.
CREATE TABLE sends (
    mailbox    text COLLATE "C" NOT NULL,
    at_ns      bigint NOT NULL,
    message_id text COLLATE "C" NOT NULL,
    attempt    integer NOT NULL,
    PRIMARY KEY (mailbox, at_ns, message_id, attempt)
);
