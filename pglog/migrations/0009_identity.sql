-- The log's identity (acceptlog.IdentityRecord as JSON): the Message-ID
-- domain and secret fingerprint its Message-IDs are derived with, recorded
-- by the first relay that opens the log with one, compared by every replica
-- at start, changed on purpose by gmailrelay rekey. One row at most.
CREATE TABLE identity (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    data bytea NOT NULL
);

-- The key index: each job's key (Job.Key), so that a key finds the job
-- created with it under an earlier identity (JobByKey). Filled here from the
-- jobs already stored (their JSON), and by every insert after.
ALTER TABLE jobs ADD COLUMN job_key text COLLATE "C";
UPDATE jobs SET job_key = convert_from(data, 'UTF8')::jsonb ->> 'key';
CREATE INDEX jobs_key ON jobs (job_key) WHERE job_key IS NOT NULL;
