// The intent of a call (seed 2's whitelisted, normalised fingerprint): the
// rules of an intent field and idemflow's built-in declarations, shared
// with the Go (package intent) and Python (idemflow.keys) clients through
// clients/testdata/keys.json. Pure, with no Node import, so that a
// Temporal workflow (./temporal-workflow.js) may name a call by it.

import canonicalize from "canonicalize";

function canonical(value: unknown): string {
  return canonicalize(value) ?? "";
}

export interface IntentField {
  name: string;
  norm: "id" | "text" | "number" | "set" | "exact";
}

/** The rules of an intent field, shared with the Go and Python clients (clients/testdata/keys.json, "intent"). */
export const intentNorms = ["id", "text", "number", "set", "exact"] as const;

/** The intent fields of idemflow's built-in tools, as their declarations publish them (OpenAPI's x-idemflow-intent, the MCP tool's _meta "io.idemflow/intent"). */
export const builtinIntent: Readonly<Record<string, readonly IntentField[]>> = {
  create_ticket: [{ name: "customer_id", norm: "id" }],
  create_order: [
    { name: "customer_id", norm: "id" },
    { name: "items", norm: "set" },
    { name: "coupon_code", norm: "id" },
  ],
  pay_order: [
    { name: "order_no", norm: "id" },
    { name: "payment_ref", norm: "id" },
  ],
  cancel_order: [{ name: "order_no", norm: "id" }],
  refund_order: [{ name: "order_no", norm: "id" }],
  fulfill_order: [{ name: "order_no", norm: "id" }],
};

const builtinPaths: Record<string, string> = { "/v1/tickets": "create_ticket", "/v1/orders": "create_order" };

/** The intent fields of a built-in tool, by its name or its path (an app may name its tool otherwise); none for any other tool. */
export function intentFieldsOf(tool: string, path?: string): readonly IntentField[] {
  return builtinIntent[tool] ?? builtinIntent[builtinPaths[path ?? ""] ?? ""] ?? [];
}

// Unicode's White_Space, written out: each language's own notion of a
// space differs (U+FEFF, U+001C), and the three clients must agree.
const whiteSpace = "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
const spaceRun = new RegExp(`[${whiteSpace}]+`, "gu");
const edgeSpace = new RegExp(`^[${whiteSpace}]+|[${whiteSpace}]+$`, "gu");
const decimalString = /^([+-]?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]{1,3}))?$/;

function plain(neg: boolean, digits: string, exp: number): string {
  digits = digits.replace(/^0+/, "");
  if (digits === "") return "0";
  while (digits.endsWith("0")) {
    digits = digits.slice(0, -1);
    exp++;
  }
  const point = digits.length + exp;
  let s: string;
  if (exp >= 0) s = digits + "0".repeat(exp);
  else if (point <= 0) s = "0." + "0".repeat(-point) + digits;
  else s = digits.slice(0, point) + "." + digits.slice(point);
  return neg ? "-" + s : s;
}

function exact(v: unknown): unknown {
  if (typeof v === "string") return v.normalize("NFC");
  if (Array.isArray(v)) return v.map(exact);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, e]) => [k.normalize("NFC"), exact(e)]));
  return v;
}

const utf8 = new TextEncoder();

function utf8Compare(a: string, b: string): number {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

/** v under the intent rule norm; a value the rule does not apply to is kept exact. */
export function normalizeIntent(norm: IntentField["norm"], v: unknown): unknown {
  if (!intentNorms.includes(norm)) throw new TypeError(`norm ${JSON.stringify(norm)} is none of ${intentNorms.join(", ")}`);
  if (norm === "id" && typeof v === "string") return v.normalize("NFC").replace(edgeSpace, "");
  if (norm === "text" && typeof v === "string") return v.normalize("NFC").replace(spaceRun, " ").replace(/^ | $/g, "").toLowerCase().normalize("NFC");
  if (norm === "number" && typeof v === "number" && Number.isFinite(v)) {
    // The shortest round-trip form, as Go and Python print it.
    const [mant, e] = v.toExponential().split("e");
    const neg = mant.startsWith("-");
    const [whole, frac = ""] = mant.replace("-", "").split(".");
    return plain(neg, whole + frac, Number(e) - frac.length);
  }
  if (norm === "number" && typeof v === "string") {
    const m = decimalString.exec(v.replace(edgeSpace, ""));
    if (m) return plain(m[1] === "-", m[2] + (m[3] ?? ""), Number(m[4] ?? 0) - (m[3] ?? "").length);
    return v.normalize("NFC").replace(edgeSpace, "");
  }
  if (norm === "set" && Array.isArray(v)) {
    return v
      .map(exact)
      .map((e) => ({ e, c: canonical(e) }))
      .sort((a, b) => utf8Compare(a.c, b.c))
      .map(({ e }) => e);
  }
  return exact(v);
}

/**
 * The intent of a call's arguments: the RFC 8785 text of an object holding
 * each intent field's normalised value (null where args lacks it) and
 * nothing else.
 */
export function intentCanonical(fields: readonly IntentField[], args: Record<string, unknown>): string {
  return canonical(Object.fromEntries(fields.map((f) => [f.name, normalizeIntent(f.norm, args[f.name] ?? null)])));
}
