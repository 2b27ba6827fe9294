package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of every *.yaml here, each decoded strictly
// into its k8s.io/api type: a field the type lacks (a typo, a field in the
// wrong place) fails the test, as it would fail a cluster's validation.
type manifests struct {
	sts      []*appsv1.StatefulSet
	services []*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
}

func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var m manifests
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				m.sts, obj = append(m.sts, s), s
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, p), p
			default:
				t.Fatalf("%s #%d: %s %s: no type to check it against (add it to the test)", f, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, head.Kind, err)
			}
		}
	}
	return m
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// deedRunFlags are the flags `deed run --help` lists, from a deed built
// from this repository.
func deedRunFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "deed")
	if out, err := exec.Command("go", "-C", "../..", "build", "-o", bin, "./cmd/deed").CombinedOutput(); err != nil {
		t.Fatalf("build deed: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("deed run --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("read %d flags from deed run --help: the parser is broken\n%s", len(flags), out)
	}
	return flags
}

// args splits --name=value arguments (the manifests' only form).
func args(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range c.Args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q: write --flag=value", a)
			continue
		}
		out[name] = value
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.sts) != 1 || len(m.services) != 2 || len(m.pdbs) != 1 {
		t.Fatalf("want 1 StatefulSet, 2 Services, 1 PodDisruptionBudget; have %d, %d, %d", len(m.sts), len(m.services), len(m.pdbs))
	}
}

// TestStatefulSetWiring checks what makes the fleet work: the node id is
// the pod's name, the advertised address its name in the headless
// Service, the secrets are files only the deed user reads, readiness is
// /readyz, the grace period covers the drain, every flag is one deed run
// has, and the Services and the budget select the pods.
func TestStatefulSetWiring(t *testing.T) {
	m := load(t)
	if len(m.sts) != 1 {
		t.Fatalf("%d StatefulSets", len(m.sts))
	}
	ss := m.sts[0]
	pod := ss.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %q: want deed run", c.Args)
	}
	a := args(t, c)
	known := deedRunFlags(t)
	for name := range a {
		if !known[name] {
			t.Errorf("--%s is not a flag of deed run", name)
		}
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	field := func(name string) string {
		if e, ok := env[name]; ok && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
		return ""
	}
	if a["node"] != "$(POD_NAME)" || field("POD_NAME") != "metadata.name" {
		t.Errorf("--node=%q with POD_NAME from %q: the node id must be the pod's name", a["node"], field("POD_NAME"))
	}
	var headless *corev1.Service
	for _, s := range m.services {
		if s.Name == ss.Spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q is not a headless Service publishing not-ready pods", ss.Spec.ServiceName)
	}
	port := int32(0)
	for _, p := range c.Ports {
		if p.Name == "api" {
			port = p.ContainerPort
		}
	}
	wantAdv := fmt.Sprintf("http://$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%d", headless.Name, port)
	if a["advertise"] != wantAdv || field("POD_NAMESPACE") != "metadata.namespace" {
		t.Errorf("--advertise=%q, want %q with POD_NAMESPACE from metadata.namespace", a["advertise"], wantAdv)
	}
	if a["listen"] != fmt.Sprintf("0.0.0.0:%d", port) {
		t.Errorf("--listen=%q, want the api port %d on all interfaces", a["listen"], port)
	}
	// Kubernetes expands only variables defined before use, in env.
	for _, v := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(strings.Join(c.Args, " "), -1) {
		if _, ok := env[v[1]]; !ok {
			t.Errorf("args use $(%s), which env does not define", v[1])
		}
	}

	// The token and the fleet secret: files from a Secret, not env.
	for _, flag := range []string{"token-file", "fleet-secret-file"} {
		file := a[flag]
		if file == "" {
			t.Errorf("no --%s", flag)
			continue
		}
		var mount *corev1.VolumeMount
		for i, vm := range c.VolumeMounts {
			if path.Dir(file) == vm.MountPath {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil || !mount.ReadOnly {
			t.Errorf("--%s=%s is not in a read-only volume mount", flag, file)
			continue
		}
		var sec *corev1.SecretVolumeSource
		for _, v := range pod.Volumes {
			if v.Name == mount.Name {
				sec = v.Secret
			}
		}
		if sec == nil {
			t.Errorf("--%s=%s: volume %s is not a Secret", flag, file, mount.Name)
			continue
		}
		if sec.DefaultMode == nil || (*sec.DefaultMode != 0o400 && *sec.DefaultMode != 0o600) {
			mode := "the default (0644)"
			if sec.DefaultMode != nil {
				mode = fmt.Sprintf("%#o", *sec.DefaultMode)
			}
			t.Errorf("--%s: the Secret's files have mode %s, want 0400 or 0600", flag, mode)
		}
		if !slices.ContainsFunc(sec.Items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(file) }) {
			t.Errorf("--%s=%s: Secret %s projects no file %s", flag, file, sec.SecretName, path.Base(file))
		}
	}
	if ps := pod.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.FSGroup == nil || ps.RunAsUser == nil || *ps.FSGroup != *ps.RunAsUser {
		t.Errorf("the pod must run as non-root with fsGroup its user's group, so that only deed reads the secrets: %+v", ps)
	}

	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != "api" {
		t.Errorf("readiness probe %+v, want GET /readyz on the api port", rp)
	}
	if lp := c.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", lp)
	}

	drain := 30 * time.Second // deed run's default
	if v, ok := a["drain-timeout"]; ok {
		if drain, _ = time.ParseDuration(v); drain <= 0 {
			t.Fatalf("--drain-timeout=%q", v)
		}
	}
	grace := time.Duration(0)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < drain+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v does not cover the drain (%v) and the exit after it", grace, drain)
	}

	labels := ss.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if ss.Spec.Selector == nil || !matches(ss.Spec.Selector.MatchLabels) {
		t.Errorf("the StatefulSet's selector does not select its pods")
	}
	for _, s := range m.services {
		if !matches(s.Spec.Selector) {
			t.Errorf("Service %s does not select the pods", s.Name)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "api" {
			t.Errorf("Service %s does not target the api port", s.Name)
		}
	}
	for _, p := range m.pdbs {
		if p.Spec.Selector == nil || !matches(p.Spec.Selector.MatchLabels) {
			t.Errorf("PodDisruptionBudget %s does not select the pods", p.Name)
		}
		if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1 (one node drains at a time)", p.Name)
		}
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas < 2 {
		t.Errorf("replicas %v: a fleet has several nodes", ss.Spec.Replicas)
	}
}

// TestStrictDecodingCatchesTypos shows the strict decoding failing on a
// misplaced field, as a loose one would not.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	raw, err := os.ReadFile("pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(raw, []byte("maxUnavailable: 1"), []byte("maxUnavailabel: 1"), 1)
	if bytes.Equal(bad, raw) {
		t.Fatal("pdb.yaml has no maxUnavailable to misspell")
	}
	if err := yaml.UnmarshalStrict(bad, &policyv1.PodDisruptionBudget{}); err == nil {
		t.Error("a misspelt field decoded without error")
	}
}
