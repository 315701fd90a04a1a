-- The caller's own name for the call that claimed the record
-- (Idempotency-Origin, a UUID a client makes per call and sends on each of
-- its transport retries): when the answer to the call that ran the intent
-- is lost, and that same call asks again, it is told the truth, that its
-- answer is its own (Idempotent-Replayed: false), not another's replay.
-- NULL for a caller that sends none, and for a record rebuilt after purge.
-- Only idem writes it.
ALTER TABLE idempotency_record ADD COLUMN IF NOT EXISTS origin uuid;
