// Package kube is the little of the Kubernetes API gpurun's commands use,
// over plain HTTPS with k8s.io/api's JSON shapes: from a pod's service
// account (InCluster) or a kubeconfig (FromKubeconfig: client-go's
// loading rules and transport, as kubectl's, for its credentials), one
// request at a time (Do, DRA) or as a cache kept by a list and a watch
// (Watched). The binary is one for every command, and client-go's typed
// clients and informers would register every API group at the start of
// every gpurun command and double the binary.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where the kubelet puts a pod's service account
// token and the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ErrNotFound is wrapped when the API server answers 404.
var ErrNotFound = errors.New("not found")

// ErrConflict is wrapped when the API server answers 409 (the object
// exists, or changed since it was read).
var ErrConflict = errors.New("conflict")

// Kube is a client of one API server: requests with a bearer token, JSON
// in and out, errors that wrap ErrNotFound and ErrConflict.
type Kube struct {
	// Base is the API server's URL.
	Base string
	// Client talks to it (its CA set).
	Client *http.Client
	// Token returns the bearer token for each request ("" for none); a
	// bound service account token is rotated, so it is read each time.
	Token func() (string, error)
}

// InCluster returns the API of the cluster the pod runs in, from the
// kubelet's service account files and KUBERNETES_SERVICE_HOST/PORT.
func InCluster() (*Kube, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	caFile := filepath.Join(ServiceAccountDir, "ca.crt")
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	tokenFile := filepath.Join(ServiceAccountDir, "token")
	return &Kube{
		Base: "https://" + net.JoinHostPort(host, port),
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
		Token: func() (string, error) {
			b, err := os.ReadFile(tokenFile)
			if err != nil {
				return "", fmt.Errorf("read the service account token: %w", err)
			}
			return strings.TrimSpace(string(b)), nil
		},
	}, nil
}

// Do sends a request with a JSON body (nil: none) and decodes a JSON answer
// into out (nil: ignored).
func (k *Kube) Do(ctx context.Context, method, path, contentType string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	if k.Token != nil {
		tok, err := k.Token()
		if err != nil {
			return err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(method, path, resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// StatusError is the API server's answer other than 2xx. It wraps
// ErrNotFound (404) and ErrConflict (409).
type StatusError struct {
	Method, Path string
	// Code is the HTTP status; Message the Status object's message (else
	// the body).
	Code    int
	Status  string
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err, ErrConflict)
// true of a 404 and a 409.
func (e *StatusError) Is(target error) bool {
	return target == ErrNotFound && e.Code == http.StatusNotFound || target == ErrConflict && e.Code == http.StatusConflict
}

// Code returns the HTTP status of an API server's answer that err
// wraps, 0 for none (no answer at all).
func Code(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// statusError reads an answer other than 2xx.
func statusError(method, path string, resp *http.Response, data []byte) error {
	var status struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(data, &status)
	msg := status.Message
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	return &StatusError{Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Message: msg}
}

// OwnPod reads the pod this process runs in, with the pod's service
// account: its namespace (the service account's), name (HOSTNAME, which
// the kubelet sets to the pod's name) and annotations. It fails where the
// pod has no token or its account may not get pods.
func OwnPod(ctx context.Context) (namespace, name string, annotations map[string]string, err error) {
	b, err := os.ReadFile(filepath.Join(ServiceAccountDir, "namespace"))
	if err != nil {
		return "", "", nil, fmt.Errorf("no service account token in this pod: %w", err)
	}
	namespace = strings.TrimSpace(string(b))
	if name = os.Getenv("HOSTNAME"); name == "" {
		if name, err = os.Hostname(); err != nil {
			return namespace, "", nil, err
		}
	}
	k, err := InCluster()
	if err != nil {
		return namespace, name, nil, err
	}
	var pod struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := k.Do(ctx, "GET", "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), "", nil, &pod); err != nil {
		return namespace, name, nil, err
	}
	return namespace, name, pod.Metadata.Annotations, nil
}
