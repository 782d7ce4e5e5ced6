// Command nullwebhook is the floor test's webhook that does nothing
// (integration/cluster_webhook_load_floor_test.go): deployed as gpurun's
// webhook is (a Deployment of two replicas, TLS from a Secret, HTTP/1.1,
// behind a Service), it answers every AdmissionReview as
// internal/nullwebhook does, so that what the API server waits for
// gpurun's webhook beyond it is gpurun's own. It serves the reviews at
// :8443/mutate (the pair in /tls) and readiness at /healthz there; the
// test reads its CPU time from its container's cgroup, as gpurun's.
package main

import (
	"log"

	"github.com/gpurun/gpurun/internal/nullwebhook"
)

func main() {
	log.Fatal(nullwebhook.Server(":8443", "/mutate").ListenAndServeTLS("/tls/tls.crt", "/tls/tls.key"))
}
