//go:build nodev

package cli

// devCommands is empty in a nodev build: no embedded Temporal server.
var devCommands = map[string]command{}
