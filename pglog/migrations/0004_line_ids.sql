-- Lines take their Seq from a sequence instead of line_seq's row lock,
-- which serialised every write (and its commit) across replicas. A writer
-- holds pg_advisory_xact_lock_shared(<lines lock>) from before its nextval
-- to its commit; Lines establishes its watermark under the exclusive lock
-- (no writer between nextval and commit), so a reader never skips a line
-- that commits later with a smaller Seq. line_seq is dropped so that a
-- relay of an older version fails its writes instead of reusing Seqs:
-- upgrade every replica together.
CREATE SEQUENCE line_ids AS bigint;
SELECT setval('line_ids', GREATEST((SELECT last FROM line_seq), 1), (SELECT last FROM line_seq) > 0);
DROP TABLE line_seq;
