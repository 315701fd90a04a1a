// The workflow side of idemflow's KeyInterceptor with create_ticket's
// intent field declared (tp4), as an app writes its own module: the
// worker of test/temporal.test.ts's reworded cases lists it in
// interceptors.workflowModules in place of src/temporal-workflow.js.

import { builtinIntent } from "../src/intent.js";
import { keyInterceptors } from "../src/temporal-workflow.js";

export const interceptors = () => keyInterceptors({ intent: { create_ticket: builtinIntent.create_ticket } });
