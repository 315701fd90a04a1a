// The rule every client's tests hold the texts a model reads to
// (clients/testdata/modeltexts.json): none, after a refusal or a pending
// answer, invites the model to make the call again as a new one.

import { readFileSync } from "node:fs";

export const rule = JSON.parse(readFileSync(new URL("../../../testdata/modeltexts.json", import.meta.url), "utf8")) as {
  split: string;
  invitations: string[];
  negation: string;
  same: string;
  examples: { invite: string[]; allow: string[] };
};

const split = new RegExp(rule.split);
const invitations = rule.invitations.map((p) => new RegExp(p, "i"));
const negation = new RegExp(rule.negation, "i");
const same = new RegExp(rule.same, "i");

/** The first sentence of text that invites a new call, or "". */
export function invitation(text: string): string {
  // A capturing group in split puts its captures among the pieces; the
  // sentences are every other one, and a capture is never a sentence.
  for (const s of text.split(new RegExp(split.source, "g"))) {
    if (!s || /^\s*$/.test(s) || negation.test(s) || same.test(s)) continue;
    if (invitations.some((p) => p.test(s))) return s;
  }
  return "";
}
