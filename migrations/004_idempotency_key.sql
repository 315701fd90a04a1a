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

-- The keys written before this table existed are remembered from their
-- rows by each built-in's own chain (internal/ops/*/migrations), which
-- owns those tables.

