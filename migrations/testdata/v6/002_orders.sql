-- Orders: catalog, coupons, the order state machine's rows and events,
-- and a simulated payment provider.

CREATE TABLE IF NOT EXISTS product (
    sku              text PRIMARY KEY,
    name             text NOT NULL,
    unit_price_minor bigint NOT NULL CHECK (unit_price_minor >= 0),
    currency         text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    -- stock is what can still be reserved; reserved is held by orders that
    -- are not canceled. Restocking adds to stock.
    stock            int NOT NULL CHECK (stock >= 0),
    reserved         int NOT NULL DEFAULT 0 CHECK (reserved >= 0)
);

INSERT INTO product (sku, name, unit_price_minor, currency, stock) VALUES
    ('SKU-KEYBOARD', 'Mechanical keyboard', 8900, 'EUR', 100),
    ('SKU-MOUSE',    'Wireless mouse',      2900, 'EUR', 250),
    ('SKU-MONITOR',  '27" monitor',        32900, 'EUR', 40),
    ('SKU-CABLE',    'USB-C cable',          990, 'EUR', 1000),
    ('SKU-LAMP',     'Desk lamp',           4500, 'EUR', 3)
ON CONFLICT (sku) DO NOTHING;

CREATE TABLE IF NOT EXISTS coupon (
    code         text PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('percent', 'fixed')),
    value        bigint NOT NULL CHECK (value > 0),
    -- NULL: unlimited.
    max_uses     int CHECK (max_uses > 0),
    uses         int NOT NULL DEFAULT 0,
    once_per_customer boolean NOT NULL DEFAULT false,
    CHECK (kind <> 'percent' OR value <= 100),
    CHECK (max_uses IS NULL OR uses <= max_uses)
);

INSERT INTO coupon (code, kind, value, max_uses, once_per_customer) VALUES
    ('WELCOME10', 'percent', 10, NULL, true),
    ('FIVEOFF',   'fixed',  500, 1000, false),
    ('LAST1',     'percent', 50, 1,    false)
ON CONFLICT (code) DO NOTHING;

CREATE TABLE IF NOT EXISTS purchase_order (
    order_no       text PRIMARY KEY,
    tenant_id      text NOT NULL REFERENCES tenant (id),
    idem_key       text NOT NULL,
    fingerprint    text NOT NULL,
    workflow_id    text NOT NULL,
    customer_id    text NOT NULL,
    status         text NOT NULL CHECK (status IN ('INIT', 'CREATED', 'PAID', 'FULFILLED', 'CANCELED', 'REFUNDED')),
    subtotal_minor bigint NOT NULL,
    discount_minor bigint NOT NULL DEFAULT 0,
    total_minor    bigint NOT NULL CHECK (total_minor >= 0),
    currency       text NOT NULL,
    coupon_code    text REFERENCES coupon (code),
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    -- One order per (tenant, key): invariant 1 for orders.
    CONSTRAINT purchase_order_tenant_idem_key_uq UNIQUE (tenant_id, idem_key)
);
CREATE INDEX IF NOT EXISTS purchase_order_tenant_idx ON purchase_order (tenant_id, created_at);

CREATE TABLE IF NOT EXISTS order_item (
    order_no         text NOT NULL REFERENCES purchase_order (order_no),
    sku              text NOT NULL REFERENCES product (sku),
    quantity         int NOT NULL CHECK (quantity BETWEEN 1 AND 1000),
    unit_price_minor bigint NOT NULL,
    PRIMARY KEY (order_no, sku)
);

CREATE TABLE IF NOT EXISTS coupon_redemption (
    code        text NOT NULL REFERENCES coupon (code),
    tenant_id   text NOT NULL,
    customer_id text NOT NULL,
    order_no    text NOT NULL REFERENCES purchase_order (order_no),
    PRIMARY KEY (code, order_no)
);
CREATE INDEX IF NOT EXISTS coupon_redemption_customer_idx ON coupon_redemption (code, tenant_id, customer_id);

-- One row per applied state change, written in the transaction that makes
-- it, with the answer given. It is the business row of a transition
-- intent: reconcile finds it by (tenant, key), and a retry replays it.
CREATE TABLE IF NOT EXISTS order_event (
    id            bigserial PRIMARY KEY,
    order_no      text NOT NULL REFERENCES purchase_order (order_no),
    tenant_id     text NOT NULL,
    idem_key      text NOT NULL,
    fingerprint   text NOT NULL,
    from_status   text NOT NULL,
    to_status     text NOT NULL,
    response_body bytea NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT order_event_tenant_idem_key_uq UNIQUE (tenant_id, idem_key)
);

-- The simulated payment provider: a charge is keyed by the caller's
-- idempotency key, as a real provider's API is, so a retried payment
-- step never charges twice.
CREATE TABLE IF NOT EXISTS payment_charge (
    idempotency_key text PRIMARY KEY,
    order_no        text NOT NULL,
    amount_minor    bigint NOT NULL,
    currency        text NOT NULL,
    payment_ref     text NOT NULL,
    status          text NOT NULL CHECK (status IN ('captured', 'refunded')),
    created_at      timestamptz NOT NULL DEFAULT now()
);

---- create above / drop below ----

DROP TABLE IF EXISTS payment_charge;
DROP TABLE IF EXISTS order_event;
DROP TABLE IF EXISTS coupon_redemption;
DROP TABLE IF EXISTS order_item;
DROP TABLE IF EXISTS purchase_order;
DROP TABLE IF EXISTS coupon;
DROP TABLE IF EXISTS product;
