// Command idemflow runs idemflow: the dev stack, the worker, the gateway and
// the operator commands.
package main

import "github.com/idemflow/idemflow"

func main() { idemflow.Main() }
