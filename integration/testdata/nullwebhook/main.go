// Command nullwebhook is the floor test's webhook that does nothing
// (integration/cluster_webhook_load_floor_test.go): deployed as gpurun's
// webhook is (a Deployment of two replicas, TLS from a Secret, HTTP/1.1,
// behind a Service), it answers every AdmissionReview as
// internal/nullwebhook does, so that what the API server waits for
// gpurun's webhook beyond it is gpurun's own. It serves the reviews at
// :8443/mutate (the pair in /tls), readiness at /healthz there, and its
// process's CPU time in seconds at :9469/cpu.
package main

import (
	"fmt"
	"log"
	"net/http"
	"syscall"

	"github.com/gpurun/gpurun/internal/nullwebhook"
)

func cpu(w http.ResponseWriter, _ *http.Request) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%.6f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
}

func main() {
	go func() {
		log.Fatal(http.ListenAndServe(":9469", http.HandlerFunc(cpu)))
	}()
	log.Fatal(nullwebhook.Server(":8443", "/mutate").ListenAndServeTLS("/tls/tls.crt", "/tls/tls.key"))
}
