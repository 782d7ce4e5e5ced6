// Package criclient connects to a CRI runtime service (containerd, CRI-O)
// the way crictl does: a unix socket endpoint, CONTAINER_RUNTIME_ENDPOINT
// when no endpoint is given.
package criclient

import (
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultEndpoint is containerd's CRI socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// EndpointEnv is crictl's variable naming the endpoint.
const EndpointEnv = "CONTAINER_RUNTIME_ENDPOINT"

// Endpoint returns flag if set, else $CONTAINER_RUNTIME_ENDPOINT, else
// DefaultEndpoint.
func Endpoint(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if e := getenv(EndpointEnv); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Conn is an open CRI connection.
type Conn struct {
	conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
}

// Dial connects to a unix:// endpoint (a bare path is taken as one). The
// connection is made lazily, on the first call.
func Dial(endpoint string) (*Conn, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		if strings.Contains(endpoint, "://") {
			return nil, fmt.Errorf("CRI endpoint %q: only unix:// endpoints are supported", endpoint)
		}
		path = endpoint
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	return &Conn{conn: conn, Runtime: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }
