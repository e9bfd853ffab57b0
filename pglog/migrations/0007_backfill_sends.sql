-- Fill the daily sending budget's index (sends, 0002) from the forwarding
-- lines of the last 48 h (what PruneSends keeps): 0002 created it empty, so
-- a log upgraded from a version without it counted every mailbox's rolling
-- 24 h budget from zero, and the relay could send a second day's limit on
-- top of that day's sends. Each row is the one the write path
-- (insertSends) makes: the job's mailbox, the line's time in UnixNano (its
-- JSON time to the nanosecond: the whole seconds through timestamptz, the
-- fraction from its digits, as timestamptz keeps only microseconds), its
-- Message-ID and attempt. Rows already there (every send written since
-- 0002 ran) are left alone: ON CONFLICT on the whole key. Lines have no
-- time column: this reads every forwarding line once.
WITH forwarding AS (
    SELECT l.message_id,
           (convert_from(l.data, 'UTF8')::jsonb ->> 'attempt')::integer AS attempt,
           convert_from(l.data, 'UTF8')::jsonb ->> 'time' AS at
    FROM lines l
    WHERE l.kind = 'forwarding'
), dated AS (
    SELECT message_id, attempt, at,
           regexp_replace(at, '\.[0-9]+', '')::timestamptz AS whole_seconds
    FROM forwarding
)
INSERT INTO sends (mailbox, at_ns, message_id, attempt)
SELECT DISTINCT
       coalesce(convert_from(j.data, 'UTF8')::jsonb ->> 'mailbox', ''),
       extract(epoch FROM d.whole_seconds)::bigint * 1000000000
           + coalesce(rpad(substring(d.at FROM '\.([0-9]+)'), 9, '0')::bigint, 0),
       d.message_id,
       d.attempt
FROM dated d
JOIN jobs j ON j.message_id = d.message_id
WHERE d.whole_seconds > now() - interval '48 hours 1 second'
ON CONFLICT (mailbox, at_ns, message_id, attempt) DO NOTHING;
