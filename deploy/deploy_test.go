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
		Profiles    []string          `yaml:"profiles"`
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
	if n8n.Build != "./integrations/n8n" {
		t.Errorf("n8n build %v, want ./integrations/n8n (n8n with the packed gmailrelay node)", n8n.Build)
	}
	if got, want := n8n.Environment["GMAILRELAY_URL"], "http://gmailrelay:8080"; got != want {
		t.Errorf("n8n GMAILRELAY_URL = %q, want %q", got, want)
	}
	// No example needs a Node.js builtin in a Code node any more (the raw
	// recipe asks GET /v1/msgid for the Message-ID).
	if v, ok := n8n.Environment["NODE_FUNCTION_ALLOW_BUILTIN"]; ok {
		t.Errorf("n8n NODE_FUNCTION_ALLOW_BUILTIN = %q: nothing needs it", v)
	}
	if got := n8n.DependsOn["gmailrelay"].Condition; got != "service_healthy" {
		t.Errorf("n8n depends_on gmailrelay condition %q, want service_healthy", got)
	}
}

// TestComposePostgresPassword checks that the PostgreSQL password never
// defaults to empty (the postgres image refuses to start with one), that
// the replicas connect with the same default, and that the services behind
// a profile require no variable the default services do not: compose
// interpolates every service before it applies profiles, so a required
// variable there would stop the plain `docker compose up`.
func TestComposePostgresPassword(t *testing.T) {
	text := read(t, "docker-compose.yml")
	var c compose
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	const want = "${POSTGRES_PASSWORD:-gmailrelay-change-me}"
	if got := c.Services["postgres"].Environment["POSTGRES_PASSWORD"]; got != want {
		t.Errorf("postgres POSTGRES_PASSWORD = %q, want %q (a non-empty default)", got, want)
	}
	for _, name := range []string{"gmailrelay-a", "gmailrelay-b"} {
		if got := c.Services[name].Environment["GMAILRELAY_DATABASE"]; !strings.Contains(got, ":"+want+"@postgres:") {
			t.Errorf("%s GMAILRELAY_DATABASE = %q, want the password %s", name, got, want)
		}
	}
	if strings.Contains(text, "${POSTGRES_PASSWORD:-}") || strings.Contains(text, "${POSTGRES_PASSWORD}") {
		t.Error("docker-compose.yml still lets POSTGRES_PASSWORD be empty")
	}
	required := regexp.MustCompile(`\$\{([A-Z_]+):\?`)
	byDefault := map[string]bool{}
	for _, s := range c.Services {
		if len(s.Profiles) == 0 {
			for _, v := range s.Environment {
				for _, m := range required.FindAllStringSubmatch(v, -1) {
					byDefault[m[1]] = true
				}
			}
		}
	}
	for name, s := range c.Services {
		if len(s.Profiles) == 0 {
			continue
		}
		for k, v := range s.Environment {
			for _, m := range required.FindAllStringSubmatch(v, -1) {
				if !byDefault[m[1]] {
					t.Errorf("%s (profile %v) %s requires %s, which the plain `docker compose up` does not set", name, s.Profiles, k, m[1])
				}
			}
		}
	}
}

// TestComposeN8nLoadsThePackedNode checks integrations/n8n/Dockerfile, which
// docker-compose.yml builds for n8n: it packs the node with `npm pack`,
// starts from the n8n version e2e.sh tests the node with, and its
// entrypoint installs the tarball into n8n's nodes folder with the script
// e2e.sh uses before it runs the image's own entrypoint.
func TestComposeN8nLoadsThePackedNode(t *testing.T) {
	const dir = "integrations/n8n"
	stages := parseDockerfile(read(t, dir+"/Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("integrations/n8n/Dockerfile: %d stages, want a pack stage and the n8n stage", len(stages))
	}
	e2e := regexp.MustCompile(`N8N_VERSION="\$\{N8N_VERSION:-([0-9.]+)\}"`).FindStringSubmatch(read(t, dir+"/e2e.sh"))
	if e2e == nil {
		t.Fatal("e2e.sh: no N8N_VERSION default")
	}
	last := stages[len(stages)-1]
	if want := "n8nio/n8n:" + e2e[1]; last.from != want {
		t.Errorf("n8n stage FROM %q, want %q (the version e2e.sh checks)", last.from, want)
	}
	packed := false
	for _, in := range stages[0].instr {
		if in.cmd == "RUN" && strings.Contains(in.args, "npm pack") {
			packed = true
		}
	}
	if !packed {
		t.Error("the first stage does not run npm pack")
	}
	var entry string
	copied := map[string]bool{}
	for _, st := range stages {
		for _, in := range st.instr {
			switch in.cmd {
			case "ENTRYPOINT":
				entry = in.args
			case "COPY":
				f := strings.Fields(in.args)
				if strings.HasPrefix(f[0], "--from=") {
					copied[f[len(f)-1]] = true
					continue
				}
				for _, src := range f[:len(f)-1] {
					if _, err := os.Stat(filepath.Join(root, dir, src)); err != nil {
						t.Errorf("COPY %s: not in the build context: %v", src, err)
					}
				}
			}
		}
	}
	const tgz = "/opt/gmailrelay/n8n-nodes-gmailrelay.tgz"
	if !copied[tgz] {
		t.Errorf("the n8n stage does not copy the packed tarball to %s", tgz)
	}
	if !strings.Contains(entry, "/opt/gmailrelay/start.sh") || !strings.Contains(entry, "tini") {
		t.Errorf("ENTRYPOINT %s, want tini running /opt/gmailrelay/start.sh", entry)
	}
	start := read(t, dir+"/docker/start.sh")
	if !strings.Contains(start, "/opt/gmailrelay/install-packed.sh "+tgz) {
		t.Errorf("docker/start.sh does not install %s with install-packed.sh", tgz)
	}
	if !strings.Contains(start, `exec /docker-entrypoint.sh "$@"`) {
		t.Error("docker/start.sh does not hand over to the n8n image's entrypoint")
	}
	if !strings.Contains(read(t, dir+"/e2e.sh"), `scripts/install-packed.sh" "$tgz"`) {
		t.Error("e2e.sh no longer installs the tarball with scripts/install-packed.sh: the image's install is then untested")
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
