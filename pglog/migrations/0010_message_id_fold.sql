-- Job identity ignores ASCII case in the Message-ID (Gmail's search does):
-- id_fold is the Message-ID with A-Z lower-cased (acceptlog.FoldMessageID),
-- unique among the jobs that are not case twins, so a job whose Message-ID
-- differs from an existing one's only in case cannot be inserted. Jobs
-- stored before keep their Message-IDs and data; of case twins stored
-- before, the one that sorts first (bytewise) holds the fold and the others
-- are marked case_twin. Adding a stored generated column rewrites the
-- table once.
ALTER TABLE jobs ADD COLUMN id_fold text COLLATE "C"
    GENERATED ALWAYS AS (translate(message_id, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')) STORED;
ALTER TABLE jobs ADD COLUMN case_twin boolean NOT NULL DEFAULT false;
UPDATE jobs SET case_twin = true WHERE message_id IN (
    SELECT message_id FROM (
        SELECT message_id, row_number() OVER (PARTITION BY id_fold ORDER BY message_id) AS n FROM jobs) t
    WHERE n > 1);
CREATE UNIQUE INDEX jobs_id_fold ON jobs (id_fold) WHERE NOT case_twin;
