// The workflows of test/temporal.test.ts, bundled by the worker into
// Temporal's sandbox: an agent loop whose model is an activity (scripted by
// the test), and whose tools are activities that call idemflow under
// activityKey.

import { ApplicationFailure, continueAsNew, proxyActivities, workflowInfo } from "@temporalio/workflow";

/** A step the model asks for: a tool and its arguments. */
export interface Step {
  tool: "create_ticket" | "lookup";
  args: { customer_id: string; title?: string };
}

export interface Activities {
  model(customer: string, turn: number): Promise<Step[]>;
  create_ticket(args: { customer_id: string; title: string }): Promise<{ ticket_id: string; replayed: boolean; key: string; title?: string; differed?: string[] }>;
  lookup(args: { customer_id: string }): Promise<string>;
}

const act = proxyActivities<Activities>({ startToCloseTimeout: "30 seconds", retry: { maximumAttempts: 3, initialInterval: "100 milliseconds" } });

/**
 * An agent's turn: the model plans, and each step runs as an activity, in
 * order. With turns > 1 the run continues as new into the next turn.
 */
export async function agent(customer: string, turns = 1, turn = 0): Promise<string[]> {
  const done: string[] = [];
  for (const step of await act.model(customer, turn)) {
    if (step.tool === "lookup") done.push(await act.lookup(step.args));
    else done.push(JSON.stringify(await act.create_ticket(step.args as { customer_id: string; title: string })));
  }
  if (turn + 1 < turns) await continueAsNew<typeof agent>(customer, turns, turn + 1);
  return done;
}

/** The agent, with its ticket tool served by another worker (a Go one) on goQueue. */
export async function agentOnGo(customer: string, goQueue: string): Promise<string[]> {
  const go = proxyActivities<Pick<Activities, "create_ticket">>({ taskQueue: goQueue, startToCloseTimeout: "30 seconds", retry: { maximumAttempts: 3 } });
  const done: string[] = [];
  for (const step of await act.model(customer, 0)) {
    if (step.tool === "lookup") done.push(await act.lookup(step.args));
    else done.push(JSON.stringify(await go.create_ticket(step.args as { customer_id: string; title: string })));
  }
  return done;
}

const quick = proxyActivities<Activities>({ startToCloseTimeout: "3 seconds", retry: { maximumAttempts: 5, initialInterval: "100 milliseconds" } });

/** The agent with short activity timeouts: a call whose worker was killed is run again by another within seconds. */
export async function agentQuick(customer: string): Promise<string[]> {
  const done: string[] = [];
  for (const step of await quick.model(customer, 0)) {
    if (step.tool === "lookup") done.push(await quick.lookup(step.args));
    else done.push(JSON.stringify(await quick.create_ticket(step.args as { customer_id: string; title: string })));
  }
  return done;
}

/** The agent, failing its first attempt after its calls: a workflow retry runs it again from the start. */
export async function agentFailsOnce(customer: string): Promise<string[]> {
  const done = await agent(customer);
  if (workflowInfo().attempt === 1) throw ApplicationFailure.retryable("the first attempt fails after its calls");
  return done;
}
