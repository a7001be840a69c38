package server

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./server -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what the server says now; if the change is intended, run\n"+
			"  go test ./server -run %s -update\nand review the diff.\n--- got ---\n%s", path, t.Name(), got)
	}
}

// TestToolsGolden pins the tool contract clients see: names, descriptions,
// input and output schemas, annotations.
func TestToolsGolden(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	res, err := h.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "cancel_run,delete_skill,execute_code,get_instructions,list_apis,list_runs,run_output,run_status,run_wait,update_skill" {
		t.Fatalf("tools = %v", names)
	}
	var got bytes.Buffer
	enc := json.NewEncoder(&got)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res.Tools); err != nil {
		t.Fatal(err)
	}
	golden(t, "tools.golden.json", got.Bytes())
}

// TestInstructionsGolden pins the primer (with the test's directories
// replaced by placeholders) and checks that initialize and
// get_instructions give the same text.
func TestInstructionsGolden(t *testing.T) {
	t.Parallel()
	h := newGatedHarness(t, harnessConfig{})
	init := h.session.InitializeResult()
	if init.Instructions == "" || init.Instructions != h.srv.Instructions() {
		t.Fatalf("initialize instructions differ from the server's primer")
	}
	res := h.call("get_instructions", map[string]any{})
	if res.IsError || allText(res) != init.Instructions {
		t.Fatalf("get_instructions differs from initialize's instructions:\n%s", allText(res))
	}
	text := strings.ReplaceAll(init.Instructions, h.skillsDir, "<SKILLS_DIR>")
	golden(t, "instructions.golden.txt", []byte(text))

	caps := init.Capabilities
	if caps.Tools == nil || caps.Resources == nil || !caps.Resources.ListChanged || caps.Prompts == nil ||
		caps.Logging == nil || caps.Completions == nil {
		t.Fatalf("capabilities = %+v", caps)
	}
}

// TestInstructionsFollowSettings: the primer states the network model in
// force.
func TestInstructionsFollowSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	if !strings.Contains(h.srv.Instructions(), "no network at all") || strings.Contains(h.srv.Instructions(), "Bearer STRIPE_AUTH_TOKEN") {
		t.Errorf("instructions without a gate:\n%s", h.srv.Instructions())
	}
	y := newGatedHarness(t, harnessConfig{edit: func(o *Options) { o.Settings.YOLO = true }})
	for _, w := range []string{"YOLO mode is on", "Bearer STRIPE_AUTH_TOKEN", y.skillsDir + "/<name>.ts", "network (each request the run made"} {
		if !strings.Contains(y.srv.Instructions(), w) {
			t.Errorf("YOLO instructions lack %q:\n%s", w, y.srv.Instructions())
		}
	}
	// Behind a transparent proxy (docker backend, SANDBOX_PROXY_URL=none)
	// runs have no network log of their own: the primer must not promise one.
	tp := newHarness(t, harnessConfig{edit: func(o *Options) { o.Gate = &controlGate{transparent: true} }})
	if text := tp.srv.Instructions(); !strings.Contains(text, "network stays empty") || strings.Contains(text, "each request the run made") {
		t.Errorf("transparent-proxy instructions promise a per-run network log:\n%s", text)
	}
}

func TestListAPIs(t *testing.T) {
	t.Parallel()
	dir := writeAPIs(t, map[string]string{
		"shop": `{"description": "Shop API", "domains": ["api.shop.test", "files.shop.test"],
			"credentials": {"SHOP_TOKEN": "${SHOP_SECRET}"}, "reference": "https://docs.shop.test/",
			"restricted_methods": ["DELETE"]}`,
		"off":  `{"description": "Inactive", "domains": ["off.test"], "active": false}`,
		"bare": `{"domains": ["bare.test"]}`,
	})
	writeFile(t, filepath.Join(dir, "shop", "types.d.ts"), "export interface Order { id: string }\n")
	secret := "sk_live_very_secret_value"
	h := newHarness(t, harnessConfig{apisDir: dir, getenv: func(k string) (string, bool) {
		if k == "SHOP_SECRET" {
			return secret, true
		}
		return "", false
	}})
	res := h.call("list_apis", map[string]any{})
	text := allText(res)
	if res.IsError || strings.Contains(text, secret) {
		t.Fatalf("list_apis: IsError=%v, or it shows the secret: %s", res.IsError, text)
	}
	var out listAPIsOutput
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("list_apis text is not JSON: %v\n%s", err, text)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(sc), secret) {
		t.Fatal("structuredContent shows the secret")
	}
	if len(out.APIs) != 2 || out.APIs[0].Name != "bare" || out.APIs[1].Name != "shop" {
		t.Fatalf("apis = %+v (want the active ones, sorted)", out.APIs)
	}
	shop := out.APIs[1]
	typesPath := filepath.Join(dir, "shop", "types.d.ts")
	if shop.Description != "Shop API" || strings.Join(shop.Domains, ",") != "api.shop.test,files.shop.test" ||
		strings.Join(shop.Credentials, ",") != "SHOP_TOKEN" || shop.Reference != "https://docs.shop.test/" ||
		strings.Join(shop.RestrictedMethods, ",") != "DELETE" || !shop.HasTypes || shop.TypesPath != typesPath ||
		strings.Join(shop.SubstituteIn, ",") != "headers" || len(shop.Ports) != 1 || shop.Ports[0] != 443 || shop.AllowedMethods != nil {
		t.Fatalf("shop = %+v", shop)
	}
	bare := out.APIs[0]
	if bare.HasTypes || bare.TypesPath != "" || bare.Credentials == nil || len(bare.Credentials) != 0 || bare.RestrictedMethods == nil {
		t.Fatalf("bare = %+v", bare)
	}
	// The types are readable from a run that names the API, at that path.
	run := h.run(`console.log(await Deno.readTextFile(`+jsonString(typesPath)+`))`, "apis", []string{"shop"})
	if run.IsError || !strings.Contains(allText(run), "interface Order") {
		t.Fatalf("reading types in a run: %q", allText(run))
	}
	if res := h.call("list_apis", map[string]any{"filter": "x"}); !res.IsError || !strings.Contains(allText(res), "takes no arguments") {
		t.Fatalf("list_apis with an argument: %q", allText(res))
	}
}

// writeAPIs writes apis/<name>/config.json files into a new directory.
func writeAPIs(t testing.TB, configs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, cfg := range configs {
		writeFile(t, filepath.Join(dir, name, "config.json"), cfg)
	}
	return dir
}

var _ = mcp.Tool{}
