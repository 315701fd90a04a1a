// The workflow side of idemflow's KeyInterceptor for Temporal's TypeScript
// SDK: list this module in the worker's interceptors.workflowModules. It
// names each activity and local activity the workflow schedules (its
// run's lineage, turn, arguments and occurrence) in the call's header,
// which the activity side (./temporal.js, activityKey) reads, and hands
// the next turn its lineage on continue-as-new. It reads only the run's
// start and the workflow's own calls, in the order its code makes them,
// so the workflow stays deterministic and its history gains no event:
// the same headers Go's and Python's interceptors write, so a workflow in
// one language and an activity in another agree.
//
// An activity whose intent fields the worker declares is keyed by its
// intent (tp4) in place of its whole arguments: write a module of your own
// that exports interceptors = () => keyInterceptors({ intent: {
// open_ticket: builtinIntent.create_ticket } }) and list it in place of
// this one.

import { defaultPayloadConverter, type Headers, type Payload } from "@temporalio/common";
import {
  workflowInfo,
  type ActivityInput,
  type ContinueAsNewInput,
  type LocalActivityInput,
  type Next,
  type WorkflowExecuteInput,
  type WorkflowInboundCallsInterceptor,
  type WorkflowInterceptors,
  type WorkflowOutboundCallsInterceptor,
} from "@temporalio/workflow";
import type { IntentField } from "./intent.js";
import { argsDigest, callHeader, intentDigest, lineageHeader, lineageOf, type CarriedLineage, type Lineage } from "./temporal-keys.js";

/** One run's: the worker makes one for each run it runs or replays, so the occurrences count afresh each time. */
class RunKeys implements WorkflowInboundCallsInterceptor, WorkflowOutboundCallsInterceptor {
  private start: Headers = {};
  private line?: Lineage;
  private readonly seen = new Map<string, number>();

  constructor(private readonly intents: Readonly<Record<string, readonly IntentField[]>>) {}

  async execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, "execute">): Promise<unknown> {
    this.start = input.headers;
    return next(input);
  }

  private lineage(): Lineage {
    if (!this.line) {
      const info = workflowInfo();
      let carried: CarriedLineage | undefined;
      const h = this.start[lineageHeader];
      if (h) {
        try {
          carried = defaultPayloadConverter.fromPayload<CarriedLineage>(h);
        } catch {
          carried = undefined;
        }
      }
      this.line = lineageOf(
        {
          attempt: info.attempt,
          continuedRunId: info.continuedFromExecutionRunId ?? "",
          cronSchedule: info.cronSchedule ?? "",
          firstRunId: info.firstExecutionRunId,
          originalRunId: info.originalExecutionRunId,
        },
        carried,
      );
    }
    return this.line;
  }

  private stamp(activity: string, args: unknown[], headers: Headers): Headers {
    const line = this.lineage();
    const payloads = args.map((a) => defaultPayloadConverter.toPayload(a) as Payload);
    const fields = Object.hasOwn(this.intents, activity) ? this.intents[activity] : undefined;
    const digest = fields ? intentDigest(fields, payloads) : argsDigest(payloads);
    const k = JSON.stringify([activity, digest]);
    const n = (this.seen.get(k) ?? 0) + 1;
    this.seen.set(k, n);
    const call = fields ? { lineage: line.id, turn: line.turn, args: digest, n, intent: true } : { lineage: line.id, turn: line.turn, args: digest, n };
    return { ...headers, [callHeader]: defaultPayloadConverter.toPayload(call) };
  }

  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, "scheduleActivity">): Promise<unknown> {
    return next({ ...input, headers: this.stamp(input.activityType, input.args, input.headers) });
  }

  scheduleLocalActivity(input: LocalActivityInput, next: Next<WorkflowOutboundCallsInterceptor, "scheduleLocalActivity">): Promise<unknown> {
    return next({ ...input, headers: this.stamp(input.activityType, input.args, input.headers) });
  }

  continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, "continueAsNew">): Promise<never> {
    const line = this.lineage();
    const carried: CarriedLineage = { lineage: line.id, turn: line.turn + 1, by: workflowInfo().runId };
    return next({ ...input, headers: { ...input.headers, [lineageHeader]: defaultPayloadConverter.toPayload(carried) } });
  }
}

/** Options of keyInterceptors. */
export interface KeyOptions {
  /**
   * An activity's name to its intent fields, as the operation it calls
   * declares them (builtinIntent for idemflow's own): its calls are keyed
   * by their intent (tp4). Declare it before the first call, or once every
   * run that may be reset to before a call has closed: a call first named
   * by its arguments is another key.
   */
  intent?: Readonly<Record<string, readonly IntentField[]>>;
}

/** The workflow interceptors of one run, for a module of your own that declares intent fields. */
export function keyInterceptors(o: KeyOptions = {}): WorkflowInterceptors {
  const keys = new RunKeys(o.intent ?? {});
  return { inbound: [keys], outbound: [keys] };
}

/** The workflow interceptors the worker loads from this module: every call keyed by its arguments. */
export const interceptors = (): WorkflowInterceptors => keyInterceptors();
