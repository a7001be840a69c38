package server

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSkillSavedByCodeBecomesResource: code saves a skill as DESIGN.md
// says; the client is told the resource list changed, lists it with its
// description and reads its source.
func TestSkillSavedByCodeBecomesResource(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	src := "// @description Greets the caller\nconsole.log(\"hello from the skill\");\n"
	code := "await Deno.writeTextFile(" + jsonString(h.skillsDir+"/greet.ts") + ", " + jsonString(src) + "); console.log(\"saved\")"
	if res := h.run(code); res.IsError || allText(res) != "saved\n" {
		t.Fatalf("saving a skill from code: %q", allText(res))
	}
	h.events.waitListChanged(t)
	if !strings.Contains(h.logText(), `msg=created component=skill name=greet`) {
		t.Errorf("no skill lifecycle log line; logs:\n%s", h.logText())
	}

	list, err := h.session.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Resources) != 1 {
		t.Fatalf("resources = %+v, want the one skill", list.Resources)
	}
	r := list.Resources[0]
	if r.URI != "skill://greet" || r.Name != "greet" || r.Description != "Greets the caller" || r.MIMEType != "text/typescript" {
		t.Fatalf("resource = %+v", r)
	}
	read, err := h.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "skill://greet"})
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Contents) != 1 || read.Contents[0].Text != src || read.Contents[0].MIMEType != "text/typescript" {
		t.Fatalf("read skill://greet = %+v", read.Contents)
	}

	// The template is listed too, and a missing skill is "not found".
	tmpl, err := h.session.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var skillTmpl *mcp.ResourceTemplate
	for _, rt := range tmpl.ResourceTemplates {
		if rt.URITemplate == "skill://{name}" {
			skillTmpl = rt
		}
	}
	if skillTmpl == nil || skillTmpl.MIMEType != "text/typescript" {
		t.Fatalf("templates = %+v, want skill://{name} (text/typescript) among them", tmpl.ResourceTemplates)
	}
	for _, uri := range []string{"skill://nope", "skill://../etc/passwd", "skill://a/b"} {
		if _, err := h.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s: %v, want not found", uri, err)
		}
	}

	// Changing the content (not the set) notifies as well.
	h.events.drainListChanged()
	code = "await Deno.writeTextFile(" + jsonString(h.skillsDir+"/greet.ts") + ", " + jsonString("// @description Greets loudly\nconsole.log(\"HELLO\");\n") + ")"
	h.run(code)
	h.events.waitListChanged(t)
	list, _ = h.session.ListResources(ctx, nil)
	if len(list.Resources) != 1 || list.Resources[0].Description != "Greets loudly" {
		t.Fatalf("after rewrite: %+v", list.Resources)
	}

	// A skill deleted behind the server's back is noticed at the next run.
	h.events.drainListChanged()
	if err := os.Remove(h.skillsDir + "/greet.ts"); err != nil {
		t.Fatal(err)
	}
	h.run(`console.log("rescan")`)
	h.events.waitListChanged(t)
	if list, _ := h.session.ListResources(ctx, nil); len(list.Resources) != 0 {
		t.Fatalf("deleted skill still listed: %+v", list.Resources)
	}
}

func TestUpdateSkill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	original := "// @description Counts things\nconst n = 1;\nconsole.log(n);\nconsole.log(n);\n"
	writeFile(t, h.skillsDir+"/count.ts", original)
	writeFile(t, h.skillsDir+"/other.ts", "// @description Other\n")
	h.run(`console.log("rescan")`) // the server picks up files written behind its back after a run
	h.events.drainListChanged()

	ok := h.call("update_skill", map[string]any{"name": "count", "patch": "<<<<<<< SEARCH\nconst n = 1;\n=======\nconst n = 2;\n>>>>>>> REPLACE\n"})
	if ok.IsError || !strings.Contains(allText(ok), `updated skill "count"`) {
		t.Fatalf("update_skill: IsError=%v %q", ok.IsError, allText(ok))
	}
	want := strings.Replace(original, "const n = 1;", "const n = 2;", 1)
	if got, _ := os.ReadFile(h.skillsDir + "/count.ts"); string(got) != want {
		t.Fatalf("after update: %q, want %q", got, want)
	}
	h.events.waitListChanged(t)
	if !strings.Contains(h.logText(), "msg=updated component=skill name=count") {
		t.Errorf("no \"updated\" lifecycle line; logs:\n%s", h.logText())
	}
	if res := h.run(`await import(` + jsonString("file://"+h.skillsDir+"/count.ts") + `)`); allText(res) != "2\n2\n" {
		t.Fatalf("patched skill prints %q", allText(res))
	}

	before := snapshot(t, h.skillsDir)
	block := func(search, replace string) string {
		return "<<<<<<< SEARCH\n" + search + "=======\n" + replace + ">>>>>>> REPLACE\n"
	}
	cases := []struct {
		name string
		args any
		want []string
	}{
		{"no match", map[string]any{"name": "count", "patch": block("const n = 3;\n", "x\n")}, []string{"const n = 3;"}},
		{"two matches", map[string]any{"name": "count", "patch": block("console.log(n);\n", "x\n")}, []string{"console.log(n);", "2"}},
		{"second block fails", map[string]any{"name": "count", "patch": block("const n = 2;\n", "const n = 9;\n") + block("missing\n", "x\n")}, []string{"missing"}},
		{"empty search", map[string]any{"name": "count", "patch": block("", "x\n")}, []string{"SEARCH"}},
		{"malformed markers", map[string]any{"name": "count", "patch": "<<<<<<< SEARCH\nconst n = 2;\n>>>>>>> REPLACE\n"}, []string{"======="}},
		{"no blocks", map[string]any{"name": "count", "patch": "const n = 2;"}, []string{"SEARCH"}},
		{"empty patch", map[string]any{"name": "count", "patch": ""}, []string{"patch is empty"}},
		{"missing patch", map[string]any{"name": "count"}, []string{"patch is required"}},
		{"patch not a string", map[string]any{"name": "count", "patch": 5}, []string{"patch must be a string"}},
		{"missing skill", map[string]any{"name": "nope", "patch": block("a\n", "b\n")}, []string{"not found", `"nope"`, "count, other"}},
		{"unknown argument", map[string]any{"name": "count", "patch": block("const n = 2;\n", "x\n"), "dry_run": true}, []string{`unknown argument "dry_run"`}},
	}
	for _, bad := range badSkillNames() {
		cases = append(cases, struct {
			name string
			args any
			want []string
		}{"bad name " + bad.label, map[string]any{"name": bad.name, "patch": block("const n = 2;\n", "x\n")}, []string{"invalid skill name"}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.refused(t, "update_skill", tc.args, tc.want, before)
		})
	}
}

func TestDeleteSkill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	writeFile(t, h.skillsDir+"/old.ts", "// @description Old\n")
	writeFile(t, h.skillsDir+"/keep.ts", "// @description Keep\n")
	h.run(`console.log("rescan")`)
	h.events.drainListChanged()

	if res := h.call("delete_skill", map[string]any{"name": "old"}); res.IsError || allText(res) != `deleted skill "old"` {
		t.Fatalf("delete_skill: %v %q", res.IsError, allText(res))
	}
	if _, err := os.Stat(h.skillsDir + "/old.ts"); !os.IsNotExist(err) {
		t.Fatalf("old.ts still there: %v", err)
	}
	h.events.waitListChanged(t)
	list, _ := h.session.ListResources(ctx, nil)
	if len(list.Resources) != 1 || list.Resources[0].URI != "skill://keep" {
		t.Fatalf("resources after delete: %+v", list.Resources)
	}
	if !strings.Contains(h.logText(), "msg=deleted component=skill name=old") {
		t.Errorf("no \"deleted\" lifecycle line; logs:\n%s", h.logText())
	}

	before := snapshot(t, h.skillsDir)
	cases := []struct {
		label string
		args  any
		want  []string
	}{
		{"missing skill", map[string]any{"name": "old"}, []string{"not found", `"old"`, "keep"}},
		{"missing name", map[string]any{}, []string{"name is required"}},
		{"name not a string", map[string]any{"name": []string{"keep"}}, []string{"name must be a string"}},
	}
	for _, bad := range badSkillNames() {
		cases = append(cases, struct {
			label string
			args  any
			want  []string
		}{"bad name " + bad.label, map[string]any{"name": bad.name}, []string{"invalid skill name"}})
	}
	// A file outside the skills directory must survive "../x".
	outside := h.skillsDir + "/../x.ts"
	writeFile(t, outside, "outside")
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			h.refused(t, "delete_skill", tc.args, tc.want, before)
		})
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "outside" {
		t.Fatalf("file outside the skills directory: %q %v", b, err)
	}
}

type badName struct{ label, name string }

// badSkillNames are the names the issue lists, each refused.
func badSkillNames() []badName {
	return []badName{
		{"../x", "../x"},
		{"a/b", "a/b"},
		{".", "."},
		{"..", ".."},
		{"empty", ""},
		{"NUL", "a\x00b"},
		{"65 characters", strings.Repeat("a", 65)},
		{"leading dash", "-x"},
		{"backslash", `a\b`},
	}
}

func TestRunSkillPromptAndCompletion(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx := context.Background()
	writeFile(t, h.skillsDir+"/hello.ts", "// @description Says hello\nconsole.log(\"hello from hello\");\n")
	writeFile(t, h.skillsDir+"/help-me.ts", "// @description Helps\nexport function help() { return \"helped\"; }\n")
	writeFile(t, h.skillsDir+"/other.ts", "console.log(0)\n")

	prompts, err := h.session.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) != 1 {
		t.Fatalf("prompts: %+v %v", prompts, err)
	}
	p := prompts.Prompts[0]
	if p.Name != "run_skill" || len(p.Arguments) != 1 || p.Arguments[0].Name != "name" || !p.Arguments[0].Required {
		t.Fatalf("run_skill prompt = %+v", p)
	}

	got, err := h.session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "run_skill", Arguments: map[string]string{"name": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 || got.Messages[0].Role != "user" {
		t.Fatalf("messages = %+v", got.Messages)
	}
	text := got.Messages[0].Content.(*mcp.TextContent).Text
	importURL := "file://" + h.skillsDir + "/hello.ts"
	for _, w := range []string{"execute_code", `await import("` + importURL + `")`, "Says hello", `console.log("hello from hello")`} {
		if !strings.Contains(text, w) {
			t.Errorf("prompt text does not contain %q:\n%s", w, text)
		}
	}
	// The code the prompt hands the agent really runs the skill in the sandbox.
	if res := h.run(`await import("` + importURL + `");`); res.IsError || allText(res) != "hello from hello\n" {
		t.Fatalf("running the prompt's code: IsError=%v %q", res.IsError, allText(res))
	}

	for _, bad := range []map[string]string{{"name": "nope"}, {"name": "../x"}, {}} {
		if _, err := h.session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "run_skill", Arguments: bad}); err == nil {
			t.Errorf("run_skill %v: no error", bad)
		} else if !strings.Contains(err.Error(), "run_skill") {
			t.Errorf("run_skill %v: unclear error %v", bad, err)
		}
	}

	complete := func(ref *mcp.CompleteReference, value string) []string {
		t.Helper()
		res, err := h.session.Complete(ctx, &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: "name", Value: value}})
		if err != nil {
			t.Fatalf("complete %q: %v", value, err)
		}
		return res.Completion.Values
	}
	promptRef := &mcp.CompleteReference{Type: "ref/prompt", Name: "run_skill"}
	if got := complete(promptRef, "he"); !slices.Equal(got, []string{"hello", "help-me"}) {
		t.Fatalf("complete \"he\" = %q", got)
	}
	if got := complete(promptRef, "HEL"); !slices.Equal(got, []string{"hello", "help-me"}) {
		t.Fatalf("complete \"HEL\" = %q", got)
	}
	if got := complete(promptRef, ""); !slices.Equal(got, []string{"hello", "help-me", "other"}) {
		t.Fatalf("complete \"\" = %q", got)
	}
	if got := complete(promptRef, "zz"); len(got) != 0 {
		t.Fatalf("complete \"zz\" = %q", got)
	}
	if got := complete(&mcp.CompleteReference{Type: "ref/resource", URI: "skill://{name}"}, "o"); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("complete template \"o\" = %q", got)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
