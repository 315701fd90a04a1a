package cli

// devCommandNames names dev.go's devCommands in every build, so that a
// production build (-tags nodev), which has none of them, can say where
// one went instead of "unknown command" (TestDevCommandNamesAreTheDevCommands
// keeps the two the same).
var devCommandNames = []string{"bench", "chaos", "demo", "dev", "postgres", "temporal"}
