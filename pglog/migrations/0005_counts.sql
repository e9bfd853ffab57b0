-- Stats without scanning every job and line: each change inserts its
-- deltas (never updates a shared row, so writers do not queue on one);
-- Stats sums them and, when they pile up, folds them into one row per key.
CREATE TABLE job_counts (
    state   text  NOT NULL,
    channel bytea NOT NULL,
    n       bigint NOT NULL
);
CREATE TABLE line_counts (
    kind   text  NOT NULL,
    reason bytea NOT NULL,
    n      bigint NOT NULL
);
INSERT INTO job_counts (state, channel, n) SELECT state, channel, count(*) FROM jobs GROUP BY state, channel;
INSERT INTO line_counts (kind, reason, n) SELECT kind, reason, count(*) FROM lines GROUP BY kind, reason;
