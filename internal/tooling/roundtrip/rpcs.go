package roundtrip

import (
	"context"
	"strings"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
)

// RPCs counts the Temporal RPCs a client makes, by method. A worker's long
// polls are left out, as they run whether or not an intent arrives.
type RPCs struct{ seen }

// Interceptor is the gRPC client interceptor that counts.
func (r *RPCs) Interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	name := method[strings.LastIndex(method, "/")+1:]
	if !strings.HasPrefix(name, "Poll") {
		r.add(name)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Client puts the interceptor in o.
func (r *RPCs) Client(o *client.Options) {
	o.ConnectionOptions.DialOptions = append(o.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(r.Interceptor))
}

// ClientOptions are client options with the interceptor in place.
func (r *RPCs) ClientOptions() client.Options {
	var o client.Options
	r.Client(&o)
	return o
}
