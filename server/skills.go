package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/skills"
)

const (
	skillScheme      = "skill://"
	skillTemplate    = "skill://{name}"
	skillMIMEType    = "text/typescript"
	promptRunSkill   = "run_skill"
	maxPromptSource  = 16 << 10 // run_skill includes sources up to this size
	maxCompletions   = 100
	skillFileSuffix  = ".ts"
	skillDescription = "// @description"
)

// skillInfo is what the server mirrors of one skill to notice changes.
type skillInfo struct {
	Description string
	Size        int64
	ModTime     time.Time
}

func (s *Server) addSkillFeatures() {
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: skillTemplate,
		Name:        "skill",
		Title:       "Saved skill",
		Description: "TypeScript source of a saved skill (a file <name>.ts in the skills directory).",
		MIMEType:    skillMIMEType,
	}, s.readSkill)
	s.mcp.AddPrompt(&mcp.Prompt{
		Name:        promptRunSkill,
		Title:       "Run a saved skill",
		Description: "Ask the agent to run a saved skill with execute_code.",
		Arguments: []*mcp.PromptArgument{{
			Name:        "name",
			Title:       "Skill",
			Description: "Name of the saved skill to run.",
			Required:    true,
		}},
	}, s.runSkillPrompt)
}

// readSkill serves resources/read for skill://<name>.
func (s *Server) readSkill(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	name, ok := strings.CutPrefix(uri, skillScheme)
	if !ok || skills.ValidName(name) != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	src, err := s.opts.Skills.Read(name)
	if errors.Is(err, skills.ErrNotFound) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, fmt.Errorf("read skill %s: %w", name, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: skillMIMEType, Text: src}}}, nil
}

func (s *Server) updateSkill(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, err := parseStringArgs(req.Params.Arguments, "name", "patch")
	if err != nil {
		return toolError("update_skill: %v", err), nil
	}
	name := args["name"]
	if err := skills.ValidName(name); err != nil {
		return toolError("update_skill: %v", err), nil
	}
	if strings.TrimSpace(args["patch"]) == "" {
		return toolError("update_skill: patch is empty: pass one or more SEARCH/REPLACE blocks"), nil
	}
	src, err := s.opts.Skills.Patch(name, args["patch"])
	if err != nil {
		return toolError("update_skill: %v", err), nil
	}
	s.syncAfter(ctx, toolUpdateSkill)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
		Text: fmt.Sprintf("updated skill %q (%d bytes); read it at %s%s", name, len(src), skillScheme, name),
	}}}, nil
}

func (s *Server) deleteSkill(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, err := parseStringArgs(req.Params.Arguments, "name")
	if err != nil {
		return toolError("delete_skill: %v", err), nil
	}
	name := args["name"]
	if err := skills.ValidName(name); err != nil {
		return toolError("delete_skill: %v", err), nil
	}
	if err := s.opts.Skills.Delete(name); err != nil {
		return toolError("delete_skill: %v", err), nil
	}
	s.syncAfter(ctx, toolDeleteSkill)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("deleted skill %q", name)}}}, nil
}

func (s *Server) skillNames() []string {
	list, err := s.opts.Skills.List()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(list))
	for _, sk := range list {
		names = append(names, sk.Name)
	}
	slices.Sort(names)
	return names
}

func (s *Server) runSkillPrompt(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	name := req.Params.Arguments["name"]
	if err := skills.ValidName(name); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("run_skill: %v", err)}
	}
	src, err := s.opts.Skills.Read(name)
	if errors.Is(err, skills.ErrNotFound) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("run_skill: %v", err)}
	}
	if err != nil {
		return nil, fmt.Errorf("run_skill: read skill %s: %w", name, err)
	}
	desc := skillDescriptionOf(src)
	var b strings.Builder
	fmt.Fprintf(&b, "Run the saved skill %q with the execute_code tool, passing this code:\n\n```ts\nawait import(%q);\n```\n",
		name, s.skillImportURL(name))
	if desc != "" {
		fmt.Fprintf(&b, "\nWhat it does: %s\n", desc)
	}
	b.WriteString("\nIf it exports functions instead of doing its work when imported, import it and call them, printing what they return.\n")
	if len(src) <= maxPromptSource {
		fmt.Fprintf(&b, "\nIts source (%s%s):\n\n```ts\n%s\n```\n", skillScheme, name, strings.TrimRight(src, "\n"))
	} else {
		fmt.Fprintf(&b, "\nIts source is %d bytes; read it as the resource %s%s if you need it.\n", len(src), skillScheme, name)
	}
	return &mcp.GetPromptResult{
		Description: fmt.Sprintf("Run the saved skill %q", name),
		Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: b.String()}}},
	}, nil
}

// skillImportURL is the file:// URL code imports the skill from.
func (s *Server) skillImportURL(name string) string {
	u := url.URL{Scheme: "file", Path: path.Join(s.env.SkillsDir, name+skillFileSuffix)}
	return u.String()
}

// complete answers completion/complete for run_skill's name argument and
// the skill://{name} template: saved skill names with the typed prefix.
func (s *Server) complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	res := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	ref := req.Params.Ref
	forSkill := (ref.Type == "ref/prompt" && ref.Name == promptRunSkill) ||
		(ref.Type == "ref/resource" && ref.URI == skillTemplate)
	if !forSkill || req.Params.Argument.Name != "name" {
		return res, nil
	}
	prefix := strings.ToLower(req.Params.Argument.Value)
	var matches []string
	for _, n := range s.skillNames() {
		if strings.HasPrefix(strings.ToLower(n), prefix) {
			matches = append(matches, n)
		}
	}
	res.Completion.Total = len(matches)
	if len(matches) > maxCompletions {
		matches = matches[:maxCompletions]
		res.Completion.HasMore = true
	}
	if matches != nil {
		res.Completion.Values = matches
	}
	return res, nil
}

// syncAfter rescans the skills after a tool call that may have changed
// them, logging (not failing the call) when the rescan fails.
func (s *Server) syncAfter(ctx context.Context, via string) {
	if err := s.syncSkills(context.WithValue(ctx, viaKey{}, via)); err != nil {
		s.skillLog.Warn("rescan skills failed", "via", via, "err", err)
	}
}

type viaKey struct{}

// syncSkills mirrors the skills directory into the MCP server's resource
// list: a new skill is added, a changed one re-added, a deleted one
// removed. Each of those makes the go-sdk send
// notifications/resources/list_changed (debounced) to every session, so a
// change of content notifies too. An unchanged fingerprint skips the scan.
func (s *Server) syncSkills(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	fp, err := s.opts.Skills.Fingerprint()
	if err != nil {
		return err
	}
	if s.synced && fp == s.fingerprint {
		return nil
	}
	list, err := s.opts.Skills.List()
	if err != nil {
		return err
	}
	initial := !s.synced
	via, _ := ctx.Value(viaKey{}).(string)
	seen := make(map[string]bool, len(list))
	for _, sk := range list {
		seen[sk.Name] = true
		info := skillInfo{Description: sk.Description, Size: sk.Size, ModTime: sk.ModTime}
		old, ok := s.mirrored[sk.Name]
		if ok && old == info {
			continue
		}
		s.mirrored[sk.Name] = info
		s.mcp.AddResource(&mcp.Resource{
			URI:         skillScheme + sk.Name,
			Name:        sk.Name,
			Title:       sk.Name,
			Description: sk.Description,
			MIMEType:    skillMIMEType,
			Size:        sk.Size,
		}, s.readSkill)
		switch {
		case initial:
		case ok:
			s.skillLog.Info("updated", "name", sk.Name, "bytes", sk.Size, "via", via)
		default:
			s.skillLog.Info("created", "name", sk.Name, "bytes", sk.Size, "via", via)
		}
	}
	var gone []string
	for name := range s.mirrored {
		if !seen[name] {
			gone = append(gone, name)
			delete(s.mirrored, name)
			s.skillLog.Info("deleted", "name", name, "via", via)
		}
	}
	if len(gone) > 0 {
		uris := make([]string, len(gone))
		for i, n := range gone {
			uris[i] = skillScheme + n
		}
		s.mcp.RemoveResources(uris...)
	}
	s.fingerprint, s.synced = fp, true
	return nil
}

// skillDescriptionOf reads the @description line of a skill's source.
func skillDescriptionOf(src string) string {
	for line := range strings.Lines(src) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, skillDescription); ok {
			return strings.TrimSpace(rest)
		}
		if line != "" && !strings.HasPrefix(line, "//") {
			break
		}
	}
	return ""
}
