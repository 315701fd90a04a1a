-- An order is priced before its step, from a read sent with its claim (a
-- quote: op.Spec.Hint), and its rows are written with the commit, in one
-- pipeline. order_quote_holds is how that pipeline refuses a quote that no
-- longer holds: it raises, so PostgreSQL fails the pipeline before its
-- COMMIT (a row count read in Go would come after it), and the step then
-- prices the order again under the products' locks. Only the orders' create
-- step calls it.
CREATE OR REPLACE FUNCTION order_quote_holds(holds boolean, sku text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT holds THEN
        RAISE EXCEPTION 'the price of % is no longer the one quoted', sku
            USING ERRCODE = 'P0001', CONSTRAINT = 'order_quote';
    END IF;
    RETURN true;
END
$$;

---- create above / drop below ----

DROP FUNCTION IF EXISTS order_quote_holds(boolean, text);
