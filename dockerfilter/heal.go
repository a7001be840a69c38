package dockerfilter

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The healer. A container that shares another's network namespace
// (compose network_mode: service:X, Docker's container:<id>) joins the
// namespace X has when it starts. When X restarts — a crash, an OOM kill,
// the daemon's restart policy — Docker gives X a new namespace and the
// joiner stays in the old one, which has lost its interfaces: only lo is
// left, and it never comes back on its own (compose's depends_on restart
// covers only restarts compose itself makes). In the CodeForge stack that
// is the sandbox (and, in transparent mode, the proxy) in netguard's
// namespace: every run that touches the network fails until someone
// recreates it.
//
// The filter already holds the engine's socket, so it heals this itself,
// with no new API for its clients: every HealInterval it lists its own
// compose project's containers and restarts a running joiner that started
// before its namespace holder's current run — but only once the holder is
// ready (healthy, when it has a health check: netguard's says its iptables
// rules are in) and every service the joiner depends on with condition
// service_healthy is healthy and not itself stale (transparent mode: the
// proxy, whose rules lock the namespace). A joiner never enters a
// namespace before its lock is in place; until it is restarted it sits in
// a namespace with no way out at all.
const (
	// DefaultHealInterval is how often the healer looks.
	DefaultHealInterval = time.Second
	// healStopSeconds is how long a stale joiner gets to stop before
	// Docker kills it (its network is gone anyway).
	healStopSeconds = 3
	// labelDependsOn is compose's list of a service's dependencies,
	// "service:condition:restart,…".
	labelDependsOn = "com.docker.compose.depends_on"
)

// healer restarts containers left in a dead network namespace.
type healer struct {
	docker  *client.Client
	project func(context.Context) (string, error)
	log     *slog.Logger
	// told remembers what was last logged per container, so a joiner
	// that has to wait is reported once, not every pass.
	told map[string]string
}

// member is what the healer knows of one container of the project.
type member struct {
	id, name, service string
	running           bool
	started           time.Time
	health            container.HealthStatus // "" when it has no health check
	holder            string                 // container ID whose namespace it joins, or ""
	healthyDeps       []string               // services it depends on with condition service_healthy
}

// Heal restarts containers of the filter's compose project that were left
// in a network namespace whose holder has restarted (see healer), every
// interval until ctx ends. It needs compose discovery (no
// SandboxContainer): the project is learned from the filter's own
// container. Errors are logged, never fatal: the filter keeps serving.
func (f *Filter) Heal(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultHealInterval
	}
	h := &healer{docker: f.docker, project: f.sandbox.ownProject, log: f.log.With("part", "healer"), told: map[string]string{}}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := h.pass(pctx); err != nil && ctx.Err() == nil {
			h.once("", "pass failed: "+err.Error(), func(msg string) { h.log.Warn(msg) })
		} else if err == nil {
			delete(h.told, "")
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// once logs msg through logf unless it is what was last logged for key.
func (h *healer) once(key, msg string, logf func(string)) {
	if h.told[key] == msg {
		return
	}
	h.told[key] = msg
	logf(msg)
}

// pass looks at the project once and restarts what is stale and ready to
// rejoin.
func (h *healer) pass(ctx context.Context) error {
	project, err := h.project(ctx)
	if err != nil {
		return err
	}
	list, err := h.docker.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelProject+"="+project),
	})
	if err != nil {
		return fmt.Errorf("list project %s: %w", project, err)
	}
	// byRef finds a container by full ID or by name (network_mode
	// container:<ref> may hold either).
	byRef := map[string]*member{}
	byService := map[string][]*member{}
	var members []*member
	for _, s := range list.Items {
		m, err := h.inspect(ctx, s.ID)
		if err != nil {
			return err
		}
		members = append(members, m)
		byRef[m.id], byRef[m.name] = m, m
		byService[m.service] = append(byService[m.service], m)
	}
	stale := func(m *member) bool {
		hd := byRef[m.holder]
		return m.running && hd != nil && hd.running && hd.started.After(m.started)
	}
	ready := func(m *member) string {
		switch {
		case !m.running:
			return m.service + " is not running"
		case m.health != "" && m.health != container.Healthy:
			return fmt.Sprintf("%s is %s", m.service, m.health)
		case stale(m):
			return m.service + " is itself in a dead namespace"
		}
		return ""
	}
	for _, m := range members {
		if !stale(m) {
			delete(h.told, m.id)
			continue
		}
		hd := byRef[m.holder]
		wait := ready(hd)
		for _, dep := range m.healthyDeps {
			if wait != "" {
				break
			}
			if len(byService[dep]) == 0 {
				wait = dep + " does not exist"
			}
			for _, d := range byService[dep] {
				if wait = ready(d); wait != "" {
					break
				}
			}
		}
		if wait != "" {
			h.once(m.id, fmt.Sprintf("%s is in %s's previous network namespace; restarting it once %s and its dependencies are ready (now: %s)", m.name, hd.name, hd.service, wait),
				func(msg string) { h.log.Warn(msg) })
			continue
		}
		h.log.Warn("restarting a container left in a dead network namespace",
			"container", m.name, "service", m.service, "holder", hd.name, "holder_started", hd.started.Format(time.RFC3339Nano))
		timeout := healStopSeconds
		if _, err := h.docker.ContainerRestart(ctx, m.id, client.ContainerRestartOptions{Timeout: &timeout}); err != nil {
			h.log.Error("restart failed", "container", m.name, "err", err)
			continue
		}
		delete(h.told, m.id)
		h.log.Info("restarted: it joined the current network namespace", "container", m.name, "holder", hd.name)
	}
	return nil
}

// inspect reads what the healer needs of one container.
func (h *healer) inspect(ctx context.Context, id string) (*member, error) {
	res, err := h.docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", id, err)
	}
	c := res.Container
	m := &member{id: c.ID, name: strings.TrimPrefix(c.Name, "/")}
	if c.Config != nil {
		m.service = c.Config.Labels[labelService]
		for _, d := range strings.Split(c.Config.Labels[labelDependsOn], ",") {
			if svc, rest, ok := strings.Cut(d, ":"); ok && strings.HasPrefix(rest, "service_healthy:") {
				m.healthyDeps = append(m.healthyDeps, svc)
			}
		}
	}
	if c.HostConfig != nil {
		if ref, ok := strings.CutPrefix(string(c.HostConfig.NetworkMode), "container:"); ok {
			m.holder = ref
		}
	}
	if st := c.State; st != nil {
		m.running = st.Running && !st.Restarting
		m.started, _ = time.Parse(time.RFC3339Nano, st.StartedAt)
		if st.Health != nil && st.Health.Status != container.NoHealthcheck {
			m.health = st.Health.Status
		}
	}
	return m, nil
}
