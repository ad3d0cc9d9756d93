// tools/helmrender - renders a Helm chart the way `helm template` does, for
// the tests of charts/ on machines where no Helm binary can be installed.
//
// Owns: loading a chart (Chart.yaml, values.yaml, templates/, crds/),
// coalescing values (the chart's, then each --values file, then --set and
// --set-string in order), validating them against values.schema.json
// (JSON Schema, as Helm 3 does with gojsonschema), and executing the
// templates with Go's text/template, sprig's functions and Helm's own
// (include, tpl, required, toYaml, fromYaml, toJson, fromJson, lookup),
// with .Values, .Release, .Chart, .Capabilities, .Template and .Files.
// Must not: talk to a cluster (lookup returns an empty map, as in `helm
// template`), or be taken for Helm: `helm template` and `helm install` are
// the real path; this exists so the tests can render without them.
//
// Usage:
//
//	helmrender [--release NAME] [--namespace NS] [--values FILE]...
//	           [--set K=V]... [--set-string K=V]... [--kube-version v1.26.0]
//	           [--api-versions GROUP/VERSION]... [--include-crds] [--notes] CHART
//
// Prints the manifests, each after "---" and "# Source: NAME"; with --notes,
// NOTES.txt's rendering after them. Errors go to stderr worded as Helm's,
// with exit 1.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/xeipuuv/gojsonschema"
	"gopkg.in/yaml.v3"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	release, namespace, kubeVersion string
	values, sets, setStrings, apis  multi
	crds, notes                     bool
	chart                           string
}

func parseArgs(args []string) (options, error) {
	o := options{release: "release-name", namespace: "default", kubeVersion: "v1.26.0"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag needs an argument: %s", a)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch a {
		case "--release", "--namespace", "--values", "-f", "--set", "--set-string",
			"--kube-version", "--api-versions":
			if v, err = next(); err != nil {
				return o, err
			}
		}
		switch a {
		case "--release":
			o.release = v
		case "--namespace":
			o.namespace = v
		case "--values", "-f":
			o.values = append(o.values, v)
		case "--set":
			o.sets = append(o.sets, v)
		case "--set-string":
			o.setStrings = append(o.setStrings, v)
		case "--kube-version":
			o.kubeVersion = v
		case "--api-versions":
			o.apis = append(o.apis, v)
		case "--include-crds":
			o.crds = true
		case "--notes":
			o.notes = true
		default:
			if strings.HasPrefix(a, "-") || o.chart != "" {
				return o, fmt.Errorf("unknown argument %q", a)
			}
			o.chart = a
		}
	}
	if o.chart == "" {
		return o, errors.New("a chart directory is required")
	}
	return o, nil
}

// ------------------------------------------------------------------ values

// toJSONable turns yaml.v3's decoded values into what encoding/json and
// the schema validator take (maps with string keys all the way down).
func toJSONable(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = toJSONable(x)
		}
		return t
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = toJSONable(x)
		}
		return m
	case []interface{}:
		for i, x := range t {
			t[i] = toJSONable(x)
		}
		return t
	}
	return v
}

func readYAMLMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %v", file, err)
	}
	return toJSONable(m).(map[string]interface{}), nil
}

// coalesce merges src over dst: maps merge key by key, anything else
// replaces; a null in src deletes the key (as Helm does).
func coalesce(dst, src map[string]interface{}) {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		sm, sIsMap := sv.(map[string]interface{})
		dm, dIsMap := dst[k].(map[string]interface{})
		if sIsMap && dIsMap {
			coalesce(dm, sm)
			continue
		}
		dst[k] = sv
	}
}

// splitUnescaped splits s on sep where sep is not preceded by a backslash
// and not inside {...}.
func splitUnescaped(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case s[i] == '{':
			depth++
		case s[i] == '}':
			depth--
		case s[i] == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// typed is Helm's --set typing: integers, true/false, null; else a string.
func typed(s string, asString bool) interface{} {
	if asString {
		return s
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && (s == "0" || !strings.HasPrefix(s, "0")) {
		return n
	}
	return s
}

// setValue applies one "a.b[1].c=v" (v may be "{x,y}", a list).
func setValue(vals map[string]interface{}, expr string, asString bool) error {
	for _, item := range splitUnescaped(expr, ',') {
		eq := strings.IndexByte(item, '=')
		if eq <= 0 {
			return fmt.Errorf("failed parsing --set data: key %q has no value", item)
		}
		key, raw := item[:eq], item[eq+1:]
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, x := range splitUnescaped(inner, ',') {
					list = append(list, typed(unescape(x), asString))
				}
			}
			val = list
		} else {
			val = typed(unescape(raw), asString)
		}
		parts := splitUnescaped(key, '.')
		cur := vals
		for i, p := range parts {
			p = unescape(p)
			idx := -1
			if b := strings.IndexByte(p, '['); b > 0 && strings.HasSuffix(p, "]") {
				n, err := strconv.Atoi(p[b+1 : len(p)-1])
				if err != nil || n < 0 {
					return fmt.Errorf("failed parsing --set data: bad index in %q", key)
				}
				p, idx = p[:b], n
			}
			last := i == len(parts)-1
			if idx >= 0 {
				list, _ := cur[p].([]interface{})
				for len(list) <= idx {
					list = append(list, nil)
				}
				if last {
					list[idx] = val
					cur[p] = list
					break
				}
				m, ok := list[idx].(map[string]interface{})
				if !ok {
					m = map[string]interface{}{}
					list[idx] = m
				}
				cur[p] = list
				cur = m
				continue
			}
			if last {
				if val == nil {
					delete(cur, p)
				} else {
					cur[p] = val
				}
				break
			}
			m, ok := cur[p].(map[string]interface{})
			if !ok {
				m = map[string]interface{}{}
				cur[p] = m
			}
			cur = m
		}
	}
	return nil
}

// validate checks values against the chart's values.schema.json, with
// Helm 3's wording: one line per violation, the field first.
func validate(chartDir, chartName string, vals map[string]interface{}) error {
	schema, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	doc, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema),
		gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("%s: values.schema.json: %v", chartName, err)
	}
	if res.Valid() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n", chartName)
	for _, e := range res.Errors() {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	return errors.New(strings.TrimSuffix(b.String(), "\n"))
}

// ---------------------------------------------------------------- rendering

func toYAML(v interface{}) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	_ = enc.Close()
	return strings.TrimSuffix(b.String(), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return toJSONable(m).(map[string]interface{})
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

type files map[string][]byte

func (f files) Get(name string) string { return string(f[name]) }

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

// builtin API versions a 1.26 server serves (what `helm template` assumes
// without a cluster), plus any --api-versions.
var builtinAPIs = []string{"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
	"coordination.k8s.io/v1", "networking.k8s.io/v1", "apiextensions.k8s.io/v1",
	"autoscaling/v2", "events.k8s.io/v1", "storage.k8s.io/v1", "scheduling.k8s.io/v1"}

func render(o options) (string, string, error) {
	chartMeta := map[string]interface{}{}
	cm, err := readYAMLMap(filepath.Join(o.chart, "Chart.yaml"))
	if err != nil {
		return "", "", fmt.Errorf("Chart.yaml: %v", err)
	}
	for k, v := range cm { // .Chart.Name, .Chart.AppVersion, ... (Helm's field names)
		chartMeta[strings.ToUpper(k[:1])+k[1:]] = v
	}
	name, _ := chartMeta["Name"].(string)
	if name == "" {
		return "", "", errors.New("Chart.yaml: name is required")
	}
	if _, ok := chartMeta["Version"].(string); !ok {
		return "", "", errors.New("Chart.yaml: version is required (a string)")
	}
	vals := map[string]interface{}{}
	if _, err := os.Stat(filepath.Join(o.chart, "values.yaml")); err == nil {
		if vals, err = readYAMLMap(filepath.Join(o.chart, "values.yaml")); err != nil {
			return "", "", err
		}
	}
	for _, f := range o.values {
		m, err := readYAMLMap(f)
		if err != nil {
			return "", "", err
		}
		coalesce(vals, m)
	}
	for _, s := range o.sets {
		if err := setValue(vals, s, false); err != nil {
			return "", "", err
		}
	}
	for _, s := range o.setStrings {
		if err := setValue(vals, s, true); err != nil {
			return "", "", err
		}
	}
	if err := validate(o.chart, name, vals); err != nil {
		return "", "", err
	}

	kv := strings.TrimPrefix(o.kubeVersion, "v")
	parts := strings.SplitN(kv, ".", 3)
	if len(parts) < 2 {
		return "", "", fmt.Errorf("--kube-version %q is not vMAJOR.MINOR[.PATCH]", o.kubeVersion)
	}
	caps := map[string]interface{}{
		"KubeVersion": map[string]interface{}{"Version": "v" + kv, "GitVersion": "v" + kv,
			"Major": parts[0], "Minor": parts[1]},
		"APIVersions": append(apiVersions(append([]string{}, builtinAPIs...)), o.apis...),
	}
	fs := files{}
	var tplNames []string
	root := template.New("gotpl")
	err = filepath.Walk(o.chart, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(o.chart, p)
		if info.IsDir() || rel == "Chart.yaml" || rel == "values.yaml" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			tname := path.Join(name, filepath.ToSlash(rel))
			tplNames = append(tplNames, tname)
			return nil
		}
		fs[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		return "", "", err
	}
	sort.Strings(tplNames)

	top := map[string]interface{}{
		"Values": vals,
		"Release": map[string]interface{}{"Name": o.release, "Namespace": o.namespace,
			"Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart":        chartMeta,
		"Capabilities": caps,
		"Files":        fs,
	}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm removes these two
	delete(funcs, "expandenv")
	includedNames := map[string]int{}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	funcs["include"] = func(string, interface{}) (string, error) { return "", nil }
	funcs["tpl"] = func(string, interface{}) (string, error) { return "", nil }
	root.Funcs(funcs)
	root.Funcs(template.FuncMap{
		"include": func(n string, data interface{}) (string, error) {
			if includedNames[n] > 100 {
				return "", fmt.Errorf("rendering template has a nested reference name: %s", n)
			}
			includedNames[n]++
			defer func() { includedNames[n]-- }()
			var b strings.Builder
			if err := root.ExecuteTemplate(&b, n, data); err != nil {
				return "", err
			}
			return b.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			t, err := root.Clone()
			if err != nil {
				return "", err
			}
			t, err = t.New("tpl").Parse(text)
			if err != nil {
				return "", fmt.Errorf("cannot parse template %q: %v", text, err)
			}
			var b strings.Builder
			if err := t.Execute(&b, data); err != nil {
				return "", fmt.Errorf("error calling tpl: %v", err)
			}
			return b.String(), nil
		},
	})
	root.Option("missingkey=zero")
	for _, t := range tplNames {
		data, err := os.ReadFile(filepath.Join(o.chart, strings.TrimPrefix(t, name+"/")))
		if err != nil {
			return "", "", err
		}
		if _, err := root.New(t).Parse(string(data)); err != nil {
			return "", "", fmt.Errorf("parse error at (%s): %v", t, err)
		}
	}

	var out, notes strings.Builder
	var docs []manifest
	if o.crds {
		var crdNames []string
		for f := range fs {
			if strings.HasPrefix(f, "crds/") && (strings.HasSuffix(f, ".yaml") || strings.HasSuffix(f, ".yml") || strings.HasSuffix(f, ".json")) {
				crdNames = append(crdNames, f)
			}
		}
		sort.Strings(crdNames)
		for _, f := range crdNames {
			fmt.Fprintf(&out, "---\n# Source: %s/%s\n%s\n", name, f, strings.TrimSpace(string(fs[f])))
		}
	}
	for _, t := range tplNames {
		base := path.Base(t)
		if strings.HasPrefix(base, "_") {
			continue
		}
		isNotes := base == "NOTES.txt"
		if isNotes && !o.notes {
			continue
		}
		if !isNotes && !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") {
			continue
		}
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]interface{}{"Name": t, "BasePath": name + "/templates"}
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, t, data); err != nil {
			return "", "", fmt.Errorf("template: %v", err)
		}
		text := strings.ReplaceAll(b.String(), "<no value>", "")
		if isNotes {
			notes.WriteString(text)
			continue
		}
		for _, doc := range strings.Split(text, "\n---") {
			doc = strings.TrimSpace(strings.TrimPrefix(doc, "---"))
			if doc == "" || allComments(doc) {
				continue
			}
			var head struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return "", "", fmt.Errorf("YAML parse error on %s: %v", t, err)
			}
			docs = append(docs, manifest{t, head.Kind, doc})
		}
	}
	// Helm's install order: by kind, then as rendered (templates by name)
	sort.SliceStable(docs, func(i, j int) bool { return kindRank(docs[i].kind) < kindRank(docs[j].kind) })
	for _, d := range docs {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", d.source, d.doc)
	}
	return out.String(), notes.String(), nil
}

type manifest struct{ source, kind, doc string }

// Helm's InstallOrder (pkg/releaseutil/kind_sorter.go); other kinds last.
var installOrder = []string{"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota",
	"LimitRange", "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret",
	"SecretList", "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService"}

func kindRank(kind string) int {
	for i, k := range installOrder {
		if k == kind {
			return i
		}
	}
	return len(installOrder)
}

func allComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func main() {
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	manifests, notes, err := render(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(manifests)
	if o.notes && notes != "" {
		fmt.Printf("NOTES:\n%s", notes)
	}
}
