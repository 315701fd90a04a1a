// What an agent framework's tool hands the model, the same in every
// integration (Python's idemflow._tooltext is its twin): a final answer,
// a final refusal, and the text of a pending answer, which each
// integration keeps from the model its own way. None invites the model to
// make the call again as a new one: a model cannot choose keys, and reads
// "use a new key" as "call again", the duplicate idemflow prevents
// (test/tooltext.test.ts holds them to clients/testdata/modeltexts.json).

import type { ProblemError, Result } from "./index.js";

/** What a tool returns to the model after a call with a final answer. */
export interface ToolAnswer {
  http_status: number;
  /** True when this answer was stored by an earlier call of the same tool call. */
  replayed: boolean;
  result: unknown;
  /** On a replay of a call keyed by its intent fields: the arguments that differed from what was made. */
  differed?: string[];
  note?: string;
}

/** What a replay whose other arguments differed tells the model (Python's DIFFERED_NOTE). */
export const differedNote = "this intent was already done: the result is what was made then, not the arguments of this call";

/** A final answer as the model reads it: {http_status, replayed, result}. */
export function answerText(r: Result): string {
  const answer: ToolAnswer = { http_status: r.status, replayed: r.replayed, result: r.body };
  if (r.differed?.length) {
    // So that the model does not think its new wording was saved.
    answer.differed = r.differed;
    answer.note = differedNote;
  }
  return JSON.stringify(answer);
}

/** How each integration's run goes on after a pending answer: always the same call under the same key. */
export const resume = {
  langgraph: "resume the run to wait for its answer",
  openaiAgents: "resume the run from its saved RunState to wait for its answer",
  ai: "resume the chat from its saved messages to wait for its answer",
  claude: "send the same turn on its session (runDurably, the same turnId) to wait for its answer",
} as const;

/** Why a call whose answer did not come within the wait stops the run, and how it goes on. */
export function pendingText(tool: string, key: string, how: string): string {
  return `${tool}: no final answer within the wait; the call is pending under key ${key} and must not be made again: ${how}`;
}

/**
 * A final refusal is the model's to read, not a crash of the run: a
 * rejection stored under the key (the operation's or its downstream's,
 * whose body is as it came), or idemflow's refusal of the arguments,
 * which nothing recorded.
 */
export function refusalText(e: ProblemError, key: string): string {
  return JSON.stringify({ http_status: e.status, replayed: false, error: e.name, problem: e.problem, body: e.body, key });
}
