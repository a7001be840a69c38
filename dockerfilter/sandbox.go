package dockerfilter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/moby/moby/client"
)

// Compose labels the filter finds the sandbox by.
const (
	labelProject = "com.docker.compose.project"
	labelService = "com.docker.compose.service"
)

// resolver finds the sandbox container. It asks the engine on every call,
// so a recreated or restarted sandbox is found without restarting the
// filter; only the filter's own compose project is remembered.
type resolver struct {
	docker   *client.Client
	service  string
	explicit string
	hostname string

	mu      sync.Mutex
	project string
}

// sandboxContainer is the resolved sandbox: its full ID and its name
// without the leading "/".
type sandboxContainer struct {
	id, name string
}

func (r *resolver) resolve(ctx context.Context) (sandboxContainer, error) {
	if r.explicit != "" {
		return r.inspectRunning(ctx, r.explicit)
	}
	project, err := r.ownProject(ctx)
	if err != nil {
		return sandboxContainer{}, err
	}
	list, err := r.docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).
			Add("label", labelProject+"="+project, labelService+"="+r.service).
			Add("status", "running"),
	})
	if err != nil {
		return sandboxContainer{}, fmt.Errorf("list sandbox containers: %w", err)
	}
	switch len(list.Items) {
	case 0:
		return sandboxContainer{}, fmt.Errorf("no running container of compose service %q in project %q (is the sandbox up?)", r.service, project)
	case 1:
		c := list.Items[0]
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		return sandboxContainer{id: c.ID, name: name}, nil
	default:
		return sandboxContainer{}, fmt.Errorf("%d running containers of compose service %q in project %q: scale it to 1 or pass --sandbox-container", len(list.Items), r.service, project)
	}
}

func (r *resolver) inspectRunning(ctx context.Context, ref string) (sandboxContainer, error) {
	res, err := r.docker.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if err != nil {
		return sandboxContainer{}, fmt.Errorf("inspect sandbox container %q: %w", ref, err)
	}
	c := res.Container
	if c.State == nil || !c.State.Running {
		return sandboxContainer{}, fmt.Errorf("sandbox container %q is not running", ref)
	}
	return sandboxContainer{id: c.ID, name: strings.TrimPrefix(c.Name, "/")}, nil
}

// ownProject learns the filter's compose project from its own container,
// whose hostname Docker sets to the container ID's prefix.
func (r *resolver) ownProject(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.project != "" {
		return r.project, nil
	}
	host := r.hostname
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("find own container: hostname: %w", err)
		}
	}
	if !containerRefPattern.MatchString(host) {
		return "", fmt.Errorf("find own container: hostname %q is not a container ID; pass --sandbox-container", host)
	}
	res, err := r.docker.ContainerInspect(ctx, host, client.ContainerInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("find own container %q (to learn the compose project): %w; run the filter in compose or pass --sandbox-container", host, err)
	}
	var project string
	if res.Container.Config != nil {
		project = res.Container.Config.Labels[labelProject]
	}
	if project == "" {
		return "", errors.New("own container has no " + labelProject + " label: run the filter in compose or pass --sandbox-container")
	}
	r.project = project
	return project, nil
}
