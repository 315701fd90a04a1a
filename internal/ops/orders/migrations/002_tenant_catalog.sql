-- The catalog (products, their stock, coupons) belongs to a tenant: one
-- tenant must not exhaust another's stock or use up another's limited
-- coupon. Demo data is no longer seeded by migrations; 'idemflow dev' seeds
-- it for its tenants (orders.SeedDemoCatalog).
--
-- Rows from before this migration belonged to everyone: each existing
-- tenant gets its own copy, at the stock and uses they had, and the shared
-- rows go. On a new database there is nothing to copy.
--
-- A database whose catalog is already the tenants' (idemflow's 003 ran
-- there, before the built-ins had chains of their own) is left as it is.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'product'::regclass AND attname = 'tenant_id' AND NOT attisdropped) THEN
        RETURN;
    END IF;
    ALTER TABLE order_item DROP CONSTRAINT IF EXISTS order_item_sku_fkey;
    ALTER TABLE purchase_order DROP CONSTRAINT IF EXISTS purchase_order_coupon_code_fkey;
    ALTER TABLE coupon_redemption DROP CONSTRAINT IF EXISTS coupon_redemption_code_fkey;

    ALTER TABLE product ADD COLUMN tenant_id text REFERENCES tenant (id);
    ALTER TABLE product DROP CONSTRAINT product_pkey;
    INSERT INTO product (tenant_id, sku, name, unit_price_minor, currency, stock, reserved)
        SELECT t.id, p.sku, p.name, p.unit_price_minor, p.currency, p.stock, p.reserved
        FROM product p CROSS JOIN tenant t WHERE p.tenant_id IS NULL;
    DELETE FROM product WHERE tenant_id IS NULL;
    ALTER TABLE product ALTER COLUMN tenant_id SET NOT NULL;
    ALTER TABLE product ADD CONSTRAINT product_pkey PRIMARY KEY (tenant_id, sku);

    ALTER TABLE coupon ADD COLUMN tenant_id text REFERENCES tenant (id);
    ALTER TABLE coupon DROP CONSTRAINT coupon_pkey;
    INSERT INTO coupon (tenant_id, code, kind, value, max_uses, uses, once_per_customer)
        SELECT t.id, c.code, c.kind, c.value, c.max_uses,
            (SELECT count(*) FROM coupon_redemption r WHERE r.code = c.code AND r.tenant_id = t.id),
            c.once_per_customer
        FROM coupon c CROSS JOIN tenant t WHERE c.tenant_id IS NULL;
    DELETE FROM coupon WHERE tenant_id IS NULL;
    ALTER TABLE coupon ALTER COLUMN tenant_id SET NOT NULL;
    ALTER TABLE coupon ADD CONSTRAINT coupon_pkey PRIMARY KEY (tenant_id, code);

    ALTER TABLE order_item ADD COLUMN tenant_id text;
    UPDATE order_item i SET tenant_id = o.tenant_id FROM purchase_order o WHERE o.order_no = i.order_no;
    ALTER TABLE order_item ALTER COLUMN tenant_id SET NOT NULL;
    ALTER TABLE order_item ADD CONSTRAINT order_item_product_fkey
        FOREIGN KEY (tenant_id, sku) REFERENCES product (tenant_id, sku);
    ALTER TABLE purchase_order ADD CONSTRAINT purchase_order_coupon_fkey
        FOREIGN KEY (tenant_id, coupon_code) REFERENCES coupon (tenant_id, code);
    ALTER TABLE coupon_redemption ADD CONSTRAINT coupon_redemption_coupon_fkey
        FOREIGN KEY (tenant_id, code) REFERENCES coupon (tenant_id, code);
END
$$;

---- create above / drop below ----

-- The shared catalog cannot be rebuilt from per-tenant copies.
SELECT 1;
