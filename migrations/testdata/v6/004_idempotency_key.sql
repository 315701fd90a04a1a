-- One small row per key that wrote its business effect, in the same
-- transaction as the effect, kept after the idempotency record is purged.
-- Recalling a key is then one lookup here whatever the number of business
-- types, instead of one probe of each type's table; and a key used for one
-- operation, purged, then sent to another is still refused (its row names
-- the operation). Only idem writes it.

CREATE TABLE IF NOT EXISTS idempotency_key (
    tenant_id   text NOT NULL REFERENCES tenant (id),
    idem_key    text NOT NULL,
    biz_type    text NOT NULL,
    fingerprint text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_key_tenant_idem_key_uq UNIQUE (tenant_id, idem_key)
);

-- The keys written before this migration, from their rows.
INSERT INTO idempotency_key (tenant_id, idem_key, biz_type, fingerprint, created_at)
    SELECT tenant_id, idem_key, 'ticket.create', fingerprint, created_at FROM ticket
ON CONFLICT DO NOTHING;
INSERT INTO idempotency_key (tenant_id, idem_key, biz_type, fingerprint, created_at)
    SELECT tenant_id, idem_key,
           CASE to_status WHEN 'CREATED' THEN 'order.create' WHEN 'PAID' THEN 'order.pay'
                          WHEN 'CANCELED' THEN 'order.cancel' WHEN 'REFUNDED' THEN 'order.refund'
                          WHEN 'FULFILLED' THEN 'order.fulfill' END,
           fingerprint, at
    FROM order_event
ON CONFLICT DO NOTHING;
