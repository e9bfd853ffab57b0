-- Each replica's clock as it last measured it against the database's
-- (MeasureClock): clock_offset_ns is the database's clock minus the
-- replica's, clock_at_ns the database's reading then (UnixNano). The clock
-- fence compares a replica with the median of the live replicas' offsets
-- and the database's own clock, so a database whose clock is off does not
-- fence replicas that agree with each other. NULL until the replica
-- measures (and for replicas of older versions).
ALTER TABLE replicas
    ADD COLUMN clock_offset_ns bigint,
    ADD COLUMN clock_at_ns bigint;
