// Package e2e holds the end-to-end tests of the Docker deployment: they
// build the images (without a registry, through deploy/build-base-images.sh),
// bring docker-compose.yml up under a unique compose project with the
// test-only override e2e/compose.test.yml (which adds a TLS "API" container
// with its own CA), drive the real server through the go-sdk MCP client over
// HTTP, inject faults with the real Docker CLI, and tear the stack down
// afterwards — also when a test fails, panics, times out or is interrupted
// (a reaper process watches the test binary). TestTransparentMode does the
// same for the transparent proxy mode (deploy/transparent/compose.transparent.yml
// applied over docker-compose.yml). TestStackHeals and
// TestTransparentStackHeals crash each container in turn (SIGKILL of its
// main process from the host) and check that the stack heals itself.
//
// They need a running Docker engine and Compose v2 (deploy/install-docker.sh)
// and fail, never skip, without them. Run them with
//
//	go test -count=1 -timeout 30m ./e2e/
//
// and the benchmark of the Docker backend's overhead with
//
//	go test -count=1 -run '^$' -bench DockerExecuteCode -benchtime 30x ./e2e/
package e2e
