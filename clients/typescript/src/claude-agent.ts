// The Claude Agent SDK integration: idemflow's operations as the SDK's
// tools (in an in-process MCP server, createSdkMcpServer), each call keyed
// by the intended call, so that a turn killed mid call and sent again on
// its resumed session replays the first answer instead of taking effect
// twice.
//
// What the SDK keeps, read in @anthropic-ai/claude-agent-sdk 0.3.337 and
// measured against its CLI: each tool call has a tool_use ID (the MCP
// call's _meta "claudecode/toolUseId", and the PreToolUse hook's
// tool_use_id), and the session's transcript is written as the run goes,
// but not before the tool runs: at the call, the assistant message that
// asked for it is not on disk yet. A run killed mid call and resumed
// (options.resume) holds at most that message and a tool_result saying the
// call was interrupted, and the model, asked again, writes the call again
// under a new tool_use ID. So the key is neither the tool_use ID nor
// anything read from the transcript. It is the intended call (cl1): the
// session, the turn (the ID of the user message the run answers, which
// the app keeps and sends again with the message), the tool, the
// arguments (RFC 8785, less a model-written idempotency_key) and their
// occurrence among the turn's calls of that tool with those arguments.
// runDurably records each call in the app's state file from the
// PreToolUse hook, synced before the call runs, and its answer from
// PostToolUse. A call takes the key of the turn's earliest recorded call
// of that tool with those arguments whose answer the model has not read (a
// call a crash interrupted, or one whose answer never reached the session's
// transcript); otherwise it is the n-th such call of this run of the turn,
// keyed as the turn's first occurrence no call of this run took. So a call
// written again after a crash gets its own answer, the turn sent again
// replays its calls, and two intended calls in one run are two.

import { AsyncLocalStorage } from "node:async_hooks";
import { readFile } from "node:fs/promises";
import { getSessionInfo, getSessionMessages, query, tool, type HookCallbackMatcher, type HookEvent, type Options, type SDKMessage } from "@anthropic-ai/claude-agent-sdk";
import {
  callArguments,
  callDigest,
  callIntent,
  Client,
  DeadlineError,
  deriveKey,
  intentFieldsOf,
  type IntentField,
  NoDurableIdentityError,
  operationIntent,
  type OperationFields,
  ProblemError,
  writeDurably,
} from "./index.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/** The scheme of a call's key: the intended call within the session's turn, named by its intent fields (a ticket's customer, never its wording). */
export const keyScheme = "cl2";

/** The scheme before cl2: the intended call named by its whole arguments. A turn's state file keeps the keys its calls took, so a call in flight across the upgrade keeps its cl1 key. */
export const argsKeyScheme = "cl1";

/** The _meta member in which the SDK's CLI names the tool_use a call answers. */
const toolUseMeta = "claudecode/toolUseId";

/** One tool call of a turn, as runDurably records it. */
interface CallRecord {
  id: string;
  tool: string;
  args: string;
  /** What names the call: callIntent of its arguments (absent in a call recorded before cl2: its args). */
  intent?: string;
  key: string;
  answered: boolean;
}

/** What runDurably keeps in its state file: the session, the turn and the turn's calls. */
interface TurnState {
  sessionId: string;
  turnId: string;
  calls: CallRecord[];
}

/** The key of a call from its parts (clients/testdata/keys.json's claude_agent vectors): under cl2 named by callIntent(fields, args), under cl1 by its whole arguments. */
export function callKey(
  sessionId: string,
  turnId: string,
  tool: string,
  args: unknown,
  occurrence: number,
  fields: readonly IntentField[] = [],
  scheme: typeof keyScheme | typeof argsKeyScheme = keyScheme,
): string {
  const named = scheme === keyScheme ? callIntent(fields, args) : callArguments(args);
  return deriveKey(scheme, sessionId, deriveKey("turn", turnId), tool, callDigest(named), String(occurrence));
}

/** A run's record of its turn's calls, shared by its hooks and its tools. */
class Turn {
  readonly running = new Set<string>();
  /** The keys this run's calls took. */
  readonly taken = new Set<string>();
  /** The calls a call written again may be: not written again yet in this run, their answers not read by the model. */
  readonly open = new Set<string>();

  /** read: the tool_use IDs whose answers the session's transcript holds, as the model will read them. */
  constructor(
    readonly file: string,
    readonly state: TurnState,
    read: Set<string>,
    readonly intents: Readonly<Record<string, readonly IntentField[]>> = {},
  ) {
    for (const c of state.calls) if (!(c.answered && read.has(c.id))) this.open.add(c.id);
  }

  /** The tool's intent fields: the app's (none: its whole arguments), or idemflow's own tool's. */
  fields(tool: string): readonly IntentField[] {
    return tool in this.intents ? this.intents[tool] : intentFieldsOf(tool);
  }

  /**
   * Records the call id of tool with args, its key decided, durably. A call
   * written again is one not yet answered to the model with the same intent
   * (its intent fields; a call recorded before cl2 by its arguments), whose
   * key it takes.
   */
  async start(id: string, tool: string, args: unknown): Promise<void> {
    if (this.state.calls.some((c) => c.id === id)) return;
    const digest = callArguments(args);
    const fields = this.fields(tool);
    const named = callIntent(fields, args);
    const same = this.state.calls.filter((c) => c.tool === tool && [named, digest].includes(c.intent ?? c.args));
    const again = same.find((c) => this.open.has(c.id));
    let key: string;
    if (again) {
      this.open.delete(again.id);
      key = again.key;
    } else {
      let occurrence = 1;
      while (this.taken.has(callKey(this.state.sessionId, this.state.turnId, tool, args, occurrence, fields))) occurrence++;
      key = callKey(this.state.sessionId, this.state.turnId, tool, args, occurrence, fields);
    }
    this.taken.add(key);
    this.state.calls.push({ id, tool, args: digest, intent: named, key, answered: false });
    this.running.add(id);
    await this.save();
  }

  /** Records that the call id was answered (a final answer or refusal the model read). */
  async answered(id: string): Promise<void> {
    const c = this.state.calls.find((c) => c.id === id);
    this.running.delete(id);
    if (!c) return;
    c.answered = true;
    await this.save();
  }

  /** Records that the call id ended without an answer: the same call written again is it. */
  ended(id: string): void {
    this.running.delete(id);
    if (this.state.calls.some((c) => c.id === id && !c.answered)) this.open.add(id);
  }

  keyOf(id: string): string | undefined {
    return this.state.calls.find((c) => c.id === id)?.key;
  }

  save(): Promise<void> {
    return writeDurably(this.file, JSON.stringify(this.state));
  }
}

/** The turn a run of runDurably is in, for its tools (the SDK calls them from the run's own loop). */
const current = new AsyncLocalStorage<Turn>();

export interface IdemflowToolFields<S extends Record<string, any>> extends OperationFields {
  name: string;
  description: string;
  /** The arguments' schema: a zod raw shape, as the SDK's tool() takes it. */
  inputSchema: S;
  /**
   * How long one call waits for its final answer (default 300 s). Past
   * it the model reads that the call is pending under its key and must
   * not be made again; the call is not counted, so the same call asked
   * again, now or in the turn sent again, is this one, under its key.
   */
  waitMs?: number;
}

/**
 * idemflowTool is a tool of the Claude Agent SDK (for createSdkMcpServer)
 * that runs one of idemflow's operations (a ticket, an order, a declared
 * operation, an HTTP tool) exactly once per intended call, however often
 * a resumed session writes it again. Its calls run under runDurably, which
 * keys them; a call outside it gets NoDurableIdentityError.
 */
export function idemflowTool<S extends Record<string, any>>(client: Client, f: IdemflowToolFields<S>) {
  return tool(f.name, f.description, f.inputSchema, async (args: any, extra: unknown) => {
    const turn = current.getStore();
    const id = (extra as { _meta?: Record<string, unknown> } | undefined)?._meta?.[toolUseMeta];
    if (!turn) throw new NoDurableIdentityError(`${f.name}: called outside runDurably, which records each call before it runs`);
    const key = typeof id === "string" ? turn.keyOf(id) : undefined;
    if (!key) throw new NoDurableIdentityError(`${f.name}: no call ${String(id)} was recorded before it ran (is the tool in an SDK MCP server of the run's options?)`);
    // A key named by the tool's intent fields (cl2): idemflow compares on them.
    const byIntent = key.startsWith(keyScheme + "_") && turn.fields(f.name).length > 0;
    try {
      const r = await client.do({ ...operationIntent(key, f, args), byIntent }, { deadlineMs: f.waitMs });
      return { content: [{ type: "text" as const, text: answerText(r) }] };
    } catch (e) {
      if (e instanceof ProblemError) return { content: [{ type: "text" as const, text: refusalText(e, key) }], isError: true };
      if (!(e instanceof DeadlineError)) throw e;
      turn.ended(id as string);
      return { content: [{ type: "text" as const, text: pendingText(f.name, key, resume.claude) }], isError: true };
    }
  });
}

export interface DurableTurn {
  /**
   * The session: its ID, chosen by the app (a UUID) for its first run and
   * the same on every run after; runDurably starts the session under it
   * (options.sessionId) or resumes it (options.resume).
   */
  sessionId: string;
  /** The turn: the ID the app gave the user message this run answers, the same when the turn is sent again. */
  turnId: string;
  /** The file where the turn's calls are recorded (JSON, written durably). */
  state: string;
  /**
   * The session this run forks, where sessionId is new: the run starts
   * sessionId as a fork of it (options.resume and forkSession), as a
   * chat's "retry in a new branch" does. Ignored once sessionId exists.
   */
  forkOf?: string;
  /**
   * The fork re-runs turnId as it was asked in forkOf: its calls are keyed
   * as that session's turn's (give the same state file), so the call the
   * model writes again is the call whose answer it never read, and a call
   * it had read replays. Without it a fork is a new conversation, whose
   * calls are new intents.
   */
  rerun?: boolean;
  /**
   * The intent fields of the app's other tools, by tool name ([] names a
   * tool's calls by their whole arguments); idemflow's own are known. A
   * call is named by them (cl2), so a call the model rewords when the turn
   * is sent again is the call it wrote first, a replay naming what differed.
   */
  intents?: Record<string, readonly IntentField[]>;
}

/**
 * runDurably runs one turn of a Claude agent, query's messages in turn:
 * prompt on the session of t, started or resumed, each tool call recorded
 * in t.state before it runs and once answered, so that idemflowTool keys
 * it by the intended call. Send a turn killed mid call again with the same
 * turnId: its calls written again are the same intents. Sent again as a
 * fork into a new session (forkOf), it is the same turn where the app says
 * so (rerun), and a new conversation where it does not.
 */
export async function* runDurably(params: { prompt: string; options?: Options }, t: DurableTurn): AsyncGenerator<SDKMessage, void> {
  if (!t.sessionId || !t.turnId) {
    throw new NoDurableIdentityError("runDurably needs the session's ID and the turn's (the user message's) ID: nothing else names a call written again after a crash");
  }
  if (t.rerun && !t.forkOf) throw new NoDurableIdentityError("runDurably: rerun names a turn of the session it forks: give forkOf");
  // The session the turn was asked in, which its calls' keys name: the
  // forked one, where the fork re-runs its turn.
  const asked = t.rerun ? t.forkOf! : t.sessionId;
  let state: TurnState = { sessionId: asked, turnId: t.turnId, calls: [] };
  try {
    const saved = JSON.parse(await readFile(t.state, "utf8")) as TurnState;
    if (saved.sessionId !== asked) throw new Error(`${t.state} records session ${saved.sessionId}, not ${asked}`);
    if (saved.turnId === t.turnId) state = saved;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  const options: Options = { ...params.options };
  const known = await getSessionInfo(t.sessionId, { dir: options.cwd });
  // A new fork starts from the forked session's transcript: what the
  // model read there, it reads in the fork.
  const from = known ? t.sessionId : t.forkOf;
  const read = from && (known || (await getSessionInfo(from, { dir: options.cwd }))) ? await answersRead(from, options.cwd) : new Set<string>();
  const turn = new Turn(t.state, state, read, t.intents);
  await turn.save();
  if (known) {
    options.resume = t.sessionId;
  } else if (t.forkOf) {
    options.resume = t.forkOf;
    options.forkSession = true;
    options.sessionId = t.sessionId;
  } else {
    options.sessionId = t.sessionId;
  }
  options.hooks = withHooks(options.hooks, turn);
  yield* current.run(turn, () => query({ prompt: params.prompt, options }));
}

/** The tool_use IDs whose tool_result the session's transcript holds. */
async function answersRead(sessionId: string, dir: string | undefined): Promise<Set<string>> {
  const read = new Set<string>();
  for (const m of await getSessionMessages(sessionId, { dir })) {
    const content = (m.message as { content?: unknown } | undefined)?.content;
    if (!Array.isArray(content)) continue;
    for (const part of content) if (part?.type === "tool_result" && typeof part.tool_use_id === "string") read.add(part.tool_use_id);
  }
  return read;
}

/** A tool's own name: an MCP tool's (mcp__<server>__<tool>) without its server's prefix, as idemflowTool names it. */
function toolName(name: string): string {
  return name.startsWith("mcp__") && name.indexOf("__", 5) > 0 ? name.slice(name.indexOf("__", 5) + 2) : name;
}

/** The run's hooks with the turn's: each call recorded before it runs, and its answer after. */
function withHooks(hooks: Options["hooks"], turn: Turn): Partial<Record<HookEvent, HookCallbackMatcher[]>> {
  const own = { ...hooks };
  own.PreToolUse = [
    ...(own.PreToolUse ?? []),
    {
      hooks: [
        async (input: any) => {
          if (input.tool_use_id) await turn.start(input.tool_use_id, toolName(String(input.tool_name)), input.tool_input ?? {});
          return {};
        },
      ],
    },
  ];
  own.PostToolUse = [
    ...(own.PostToolUse ?? []),
    {
      hooks: [
        async (input: any) => {
          if (input.tool_use_id && !turn.running.has(input.tool_use_id)) return {};
          if (input.tool_use_id) await turn.answered(input.tool_use_id);
          return {};
        },
      ],
    },
  ];
  own.PostToolUseFailure = [
    ...(own.PostToolUseFailure ?? []),
    {
      hooks: [
        async (input: any) => {
          if (input.tool_use_id) turn.ended(input.tool_use_id);
          return {};
        },
      ],
    },
  ];
  return own;
}
