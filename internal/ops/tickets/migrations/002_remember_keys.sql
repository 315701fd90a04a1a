-- The keys of tickets written before idempotency_key existed, so that a
-- purged key of theirs is still refused for another operation. A key
-- already remembered is left as it is, so this is safe to run again.

INSERT INTO idempotency_key (tenant_id, idem_key, biz_type, fingerprint, created_at)
    SELECT tenant_id, idem_key, 'ticket.create', fingerprint, created_at FROM ticket
ON CONFLICT DO NOTHING;
