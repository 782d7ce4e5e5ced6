package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// Defaults of the `gpurun nri` flags.
const (
	// DefaultSocket is where containerd and CRI-O listen for NRI plugins.
	DefaultSocket = api.DefaultSocketPath
	// DefaultName is the plugin's name.
	DefaultName = "gpurun"
	// DefaultIndex orders the plugin among others (two digits; lower first).
	DefaultIndex = "10"
)

// Options says how the plugin meets its runtime.
type Options struct {
	// Socket is the runtime's NRI socket (DefaultSocket if empty). A
	// plugin the runtime launched itself uses the connection it was given.
	Socket string
	// Name and Index register the plugin (DefaultName and DefaultIndex if
	// empty). A plugin the runtime launched takes both from the runtime.
	Name, Index string
	// Logger receives the connection's records (nil: discard).
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between connection attempts
	// (100 ms and 5 s if zero); the wait doubles after each failure and is
	// reset by a successful registration.
	MinBackoff, MaxBackoff time.Duration
	// Getenv reads the environment (nil: os.Getenv).
	Getenv func(string) string
	// Registered, when set, is told whenever a long-running plugin
	// registers (true) or is not registered (false: an attempt failed, or
	// the runtime closed the connection), with why not: its readiness.
	Registered func(ok bool, why string)
	// Unavailable, when set, is told once per outage that a long-running
	// plugin has not been registered for UnavailableAfter (15 s if zero):
	// msg says why and what to do (UnavailableMessage).
	Unavailable      func(msg string)
	UnavailableAfter time.Duration
}

// UnavailableMessage says that the plugin has not registered with the
// runtime at socket for the duration, why (err), and, when nothing
// listens there, what that means and what to do instead.
func UnavailableMessage(socket string, d time.Duration, err error) string {
	msg := fmt.Sprintf("gpurun's NRI plugin has not registered with the runtime's NRI socket %s for %s: %v", socket, d.Round(time.Second), err)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		msg += ". The runtime on this node does not serve NRI there: containerd 1.6 has no NRI, containerd 1.7 has it off unless its config turns it on, k3s and RKE2 turn it off in a user namespace. " +
			"Use the runtime-class or default-runtime mode on this node (docs/choosing.md); the plugin keeps trying"
	} else {
		msg += "; the plugin keeps trying"
	}
	return msg
}

// Launched reports whether the runtime started this process itself, as a
// pre-installed plugin (/opt/nri/plugins/<idx>-<name>) with a connected
// socket in the environment.
func Launched(getenv func(string) string) bool {
	return getenv(api.PluginSocketEnvVar) != ""
}

// CheckIdentity returns a clear error when a plugin name or index would be
// refused at registration.
func CheckIdentity(name, index string) error {
	if err := api.CheckPluginIndex(index); err != nil {
		return fmt.Errorf("--index: %w", err)
	}
	if err := api.CheckPluginName(name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	return nil
}

// Run registers p with the runtime and serves its requests until ctx is
// done, then returns nil.
//
// A long-running plugin (systemd unit, DaemonSet) connects to Socket and
// reconnects with backoff whenever the runtime is not there yet, restarts
// or closes the connection. A plugin the runtime launched (see Launched)
// serves the one connection it was given and returns when it closes: the
// runtime launches it again when it restarts.
func Run(ctx context.Context, p *Plugin, o Options) error {
	o = o.withDefaults()
	log := o.Logger
	launched := Launched(o.Getenv)
	var opts []stub.Option
	opts = append(opts, stub.WithLogger(stubLogger{log}))
	// The stub reads NRI_PLUGIN_NAME/NRI_PLUGIN_IDX itself; a launched
	// plugin keeps what the runtime gave it.
	if o.Getenv(api.PluginNameEnvVar) == "" {
		opts = append(opts, stub.WithPluginName(o.Name))
	}
	if o.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(o.Index))
	}
	if !launched {
		opts = append(opts, stub.WithSocketPath(o.Socket))
	}
	if launched {
		log.Info("launched by the runtime", "name", o.Getenv(api.PluginIdxEnvVar)+"-"+o.Getenv(api.PluginNameEnvVar))
	}

	backoff := o.MinBackoff
	down, warned := time.Now(), false // since when not registered; said so
	for {
		closed, err := serveOnce(ctx, p, opts, log, func() {
			down, warned = time.Time{}, false
			if o.Registered != nil {
				o.Registered(true, "")
			}
		})
		if !launched && ctx.Err() == nil {
			o.noteDown(&down, &warned, closed, err)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errIdentity):
			return err
		case launched && err != nil:
			return fmt.Errorf("the connection the runtime gave the plugin: %w", err)
		case launched:
			log.Info("the runtime closed the connection; exiting (it launches the plugin again when it restarts)")
			return nil
		case err == nil && closed:
			backoff = o.MinBackoff
			log.Warn("the runtime closed the connection; reconnecting", "socket", o.Socket)
		case backoff == o.MinBackoff:
			log.Warn("cannot register with the runtime; retrying", "socket", o.Socket, "err", err.Error(), "retry_in", backoff.String())
		default: // the same again: said once, until the next registration
			log.Debug("cannot register with the runtime; retrying", "socket", o.Socket, "err", err.Error(), "retry_in", backoff.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		if err != nil {
			backoff = min(2*backoff, o.MaxBackoff)
		}
	}
}

// noteDown tells Registered that the plugin is not registered (the
// connection closed, or err), and Unavailable once per outage when it has
// lasted UnavailableAfter.
func (o Options) noteDown(down *time.Time, warned *bool, closed bool, err error) {
	why := "the runtime closed the connection"
	if err != nil {
		why = err.Error()
	}
	if down.IsZero() {
		*down = time.Now()
	}
	if o.Registered != nil {
		o.Registered(false, why)
	}
	if d := time.Since(*down); err != nil && !*warned && d >= o.UnavailableAfter && o.Unavailable != nil {
		*warned = true
		o.Unavailable(UnavailableMessage(o.Socket, d, err))
	}
}

func (o Options) withDefaults() Options {
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Index == "" {
		o.Index = DefaultIndex
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.UnavailableAfter <= 0 {
		o.UnavailableAfter = 15 * time.Second
	}
	return o
}

// startTimeout bounds registration plus configuration: twice the
// registration timeout runtimes use by default.
const startTimeout = 2 * stub.DefaultRegistrationTimeout

// errIdentity marks errors no retry can fix (a bad name or index).
var errIdentity = errors.New("plugin identity")

// serveOnce connects, registers (then calls registered) and serves until
// the connection closes (closed true, err nil) or ctx is done. An error
// means no registration.
func serveOnce(ctx context.Context, p *Plugin, opts []stub.Option, log *slog.Logger, registered func()) (closed bool, err error) {
	closedC := make(chan struct{})
	var once sync.Once
	onClose := stub.WithOnClose(func() { once.Do(func() { close(closedC) }) })
	st, err := stub.New(p, append(opts, onClose)...)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errIdentity, err)
	}
	// Start waits for the runtime's Configure request without a deadline
	// (and holds the stub's lock meanwhile, so even the close notice waits):
	// a runtime that never configures the plugin must not hang it. Such a
	// stub is abandoned, and stopped should it start after all.
	startC := make(chan error, 1)
	go func() { startC <- st.Start(ctx) }()
	abandon := func() {
		go func() {
			if <-startC == nil {
				st.Stop()
			}
		}()
	}
	select {
	case err := <-startC:
		if err != nil {
			return false, err
		}
	case <-time.After(startTimeout):
		abandon()
		return false, fmt.Errorf("the runtime did not configure the plugin within %s", startTimeout)
	case <-ctx.Done():
		abandon()
		return false, ctx.Err()
	}
	log.Info("registered with the runtime", "runtime_nri_version", st.RuntimeNRIVersion(), "request_timeout", st.RequestTimeout().String())
	registered()
	select {
	case <-closedC:
		st.Stop()
		return true, nil
	case <-ctx.Done():
		st.Stop()
		return false, nil
	}
}

// stubLogger sends the NRI stub's records to slog.
type stubLogger struct{ l *slog.Logger }

func (s stubLogger) Debugf(ctx context.Context, format string, args ...any) {
	s.l.DebugContext(ctx, fmt.Sprintf(format, args...), "origin", "nri-stub")
}

// Infof logs at debug level: the stub narrates every connection attempt,
// and Run logs what matters (registered, lost, retrying) itself.
func (s stubLogger) Infof(ctx context.Context, format string, args ...any) {
	s.l.DebugContext(ctx, fmt.Sprintf(format, args...), "origin", "nri-stub")
}

func (s stubLogger) Warnf(ctx context.Context, format string, args ...any) {
	s.l.WarnContext(ctx, fmt.Sprintf(format, args...), "origin", "nri-stub")
}

func (s stubLogger) Errorf(ctx context.Context, format string, args ...any) {
	s.l.ErrorContext(ctx, fmt.Sprintf(format, args...), "origin", "nri-stub")
}
