-- HTTP tools (httptool): a team's own API, called exactly once per
-- key. The effect lives at the downstream; tool_call is what idemflow knows
-- of it, one row per (tenant, key), written before the first request leaves
-- and kept after the idempotency record is purged:
--   sending  a request may have reached the downstream, its outcome is not
--            known; the next attempt resends under the same derived key, or
--            looks the key up first, never sends blind;
--   done     the downstream's answer (2xx, or what a lookup found);
--   unknown  an at_most_once tool's outcome stayed unknown: final, nothing
--            is sent again under this key.
-- Only httptool writes it.

CREATE TABLE IF NOT EXISTS tool_call (
    tenant_id             text NOT NULL REFERENCES tenant (id),
    idem_key              text NOT NULL,
    biz_type              text NOT NULL,
    fingerprint           text NOT NULL,
    state                 text NOT NULL CHECK (state IN ('sending', 'done', 'unknown')),
    sends                 int NOT NULL DEFAULT 1,
    first_sent_at         timestamptz NOT NULL DEFAULT now(),
    last_sent_at          timestamptz NOT NULL DEFAULT now(),
    response_status       int,
    response_body         bytea,
    response_content_type text,
    settled_at            timestamptz,
    CONSTRAINT tool_call_tenant_idem_key_uq UNIQUE (tenant_id, idem_key),
    CONSTRAINT tool_call_settled_has_response
        CHECK (state = 'sending' OR (response_status IS NOT NULL AND response_body IS NOT NULL))
);

-- A downstream's answer is replayed with its own media type, which need not
-- be JSON; NULL is what idemflow's own answers always were (JSON, or
-- problem+json from 400 on).
ALTER TABLE idempotency_record ADD COLUMN IF NOT EXISTS response_content_type text;
