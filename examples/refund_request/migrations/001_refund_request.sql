-- The refund_request operation's table. UNIQUE (tenant_id, idem_key) is
-- the constraint idemflow's guarantee rests on: at most one refund request
-- per key, whatever runs twice. 'idemflow audit' checks it.
CREATE TABLE refund_request (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    idem_key     text NOT NULL,
    payment_id   text NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    reason       text NOT NULL DEFAULT '',
    status       text NOT NULL DEFAULT 'requested',
    created_at   timestamptz NOT NULL,
    CONSTRAINT refund_request_tenant_key UNIQUE (tenant_id, idem_key)
);

CREATE INDEX refund_request_payment ON refund_request (tenant_id, payment_id);
