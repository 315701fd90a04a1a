// Temporal's TypeScript SDK: an activity that calls idemflow as a tool gets
// a key derived from the call's durable identity, the same rule as Go's
// agentclient.ActivityKey and Python's idemflow.temporal.activity_key.
// Temporal runs an activity at least once (a worker killed after the
// effect, a timeout, a retry); every attempt of one call sends one key,
// and idemflow makes the attempts one effect.
//
// The key names the intended call, not its place in the run (tp3): the
// workflow ID, the run's lineage (the chain's first run, which a reset and
// a workflow retry keep; a cron firing's own run), its turn (how many
// times the lineage continued as new before it), the tool, the call's
// arguments in their canonical JSON, and how many calls of the same
// activity with the same arguments the run made before it. So a reset that
// runs the model again finds every call the model asks for again, wherever
// it comes, and a call with other arguments is new. An activity whose
// intent fields the workflow's worker declares (temporal-workflow.ts's
// keyInterceptors) is keyed by its intent in place of its arguments
// (tp4), so a reset whose model rewrites only free text finds the first
// call; its request says so with activityByIntent().
//
// Register both sides on every worker of the workflows and the
// activities: interceptors: { workflowModules: [<./temporal-workflow.js>],
// activity: [keyInterceptor()] }. A call no interceptor named gets no key:
// a non-retryable ApplicationFailure (type NoDurableIdentity), naming the
// fix.

import { AsyncLocalStorage } from "node:async_hooks";
import { Context } from "@temporalio/activity";
import { ApplicationFailure, defaultPayloadConverter } from "@temporalio/common";
import type { ActivityExecuteInput, ActivityInboundCallsInterceptor, ActivityInterceptorsFactory, Next } from "@temporalio/worker";
import { callHeader, callKey, intentCallKey } from "./temporal-keys.js";

export { argsDigest, callHeader, callKey, intentCallKey, intentDigest, intentKeyScheme, keyScheme, lineageHeader, lineageOf } from "./temporal-keys.js";
export type { CarriedLineage, Lineage, RawPayload, RunStart } from "./temporal-keys.js";

/** The name the workflow's interceptor gave a call. */
interface Named {
  lineage: string;
  turn: number;
  args: string;
  n: number;
  /** args is the digest of the call's intent (tp4). */
  intent: boolean;
}

// The call the running activity is, as its header names it; null where
// the header is missing (the workflow's worker had no interceptor).
const named = new AsyncLocalStorage<Named | null>();

/** The failure a call nothing names gets: Temporal does not retry it, since no attempt can find what the first lacked. */
function noKey(message: string): ApplicationFailure {
  return ApplicationFailure.create({ message: `idemflow: no key: ${message}`, type: "NoDurableIdentity", nonRetryable: true });
}

/**
 * The activity side of the KeyInterceptor: hands activityKey the name the
 * workflow's side put in the call's header.
 */
export function keyInterceptor(): ActivityInterceptorsFactory {
  const inbound: ActivityInboundCallsInterceptor = {
    async execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, "execute">): Promise<unknown> {
      const h = input.headers[callHeader];
      let call: Named | null = null;
      if (h) {
        try {
          const raw = defaultPayloadConverter.fromPayload<Record<string, unknown>>(h);
          call = { lineage: String(raw.lineage ?? ""), turn: Number(raw.turn ?? 0), args: String(raw.args ?? ""), n: Number(raw.n), intent: raw.intent === true };
        } catch (e) {
          throw noKey(`the header ${callHeader}: ${(e as Error).message}`);
        }
      }
      return named.run(call, () => next(input));
    },
  };
  return () => ({ inbound });
}

/**
 * The key of the running activity's call of tool (default: the activity's
 * type): the same on every attempt, and for the call made again by a reset
 * (to any point, with a model that answers otherwise), a workflow retry,
 * or a reset of a continue-as-new chain; another for every other intended
 * call. scope, if given, is added to the parts. It throws a non-retryable
 * ApplicationFailure outside an activity, in one no workflow scheduled, or
 * for a call no KeyInterceptor named.
 */
export function activityKey(tool?: string, o: { scope?: string } = {}): string {
  let ctx: Context;
  try {
    ctx = Context.current();
  } catch {
    throw noKey("activityKey was called outside a Temporal activity");
  }
  const workflowId = ctx.info.workflowExecution?.workflowId;
  if (!workflowId) throw noKey(`activity ${ctx.info.activityType} was not scheduled by a workflow`);
  const call = named.getStore();
  if (call === undefined) {
    throw noKey("register keyInterceptor() on this worker (interceptors: { activity: [keyInterceptor()] }), and the workflow module on the workflow's, so that the key can tell the workflow's calls apart");
  }
  if (call === null || !call.lineage) {
    throw noKey("the workflow's worker scheduled this call without idemflow's workflow interceptor, so nothing tells it from another run's call: add it to that worker's interceptors.workflowModules");
  }
  const derive = call.intent ? intentCallKey : callKey;
  return derive(workflowId, call.lineage, call.turn, tool ?? ctx.info.activityType, call.args, call.n, o.scope ?? "");
}

/**
 * Whether the running activity's key names its intent (declared on the
 * workflow's worker, keyInterceptors({ intent })) rather than its whole
 * arguments: its request must then say so (Intent.byIntent), so idemflow
 * compares the intent fields alone and answers a reworded call with the
 * first call's answer, naming what differed.
 */
export function activityByIntent(): boolean {
  const call = named.getStore();
  return !!call && !!call.lineage && call.intent;
}
