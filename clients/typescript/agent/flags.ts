// The flags every kill-test agent takes (typescript_test.go's killAndRerun):
// the conversation (its customer too), the state file, the tools
// (idemflow, or the naive control) and --unsafe (an app that saves
// nothing before the call).

export const agentFlags = {
  conversation: { type: "string" },
  state: { type: "string" },
  tools: { type: "string", default: "idemflow" },
  unsafe: { type: "boolean", default: false },
} as const;
