// Command nullwebhook is the floor test's webhook that does nothing
// (integration/cluster_webhook_load_floor_test.go): deployed as gpurun's
// webhook is (a Deployment of two replicas, TLS from a Secret, HTTP/1.1,
// behind a Service), it answers every AdmissionReview allowed with a
// one-operation patch, decoding nothing but the request's uid, so that
// what the API server waits for gpurun's webhook beyond it is gpurun's
// own. It serves the reviews at :8443 (the pair in /tls), readiness at
// /healthz there, and its process's CPU time in seconds at :9469/cpu.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"syscall"
	"time"
)

// Annotation is what the patch adds.
const Annotation = "gpurun-test/null-webhook"

// patchJSON is the patch, as the answer carries it (base64).
const patchJSON = `[{"op":"add","path":"/metadata/annotations","value":{"` + Annotation + `":"called"}}]`

func review(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true,"patchType":"JSONPatch","patch":%q}}`,
		review.Request.UID, base64.StdEncoding.EncodeToString([]byte(patchJSON)))
}

func cpu(w http.ResponseWriter, _ *http.Request) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%.6f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", review)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	var h1 http.Protocols
	h1.SetHTTP1(true)
	srv := &http.Server{Addr: ":8443", Handler: mux, Protocols: &h1, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		log.Fatal(http.ListenAndServe(":9469", http.HandlerFunc(cpu)))
	}()
	log.Fatal(srv.ListenAndServeTLS("/tls/tls.crt", "/tls/tls.key"))
}
