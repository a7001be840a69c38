package server

import (
	"context"
	"encoding/json"
	"fmt"
	"path"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/skills"
)

// The tools' names and argument names are a contract (README, "What the
// agent gets"; docs/ARCHITECTURE.md): saved prompts depend on them.
const (
	toolExecuteCode     = "execute_code"
	toolListAPIs        = "list_apis"
	toolGetInstructions = "get_instructions"
	toolUpdateSkill     = "update_skill"
	toolDeleteSkill     = "delete_skill"
)

func (s *Server) addTools() {
	s.mcp.AddTool(&mcp.Tool{
		Name:  toolExecuteCode,
		Title: "Run TypeScript in the sandbox",
		Description: "Run TypeScript in a fresh Deno sandbox and return what it printed (stdout; stderr labelled). " +
			"Call REST APIs with plain fetch(), combine the answers in the code, and print only what you need. " +
			"Never put a secret in code: write the credential's token NAME where the secret goes " +
			"(e.g. Authorization: \"Bearer GITHUB_TOKEN\"); the proxy swaps in the real value on the wire, only for that API's hosts. " +
			"list_apis shows the APIs, their domains and token names; get_instructions explains files, network, skills and limits.",
		InputSchema:  s.executeInputSchema(),
		OutputSchema: executeOutputSchema(),
		Annotations:  &mcp.ToolAnnotations{OpenWorldHint: ptr(true)},
	}, s.executeCode)

	s.mcp.AddTool(&mcp.Tool{
		Name:  toolListAPIs,
		Title: "List the configured APIs",
		Description: "List the APIs the sandbox code can call: name, description, domains, credential token names " +
			"(write these in code where the secret goes; never the values), reference documentation URL, " +
			"restricted HTTP methods, and whether TypeScript types exist (types_path is where code can read them).",
		InputSchema:  noArgsSchema(),
		OutputSchema: listAPIsOutputSchema(),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.listAPIs)

	s.mcp.AddTool(&mcp.Tool{
		Name:        toolGetInstructions,
		Title:       "How to use CodeForge",
		Description: "Return the usage primer: how credentials work, which directories and hosts code can reach, how to save and run skills, and the limits.",
		InputSchema: noArgsSchema(),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.getInstructions)

	s.mcp.AddTool(&mcp.Tool{
		Name:  toolUpdateSkill,
		Title: "Edit a saved skill",
		Description: "Edit the saved skill <name> with SEARCH/REPLACE blocks; if any block fails, nothing changes and the error quotes it. " +
			skills.PatchFormat,
		InputSchema: updateSkillInputSchema(),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false},
	}, s.updateSkill)

	s.mcp.AddTool(&mcp.Tool{
		Name:        toolDeleteSkill,
		Title:       "Delete a saved skill",
		Description: "Delete the saved skill <name> (the file <name>.ts in the skills directory).",
		InputSchema: deleteSkillInputSchema(),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
	}, s.deleteSkill)
}

// executeInputSchema declares execute_code's arguments. The handler checks
// them again itself, so a value the schema would refuse (a timeout sent as
// a string) still gets a tool error in plain words.
func (s *Server) executeInputSchema() *jsonschema.Schema {
	return argsSchema(props{
		"code": str(fmt.Sprintf("TypeScript for Deno (top-level await works). Print results with console.log. At most %d bytes.",
			s.opts.MaxCodeBytes)),
		"apis": arrayOf(str(""),
			"Names of the APIs (from list_apis) this run uses: narrows its network to their domains. Default: every active API."),
		"timeout": seconds(fmt.Sprintf("Seconds before the run is stopped (output so far is kept). Default %s, at most %s. Time waiting for a free slot counts.",
			formatSeconds(s.opts.DefaultTimeout.Seconds()), formatSeconds(s.opts.MaxTimeout.Seconds())),
			s.opts.MaxTimeout.Seconds()),
		"background": boolean("Return at once with the run's id instead of waiting (for runs that may outlast a tool call, about a minute). " +
			"Then run_wait gives the result, run_status and run_output show progress, cancel_run stops it."),
		"keep_running": boolean("If this call is cancelled or its connection is lost before the run ends, let the run go on as a background run instead of stopping it."),
	}, "code")
}

// noArgsSchema is the input schema of a tool without arguments.
func noArgsSchema() *jsonschema.Schema { return argsSchema(props{}) }

func skillNameSchema() *jsonschema.Schema {
	s := str("Skill name: letters, digits, '_' and '-', starting with a letter or digit, at most 64 characters.")
	s.Pattern = "^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$"
	return s
}

func updateSkillInputSchema() *jsonschema.Schema {
	return argsSchema(props{
		"name": skillNameSchema(),
		"patch": str("One or more SEARCH/REPLACE blocks: <<<<<<< SEARCH, the exact current text, =======, the replacement, " +
			">>>>>>> REPLACE (each marker on its own line)."),
	}, "name", "patch")
}

func deleteSkillInputSchema() *jsonschema.Schema {
	return argsSchema(props{"name": skillNameSchema()}, "name")
}

// netEntrySchema is one request of a run's network log.
func netEntrySchema() *jsonschema.Schema {
	return object(props{
		"method":              str(""),
		"host":                str(""),
		"path":                str("Request path, without the query string."),
		"status":              integer("Response status; 0 when there was no response."),
		"credential_injected": boolean("Whether the proxy put a real credential into this request."),
		"bytes_out":           integer(""),
		"bytes_in":            integer(""),
		"blocked":             str("Why the proxy refused the request; absent when it passed."),
		"notes": arrayOf(str(""), "What the proxy did that the code may need to know, e.g. a token name sent as the plain name "+
			"because the API does not take credentials in that part of a request."),
	}, "method", "host", "path", "status", "credential_injected", "bytes_out", "bytes_in")
}

func executeOutputSchema() *jsonschema.Schema {
	return withDescription(object(props{
		"run_id":        str("The run's id, for run_status, run_wait, run_output, cancel_run and run://{id}."),
		"state":         str("queued or running for a background run just started; else how it ended: succeeded, failed, timed_out."),
		"exit_code":     integer("Exit status of the Deno process (non-zero: it failed)."),
		"duration_ms":   integer("How long the run took, in milliseconds."),
		"timed_out":     boolean("The run was stopped at its timeout; output before it is kept."),
		"out_of_memory": boolean("The run exceeded the sandbox memory limit."),
		"truncated":     boolean("stdout or stderr went over the output cap and was cut."),
		"network":       arrayOf(netEntrySchema(), "Every request the run made through the proxy."),
		"files":         arrayOf(fileOutputSchema(), "Files the run left in out/: images inline, others as resource links."),
	}, "run_id", "state"),
		"A background run just started has run_id and state only; an ended run has every field.")
}

func listAPIsOutputSchema() *jsonschema.Schema {
	api := object(props{
		"name":               str("Pass it in execute_code's apis argument."),
		"description":        str(""),
		"domains":            arrayOf(str(""), "Hosts the API is served from."),
		"credentials":        arrayOf(str(""), "Token names to write where the secret goes; the proxy substitutes the real value."),
		"reference":          str("Documentation URL."),
		"restricted_methods": arrayOf(str(""), "HTTP methods the proxy refuses for this API (a permanent 403)."),
		"allowed_methods": arrayOf(str(""),
			"When present, the only HTTP methods the proxy lets through to this API; any other gets a permanent 403."),
		"substitute_in": arrayOf(str(""),
			"Parts of a request (headers, query, path, body) where a token name becomes the secret; elsewhere it is sent as the plain name."),
		"ports":      arrayOf(integer(""), "HTTPS ports of the API's hosts that receive credentials."),
		"has_types":  boolean(""),
		"types_path": str("Where code can read the API's TypeScript declarations (when has_types)."),
	}, "name", "description", "domains", "credentials", "reference", "restricted_methods", "substitute_in", "ports", "has_types")
	return object(props{"apis": arrayOf(api, "")}, "apis")
}

// apiInfo is one entry of list_apis.
type apiInfo struct {
	Name              string   `json:"name"`
	Description       string   `json:"description"`
	Domains           []string `json:"domains"`
	Credentials       []string `json:"credentials"`
	Reference         string   `json:"reference"`
	RestrictedMethods []string `json:"restricted_methods"`
	AllowedMethods    []string `json:"allowed_methods,omitempty"`
	SubstituteIn      []string `json:"substitute_in"`
	Ports             []int    `json:"ports"`
	HasTypes          bool     `json:"has_types"`
	TypesPath         string   `json:"types_path,omitempty"`
}

type listAPIsOutput struct {
	APIs []apiInfo `json:"apis"`
}

func (s *Server) listAPIs(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, err := objectFields(req.Params.Arguments); err != nil {
		return toolError("list_apis: %v", err), nil
	}
	out := listAPIsOutput{APIs: []apiInfo{}}
	for _, a := range s.opts.APIs().Active() {
		out.APIs = append(out.APIs, apiInfo{
			Name:              a.Name,
			Description:       a.Description,
			Domains:           nonNil(a.Domains),
			Credentials:       nonNil(a.TokenNames()),
			Reference:         a.Reference,
			RestrictedMethods: nonNil(a.RestrictedMethods),
			AllowedMethods:    a.AllowedMethods,
			SubstituteIn:      nonNil(a.SubstituteIn),
			Ports:             nonNil(a.Ports),
			HasTypes:          a.TypesPath != "",
			TypesPath:         s.sandboxTypesPath(a),
		})
	}
	text, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("list_apis: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
		StructuredContent: out,
	}, nil
}

// sandboxTypesPath is where the code sees an API's types.d.ts: the real
// file for the local backend, under Environment.TypesDir for a backend
// that mounts the APIs directory elsewhere.
func (s *Server) sandboxTypesPath(a *apis.API) string {
	if a.TypesPath == "" {
		return ""
	}
	if s.env.TypesDir != "" {
		return path.Join(s.env.TypesDir, a.Name, "types.d.ts")
	}
	return a.TypesPath
}

func (s *Server) getInstructions(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, err := objectFields(req.Params.Arguments); err != nil {
		return toolError("get_instructions: %v", err), nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s.instructions}}}, nil
}

func nonNil[T any](ss []T) []T {
	if ss == nil {
		return []T{}
	}
	return ss
}

func ptr[T any](v T) *T { return &v }
