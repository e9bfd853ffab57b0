package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gmailrelay/gmailrelay/policy"
)

// root is the repository root, where the deployment files live.
const root = ".."

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// instruction is one Dockerfile instruction: its keyword, upper-cased, and
// its arguments with line continuations joined.
type instruction struct {
	cmd  string
	args string
}

// stage is one FROM ... stage of a Dockerfile.
type stage struct {
	from  string
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions. It
// knows what the checks need: comments, backslash continuations, keywords.
func parseDockerfile(text string) []stage {
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, stage{from: in.args})
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
		}
	}
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

// goBuild is a `go build` command line: its environment assignments, its
// flags (with -o's value dropped: where the binary goes differs) and its
// package.
type goBuild struct {
	env   []string
	flags []string
	pkg   string
}

var buildLine = regexp.MustCompile(`((?:[A-Z_]+=\S+\s+)*)go build\s+(.*?)\s*(\./cmd/gmailrelay)\b`)

// findGoBuild returns every `go build ... ./cmd/gmailrelay` in text.
func findGoBuild(text string) []goBuild {
	var out []goBuild
	for _, m := range buildLine.FindAllStringSubmatch(text, -1) {
		b := goBuild{env: strings.Fields(m[1]), pkg: m[3]}
		fields := strings.Fields(m[2])
		for i := 0; i < len(fields); i++ {
			if fields[i] == "-o" {
				i = endOfWord(fields, i+1) // the output path
				continue
			}
			b.flags = append(b.flags, fields[i])
		}
		slices.Sort(b.env)
		out = append(out, b)
	}
	return out
}

// endOfWord returns the index of the last field of the shell word that
// starts at fields[i]: one field, or several when a double quote opened in
// it closes in a later one ("$(mktemp -d)/gmailrelay").
func endOfWord(fields []string, i int) int {
	if i >= len(fields) || strings.Count(fields[i], `"`)%2 == 0 {
		return i
	}
	for j := i + 1; j < len(fields); j++ {
		if strings.Count(fields[j], `"`)%2 == 1 {
			return j
		}
	}
	return len(fields) - 1
}

func TestFindGoBuild(t *testing.T) {
	got := findGoBuild(`  CGO_ENABLED=0 go build -trimpath -o "$(mktemp -d)/gmailrelay" ./cmd/gmailrelay`)
	if len(got) != 1 {
		t.Fatalf("found %d go build lines, want 1", len(got))
	}
	if !slices.Equal(got[0].env, []string{"CGO_ENABLED=0"}) || !slices.Equal(got[0].flags, []string{"-trimpath"}) ||
		got[0].pkg != "./cmd/gmailrelay" {
		t.Errorf("parsed %+v", got[0])
	}
	if n := len(findGoBuild("go test -race ./...\ngo vet ./...")); n != 0 {
		t.Errorf("found %d go build lines in a script without one", n)
	}
}

func TestDockerfileBuildsWhatCIBuilds(t *testing.T) {
	stages := parseDockerfile(read(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a run stage", len(stages))
	}
	var docker []goBuild
	for _, s := range stages[:len(stages)-1] {
		for _, in := range s.instr {
			if in.cmd == "RUN" {
				docker = append(docker, findGoBuild(in.args)...)
			}
		}
	}
	if len(docker) != 1 {
		t.Fatalf("Dockerfile build stages run %d `go build ./cmd/gmailrelay`, want exactly 1", len(docker))
	}
	ci := findGoBuild(read(t, ".ci/run"))
	if len(ci) == 0 {
		t.Fatal(".ci/run builds no ./cmd/gmailrelay: add the line\n" +
			`  CGO_ENABLED=0 go build -trimpath -o "$(mktemp -d)/gmailrelay" ./cmd/gmailrelay` +
			"\nso that CI builds the binary the image ships")
	}
	for _, c := range ci {
		if !slices.Equal(c.env, docker[0].env) || !slices.Equal(c.flags, docker[0].flags) || c.pkg != docker[0].pkg {
			t.Errorf("Dockerfile builds with env %v flags %v %s; .ci/run with env %v flags %v %s",
				docker[0].env, docker[0].flags, docker[0].pkg, c.env, c.flags, c.pkg)
		}
	}
}

// TestReleaseScriptBuildsWhatTheImageShips holds scripts/release.sh to the
// Dockerfile's static build (CGO_ENABLED=0, -trimpath) for every platform
// the release promises, and to .ci/run's checking of its SHA256SUMS.
func TestReleaseScriptBuildsWhatTheImageShips(t *testing.T) {
	script := read(t, "scripts/release.sh")
	builds := findGoBuild(script)
	if len(builds) != 1 {
		t.Fatalf("scripts/release.sh runs %d `go build ./cmd/gmailrelay`, want 1 (in its loop over the platforms)", len(builds))
	}
	if b := builds[0]; !slices.Contains(b.env, "CGO_ENABLED=0") || !slices.Contains(b.flags, "-trimpath") {
		t.Errorf("scripts/release.sh builds with env %v flags %v, want CGO_ENABLED=0 and -trimpath", b.env, b.flags)
	}
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"} {
		if !strings.Contains(script, p) {
			t.Errorf("scripts/release.sh does not build %s", p)
		}
	}
	ci := read(t, ".ci/run")
	if !strings.Contains(ci, "scripts/release.sh") || !strings.Contains(ci, "sha256sum -c") {
		t.Error(".ci/run does not run scripts/release.sh and check its SHA256SUMS with sha256sum -c")
	}
}

func TestDockerfileRunStage(t *testing.T) {
	stages := parseDockerfile(read(t, "Dockerfile"))
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	final := stages[len(stages)-1]
	last := map[string]string{}
	var env, volumes []string
	for _, in := range final.instr {
		last[in.cmd] = in.args
		switch in.cmd {
		case "ENV":
			env = append(env, strings.Fields(in.args)...)
		case "VOLUME":
			volumes = append(volumes, in.args)
		}
	}
	if !strings.HasPrefix(stages[0].from, "golang:1.26") {
		t.Errorf("build stage FROM %q, want golang:1.26 (go.mod's Go)", stages[0].from)
	}
	user, ok := last["USER"]
	if !ok {
		t.Error("run stage has no USER: it would run as root")
	}
	if name, _, _ := strings.Cut(user, ":"); name == "root" || name == "0" {
		t.Errorf("run stage USER %q is root", user)
	}
	hc := last["HEALTHCHECK"]
	if !strings.Contains(hc, "/healthz") || strings.HasPrefix(strings.ToUpper(hc), "NONE") {
		t.Errorf("run stage HEALTHCHECK %q does not ask /healthz", hc)
	}
	if strings.Contains(final.from, "distroless") && (strings.Contains(hc, "curl") || strings.Contains(hc, "wget")) {
		t.Errorf("HEALTHCHECK %q needs a tool distroless does not have", hc)
	}
	if !slices.ContainsFunc(volumes, func(v string) bool { return strings.Contains(v, `"/data"`) || v == "/data" }) {
		t.Errorf("run stage VOLUME %v, want /data", volumes)
	}
	for _, want := range []string{"GMAILRELAY_DATA=/data/gmailrelay.db", "GMAILRELAY_ADDR=0.0.0.0:8080"} {
		if !slices.Contains(env, want) {
			t.Errorf("run stage ENV lacks %s (has %v)", want, env)
		}
	}
	if !strings.Contains(last["EXPOSE"], "8080") {
		t.Errorf("run stage EXPOSE %q, want 8080", last["EXPOSE"])
	}
	if !strings.Contains(last["ENTRYPOINT"], "gmailrelay") {
		t.Errorf("run stage ENTRYPOINT %q does not run gmailrelay", last["ENTRYPOINT"])
	}
}

// compose is the part of a Compose file the checks read.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestComposeFile(t *testing.T) {
	var c compose
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.yml")), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	relay, ok := c.Services["gmailrelay"]
	if !ok {
		t.Fatal("no gmailrelay service")
	}
	n8n, ok := c.Services["n8n"]
	if !ok {
		t.Fatal("no n8n service")
	}
	if relay.Build == nil {
		t.Error("gmailrelay service does not build the Dockerfile")
	}
	if relay.Environment["GMAILRELAY_API_TOKEN"] == "" {
		t.Error("gmailrelay listens on 0.0.0.0 in the image: it needs GMAILRELAY_API_TOKEN or it refuses to start")
	}
	if !slices.ContainsFunc(relay.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
		t.Errorf("gmailrelay volumes %v: the acceptance log needs a volume on /data", relay.Volumes)
	}
	if !strings.HasPrefix(n8n.Image, "n8nio/n8n") {
		t.Errorf("n8n image %q, want n8nio/n8n", n8n.Image)
	}
	for k, want := range map[string]string{
		"NODE_FUNCTION_ALLOW_BUILTIN": "crypto",
		"GMAILRELAY_URL":              "http://gmailrelay:8080",
	} {
		if got := n8n.Environment[k]; got != want {
			t.Errorf("n8n %s = %q, want %q", k, got, want)
		}
	}
	if got := n8n.DependsOn["gmailrelay"].Condition; got != "service_healthy" {
		t.Errorf("n8n depends_on gmailrelay condition %q, want service_healthy", got)
	}
}

// TestExamplePolicyLoads checks the policy file docker-compose.yml offers to
// mount: serve would refuse to start on a bad one.
func TestExamplePolicyLoads(t *testing.T) {
	if !strings.Contains(read(t, "docker-compose.yml"), "./examples/policy.yaml:") {
		t.Error("docker-compose.yml no longer mentions examples/policy.yaml; update this test")
	}
	p, err := policy.Load(filepath.Join(root, "examples", "policy.yaml"))
	if err != nil {
		t.Fatalf("examples/policy.yaml: %v", err)
	}
	if _, err := p.Channel("default"); err != nil {
		t.Errorf("examples/policy.yaml has no default channel: %v", err)
	}
}
