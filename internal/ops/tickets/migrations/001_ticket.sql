-- The tickets' table, in the tickets' own chain (op.Spec.Migrations).
-- Databases made before the built-ins had chains of their own got it from
-- idemflow's 001; IF NOT EXISTS makes this a no-op there.

CREATE TABLE IF NOT EXISTS ticket (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenant (id),
    idem_key    text NOT NULL,
    -- Kept on the row so that a key reused with other parameters is still
    -- caught after the idempotency record has been purged.
    fingerprint text NOT NULL,
    workflow_id text NOT NULL,
    customer_id text NOT NULL,
    title       text NOT NULL,
    description text NOT NULL,
    priority    text NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    status      text NOT NULL DEFAULT 'open',
    created_at  timestamptz NOT NULL,
    -- The last line of defence of invariant 1: one ticket per (tenant, key).
    CONSTRAINT ticket_tenant_idem_key_uq UNIQUE (tenant_id, idem_key)
);

---- create above / drop below ----

DROP TABLE IF EXISTS ticket;
