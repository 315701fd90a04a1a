-- Tenants, their API tokens and the idempotency record. (Until the
-- built-ins had chains of their own, this file created the ticket table
-- too; internal/ops/tickets/migrations does now, and is a no-op where it
-- exists.)
-- Statements are IF NOT EXISTS so that the file can be re-applied by hand
-- on a database where part of it already exists.

CREATE TABLE IF NOT EXISTS tenant (
    id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is stored: a leaked table grants nothing.
CREATE TABLE IF NOT EXISTS api_token (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    tenant_id    text NOT NULL REFERENCES tenant (id) ON DELETE CASCADE,
    label        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
CREATE INDEX IF NOT EXISTS api_token_tenant_idx ON api_token (tenant_id);

CREATE TABLE IF NOT EXISTS idempotency_record (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenant (id),
    idem_key        text NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    biz_type        text NOT NULL,
    fingerprint     text NOT NULL,
    status          text NOT NULL CHECK (status IN ('PROCESSING', 'SUCCESS', 'FAILED')),
    -- The response is stored as bytes, not jsonb: jsonb would reorder keys and
    -- a replay must be byte-identical to the first answer.
    response_status int,
    response_body   bytea,
    resource_path   text,
    error_reason    text,
    workflow_id     text NOT NULL,
    attempts        int NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    expire_at       timestamptz NOT NULL,
    CONSTRAINT idempotency_record_tenant_key_uq UNIQUE (tenant_id, idem_key),
    CONSTRAINT idempotency_record_done_has_response
        CHECK (status = 'PROCESSING' OR (response_status IS NOT NULL AND response_body IS NOT NULL))
);
-- Reconcile scans stale PROCESSING records; purge scans expired finished ones.
CREATE INDEX IF NOT EXISTS idempotency_record_processing_idx
    ON idempotency_record (updated_at) WHERE status = 'PROCESSING';
CREATE INDEX IF NOT EXISTS idempotency_record_expire_idx
    ON idempotency_record (expire_at) WHERE status <> 'PROCESSING';

---- create above / drop below ----

DROP TABLE IF EXISTS idempotency_record;
DROP TABLE IF EXISTS api_token;
DROP TABLE IF EXISTS tenant;
