package server

import (
	"fmt"
	"strings"

	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/runs"
)

// buildInstructions writes the usage primer: the initialize instructions
// and get_instructions' text. It names the directories the backend in use
// really gives a run and the network model actually in force.
func (s *Server) buildInstructions() string {
	env := s.env
	skillsDir := strings.TrimSuffix(env.SkillsDir, "/")
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("CodeForge runs TypeScript in a Deno sandbox (%s backend). Write code that calls REST APIs with plain fetch(), "+
		"combines the answers, and prints only what you need with console.log: what the code prints is what you get back.\n", env.Backend)

	p("\n## Running code\n")
	p("- execute_code {code, apis?, timeout?}: code is a TypeScript program for Deno; top-level await works. " +
		"Every call is a fresh process: nothing in memory survives between calls.\n")
	p("- The result is stdout as text, then stderr labelled \"stderr:\". A non-zero exit, a timeout and running out of memory " +
		"each mark the result as an error with its own message; output printed before a timeout is kept.\n")
	if proxy.PerRunLog(s.opts.Gate) {
		p("- structuredContent has run_id, state, exit_code, duration_ms, timed_out, out_of_memory, truncated, files and network " +
			"(each request the run made: method, host, path, status, credential_injected, blocked).\n")
	} else {
		p("- structuredContent has run_id, state, exit_code, duration_ms, timed_out, out_of_memory, truncated and files; " +
			"network stays empty on this server (no per-run network log).\n")
	}

	p("\n## Long runs\n")
	p("- Every run has an id (structuredContent.run_id). A client may cut a tool call after about a minute: for anything that may take "+
		"longer (paging through many records, many API calls, a slow report), pass background: true to execute_code. It returns at once with the id; "+
		"then run_wait {id, timeout?} waits (at most %ss per call; call again while it is still going) and returns the same result execute_code would, "+
		"run_status {id} shows the state, the last lines of output and the network log so far, run_output {id, stream, offset, limit} pages through stdout or stderr, "+
		"and cancel_run {id} stops it. list_runs {state?} lists the runs kept, newest first. A background run has the same timeout rules as any run.\n",
		formatSeconds(s.opts.MaxWait.Seconds()))
	p("- keep_running: true lets a foreground run go on in the background if the call is cancelled or its connection drops; find it again with list_runs.\n")
	p("- Ended runs are kept for %s (all of them together at most %s; the oldest go first), also across server restarts; "+
		"a run the server was running when it stopped is marked interrupted.\n",
		runs.FormatDuration(s.runMgr.Settings().Retention), runs.FormatBytes(s.runMgr.Settings().MaxTotalBytes))

	p("\n## Files\n")
	p("- Scratch space: %s. Read-write; deleted when the run ends.\n", env.ScratchDir)
	if env.OutDir != "" {
		f := s.runMgr.Settings().Files
		p("- Files to hand back: write them to %s, after await Deno.mkdir(\"out\", {recursive: true}) (at most %d files, %s each, %s per run). They are kept with the run and listed in its result: "+
			"PNG, JPEG, GIF and WebP images up to %s come back inline; other files as resource links run://<id>/files/<name> (read them with resources/read). "+
			"Names: letters, digits, '.', '_' and '-'; only files directly in out/.\n",
			env.OutDir, f.MaxFiles, runs.FormatBytes(f.MaxFileBytes), runs.FormatBytes(f.MaxRunBytes), runs.FormatBytes(s.opts.InlineImageBytes))
	} else {
		p("- This backend (%s) cannot hand files back yet: print what you need on stdout (base64 for small binaries).\n", env.Backend)
	}
	p("- Skills: %s. Read-write; saved skills live here.\n", skillsDir)
	if env.TypesDir != "" {
		p("- API types: %s (read-only).\n", env.TypesDir)
	}
	p("- Nothing else can be read or written. There are no environment variables, subprocesses, FFI or system information, " +
		"and remote imports (https:, npm:, jsr:) are off: use the standard Web APIs and Deno's built-ins.\n")

	p("\n## Network\n")
	switch {
	case s.opts.Gate == nil:
		p("- This server runs without its egress proxy, so runs have no network at all: every fetch() fails. " +
			"APIs and credentials are not usable until CodeForge is started with the proxy.\n")
	case s.opts.Settings.YOLO:
		p("- YOLO mode is on: code may reach any host, through CodeForge's proxy. Credentials are still only ever sent to their own API's hosts.\n")
		p("- Pass apis: [\"name\", …] to execute_code to say which APIs a run uses (their types become readable); unknown names are an error that lists the valid ones.\n")
	default:
		p("- Code reaches only the domains of the configured APIs (list_apis shows them), through CodeForge's proxy; any other host is refused.\n")
		p("- Pass apis: [\"name\", …] to execute_code to narrow a run to those APIs' domains (default: every active API); " +
			"unknown names are an error that lists the valid ones.\n")
	}

	if s.opts.Gate != nil {
		p("\n## Credentials\n")
		p("- You never hold a real secret, and code must not contain one. Write the credential's token NAME where the secret goes, " +
			"e.g. headers: { Authorization: \"Bearer STRIPE_AUTH_TOKEN\" }.\n")
		p("- The proxy replaces the name with the real value on the wire, only in requests to that API's own hosts, " +
			"and turns the value back into the name in responses: printed output shows the name, never the secret.\n")
		p("- A token name becomes the secret only where the API's config allows (substitute_in; by default request headers only), " +
			"only over https:// and only to the API's ports. Anywhere else (a query string, a URL path, a request body, unless the API opted in) " +
			"it is sent as the plain name: the run's network log says so in \"notes\". Do not try to move a credential elsewhere.\n")
		p("- Responses are scrubbed of every secret in every common encoding; a response that holds one in a form that cannot be turned back " +
			"(e.g. base64) is refused with a 502. Range requests are not passed on: fetch whole resources.\n")
		p("- Some APIs refuse some HTTP methods (restricted_methods, or only allow some: allowed_methods): the proxy answers them with a permanent 403; do not retry. " +
			"To such APIs, form, JSON and multipart bodies (and POST bodies without a Content-Type) are checked for _method overrides and may be at most 1 MiB; " +
			"send a larger upload with a Content-Type such as application/octet-stream.\n")
	}

	p("\n## APIs\n")
	p("- list_apis {} returns each API's name, description, domains, credentials (token names), reference (documentation URL), " +
		"restricted_methods or allowed_methods, substitute_in, ports, has_types and types_path.\n")
	p("- When has_types is true, read the API's TypeScript declarations from types_path, " +
		"e.g. console.log(await Deno.readTextFile(\"<types_path>\")).\n")

	p("\n## Skills\n")
	p("- Save reusable code as a skill: await Deno.writeTextFile(\"%s/<name>.ts\", src), where src's first line is "+
		"\"// @description <what it does>\". Names: letters, digits, '_' and '-', starting with a letter or digit, at most 64 characters.\n", skillsDir)
	p("- Run one with execute_code: await import(\"file://%s/<name>.ts\"); a skill that exports functions can be imported and called.\n", skillsDir)
	p("- Saved skills are listed as resources skill://<name> and offered by the run_skill prompt. " +
		"Change one with update_skill {name, patch} (SEARCH/REPLACE blocks, applied all-or-nothing); remove one with delete_skill {name}.\n")

	p("\n## Limits\n")
	p("- Timeout: %ss by default, at most %ss (timeout argument, in seconds). Time spent waiting for a free slot counts.\n",
		formatSeconds(s.opts.DefaultTimeout.Seconds()), formatSeconds(s.opts.MaxTimeout.Seconds()))
	p("- At most %d runs at once; further calls wait in a queue (at most %d waiting, then \"server busy\").\n",
		s.opts.MaxConcurrent, s.opts.QueueLimit)
	p("- Code: at most %s. Output: stdout and stderr keep at most %s each; the rest is cut, with a note saying how much.\n",
		formatBytes(int64(s.opts.MaxCodeBytes)), formatBytes(int64(s.opts.MaxOutput)))
	if s.opts.MemoryMB > 0 {
		p("- Memory: %d MB per run.\n", s.opts.MemoryMB)
	}
	return b.String()
}

// formatBytes prints a size in the largest binary unit it is a whole
// multiple of: 262144 -> "256 KiB".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
