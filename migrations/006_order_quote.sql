-- Moved: order_quote_holds (internal/ops/orders/migrations/003). The orders keep their
-- schema in their own chain (op.Spec.Migrations), as every built-in does.
-- The file stays, empty, so that the numbers of idemflow's chain hold on
-- databases that applied it before the move.
SELECT 1;
