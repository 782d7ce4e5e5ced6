package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Watched is a cache of one resource across namespaces, kept by listing
// it and then watching it from the list's resourceVersion, as client-go's
// reflector does, without client-go's typed clients and informers (which
// would double gpurun-full: docs/install-kubernetes.md). Lookups are a
// map read under a read lock: no API call. T is the object's type
// (k8s.io/api's); *T must have its metadata's getters (GetNamespace,
// GetName, GetResourceVersion), as every k8s.io/api object has.
type Watched[T any] struct {
	// Kube is the API server.
	Kube *Kube
	// Path is the collection across namespaces:
	// "/apis/resource.k8s.io/v1/resourceclaimtemplates".
	Path string
	// Keep turns a decoded object into what the cache holds, dropping
	// what lookups never read; nil keeps it whole, a nil result leaves it
	// out.
	Keep func(*T) *T
	// Skip, when set, says from a watched object's metadata alone that
	// the cache never holds it: the object is not decoded further and
	// leaves the cache as a deletion would. For the objects a collection
	// is mostly made of that no lookup reads (the claims the API server
	// makes for pods from templates), whose whole decoding would be most
	// of what the watch costs. Keep must leave them out too: a list
	// decodes every object.
	Skip func(Head) bool
	// Logger gets a line for each list and for each failure (nil: none).
	Logger *slog.Logger
	// PageSize is the list's limit (0: 200); WatchTimeout the watch's
	// timeoutSeconds (0: 5 minutes), after which it is watched anew from
	// where it was.
	PageSize     int
	WatchTimeout time.Duration
	// OnChange, when set, is told after each list and each failure: the
	// objects held, and whether the cache is current.
	OnChange func(objects int, synced bool)

	mu      sync.RWMutex
	items   map[string]*T
	rv      string
	lastErr error
	synced  atomic.Bool
	tried   atomic.Bool
	ready   chan struct{}
	once    sync.Once
}

// meta is what every object has.
type meta interface {
	GetNamespace() string
	GetName() string
	GetResourceVersion() string
}

// Head is the metadata of a watched object that Skip reads.
type Head struct {
	Namespace       string                  `json:"namespace"`
	Name            string                  `json:"name"`
	ResourceVersion string                  `json:"resourceVersion"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

// errGone is a watch's answer when its resourceVersion is too old (410):
// list anew.
var errGone = errors.New("resourceVersion too old")

func (w *Watched[T]) init() {
	w.once.Do(func() { w.ready = make(chan struct{}) })
}

// Get returns the object namespace/name ("" namespace for a cluster-scoped
// one): ok is false where the cache does not hold it; err says why the
// cache is not current where it is not (never listed, or listing fails),
// in which case a missing object may exist.
func (w *Watched[T]) Get(namespace, name string) (obj *T, ok bool, err error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	obj, ok = w.items[namespace+"/"+name]
	if !w.synced.Load() {
		err = w.lastErr
		if err == nil {
			err = errors.New("not listed yet")
		}
	}
	return obj, ok, err
}

// Len is the number of objects held.
func (w *Watched[T]) Len() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.items)
}

// Synced reports whether the cache is current: listed, and watched since
// without a failure.
func (w *Watched[T]) Synced() bool { return w.synced.Load() }

// Tried returns a channel closed once the first list has been tried,
// whatever its outcome.
func (w *Watched[T]) Tried() <-chan struct{} {
	w.init()
	return w.ready
}

// Run lists and watches until ctx ends: when the API server ends a
// watch (its timeoutSeconds) it is watched again from where it was; when
// its resourceVersion is too old the collection is listed anew; a list or
// a watch that fails is tried again, listing anew, after a backoff (one
// second, doubling to a minute, back to one second once a watch has run
// for a minute). A list that fails leaves the cache not current (Get
// says why) until one succeeds; a watch that fails does not.
func (w *Watched[T]) Run(ctx context.Context) {
	w.init()
	backoff := time.Second
	for ctx.Err() == nil {
		err := w.list(ctx)
		if !w.tried.Swap(true) {
			close(w.ready)
		}
		if err != nil {
			w.failed(err)
		} else {
			began := time.Now()
			if err = w.watchOn(ctx); err == nil {
				continue // the resourceVersion is gone: list anew, now
			}
			if time.Since(began) > time.Minute {
				backoff = time.Second
			}
			if w.Logger != nil && ctx.Err() == nil {
				w.Logger.Warn("watch "+w.Path+": listing anew", "err", err.Error(), "in", backoff.String())
			}
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// watchOn watches until the resourceVersion is gone (nil) or a watch
// fails, watching anew each time the API server ends one.
func (w *Watched[T]) watchOn(ctx context.Context) error {
	for {
		began := time.Now()
		err := w.watch(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errGone):
			return nil
		case err != nil:
			return err
		case time.Since(began) < time.Second:
			// Ended at once, not by its timeoutSeconds: something between
			// cuts watches off; do not spin.
			return errors.New("watch: ended as soon as it began")
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// failed records a failure: the cache is not current until the next list.
func (w *Watched[T]) failed(err error) {
	w.mu.Lock()
	w.lastErr = err
	n := len(w.items)
	w.mu.Unlock()
	w.synced.Store(false)
	if w.Logger != nil {
		w.Logger.Warn("list "+w.Path, "err", err.Error())
	}
	if w.OnChange != nil {
		w.OnChange(n, false)
	}
}

// list reads the whole collection, a page at a time, and replaces the
// cache with it.
func (w *Watched[T]) list(ctx context.Context) error {
	limit := w.PageSize
	if limit <= 0 {
		limit = 200
	}
	items := map[string]*T{}
	var rv, cont string
	for {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		var page struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := w.Kube.Do(ctx, http.MethodGet, w.Path+"?"+q.Encode(), "", nil, &page); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		for _, raw := range page.Items {
			if obj, key, err := w.decode(raw); err != nil {
				return fmt.Errorf("list: %w", err)
			} else if obj != nil {
				items[key] = obj
			}
		}
		rv, cont = page.Metadata.ResourceVersion, page.Metadata.Continue
		if cont == "" {
			break
		}
	}
	w.mu.Lock()
	w.items, w.rv, w.lastErr = items, rv, nil
	w.mu.Unlock()
	w.synced.Store(true)
	if w.Logger != nil {
		w.Logger.Info("listed "+w.Path, "objects", len(items), "resource_version", rv)
	}
	if w.OnChange != nil {
		w.OnChange(len(items), true)
	}
	return nil
}

// decode reads one object into what the cache holds, and its key.
func (w *Watched[T]) decode(raw []byte) (*T, string, error) {
	obj := new(T)
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, "", err
	}
	m, ok := any(obj).(meta)
	if !ok {
		return nil, "", fmt.Errorf("%T has no object metadata", obj)
	}
	key := m.GetNamespace() + "/" + m.GetName()
	if w.Keep != nil {
		obj = w.Keep(obj)
	}
	return obj, key, nil
}

// event is one line of a watch.
type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watch follows the collection's changes from the cache's resourceVersion
// until the API server ends the watch (nil), the resourceVersion is gone
// (errGone) or it fails.
func (w *Watched[T]) watch(ctx context.Context) error {
	w.mu.RLock()
	rv := w.rv
	w.mu.RUnlock()
	timeout := w.WatchTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {strconv.Itoa(int(timeout.Seconds()))}}
	body, err := w.Kube.Stream(ctx, w.Path+"?"+q.Encode())
	if err != nil {
		if Code(err) == http.StatusGone {
			return errGone
		}
		return fmt.Errorf("watch: %w", err)
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch: %w", err)
		}
		if err := w.apply(ev); err != nil {
			return err
		}
	}
}

// apply applies one event to the cache.
func (w *Watched[T]) apply(ev event) error {
	if ev.Type == "ERROR" {
		var st struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(ev.Object, &st)
		if st.Code == http.StatusGone {
			return errGone
		}
		return fmt.Errorf("watch: %d: %s", st.Code, st.Message)
	}
	var head struct {
		Metadata Head `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Object, &head); err != nil {
		return fmt.Errorf("watch: %s event: %w", ev.Type, err)
	}
	key := head.Metadata.Namespace + "/" + head.Metadata.Name
	var obj *T
	if (ev.Type == "ADDED" || ev.Type == "MODIFIED") && (w.Skip == nil || !w.Skip(head.Metadata)) {
		var err error
		if obj, _, err = w.decode(ev.Object); err != nil {
			return fmt.Errorf("watch: %s %s: %w", ev.Type, key, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Type {
	case "ADDED", "MODIFIED":
		if obj == nil {
			delete(w.items, key)
		} else {
			w.items[key] = obj
		}
	case "DELETED":
		delete(w.items, key)
	}
	if head.Metadata.ResourceVersion != "" {
		w.rv = head.Metadata.ResourceVersion
	}
	return nil
}

// Stream sends a GET and returns the answer's body as it arrives (a
// watch), bounded by ctx alone: the client's own timeout, which bounds a
// whole request, does not apply.
func (k *Kube) Stream(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.Base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if k.Token != nil {
		tok, err := k.Token()
		if err != nil {
			return nil, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	c := *k.Client
	c.Timeout = 0
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, statusError(http.MethodGet, path, resp, data)
	}
	return resp.Body, nil
}
