-- The keys of order intents written before idempotency_key existed, from
-- their events, so that a purged key of theirs is still refused for
-- another operation. A key already remembered is left as it is, so this
-- is safe to run again.

INSERT INTO idempotency_key (tenant_id, idem_key, biz_type, fingerprint, created_at)
    SELECT tenant_id, idem_key,
           CASE to_status WHEN 'CREATED' THEN 'order.create' WHEN 'PAID' THEN 'order.pay'
                          WHEN 'CANCELED' THEN 'order.cancel' WHEN 'REFUNDED' THEN 'order.refund'
                          WHEN 'FULFILLED' THEN 'order.fulfill' END,
           fingerprint, at
    FROM order_event
ON CONFLICT DO NOTHING;
