package compose

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/compose-spec/compose-go/v2/interpolation"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/tree"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/gpurun/gpurun/compose/yamledit"
)

// buildModel computes the merged model of every service.
//
// A project of one file with one document and no extends, include or
// !reset/!override tags is decoded here directly (YAML merge keys
// resolved, variables interpolated): compose-go's loader would give the
// same services (TestFastPathMatchesComposeGo checks it over the corpus)
// but spends milliseconds on transformations migrate does not need.
// Every other project goes through compose-go, which merges the -f files
// and overrides and applies extends and include as `docker compose` does.
func (p *project) buildModel(ctx context.Context, composeGoOnly bool) error {
	if !composeGoOnly && p.simple() {
		services, err := p.fastModel()
		if err == nil {
			p.services = services
			return nil
		}
		var pe *yamledit.Error
		if errors.As(err, &pe) {
			return err
		}
		// Anything else the fast path cannot decode, compose-go may.
	}
	return p.composeGoModel(ctx)
}

// simple reports whether the fast path applies.
func (p *project) simple() bool {
	if len(p.files) != 1 || len(p.files[0].f.Docs) > 1 {
		return false
	}
	for _, doc := range p.files[0].f.Docs {
		root := docRoot(doc)
		if k, _ := yamledit.Get(root, "include"); k != nil {
			return false
		}
		if customTag(doc, 0) {
			return false
		}
		_, services := yamledit.Get(root, "services")
		services = yamledit.Resolve(services)
		if services == nil || services.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(services.Content); i += 2 {
			if k, _, _ := yamledit.Lookup(services.Content[i+1], "extends"); k != nil {
				return false
			}
		}
		if len(yamledit.Merged(services)) > 0 {
			return false
		}
	}
	return true
}

// customTag reports whether any node has a local tag such as !reset.
func customTag(n *yaml.Node, depth int) bool {
	if n == nil || depth > 64 {
		return false
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return true
	}
	for _, c := range n.Content {
		if customTag(c, depth+1) {
			return true
		}
	}
	return false
}

// fastModel decodes the project's only file.
func (p *project) fastModel() (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	f := p.files[0].f
	if len(f.Docs) == 0 {
		return out, nil
	}
	var dict map[string]any
	if err := f.Docs[0].Decode(&dict); err != nil {
		return nil, err
	}
	dict, err := interpolation.Interpolate(dict, p.interpOptions())
	if err != nil {
		return nil, p.positioned(err)
	}
	p.dict = dict
	return servicesOf(dict)
}

// composeGoModel loads the project with compose-go's loader: merging,
// extends and include as docker compose does, validation, normalization
// and environment resolution left out (migration must not need the
// user's whole environment).
func (p *project) composeGoModel(ctx context.Context) error {
	details := types.ConfigDetails{
		WorkingDir:  p.spec.workDir,
		Environment: types.Mapping(p.env),
	}
	for _, pf := range p.files {
		if pf.main {
			details.ConfigFiles = append(details.ConfigFiles, types.ConfigFile{Filename: pf.abs, Content: pf.f.Src})
		}
	}
	name := loader.NormalizeProjectName(filepath.Base(p.spec.workDir))
	if name == "" {
		name = "project"
	}
	base := func(o *loader.Options) {
		o.SetProjectName(name, true)
		o.SkipValidation = true
		o.SkipNormalization = true
		o.SkipConsistencyCheck = true
		o.SkipResolveEnvironment = true
		o.SkipResolveLabels = true
		o.SkipDefaultValues = true
		o.ResolvePaths = false
		o.Interpolate.LookupValue = p.lookup
		o.Interpolate.Substitute = p.substitute
	}
	dict, err := loader.LoadModelWithContext(ctx, details, base)
	if err != nil {
		// An unset variable can leave a value compose-go cannot parse
		// (":/models" from "${MODEL_DIR}:/models"). Without interpolation
		// it tolerates such values; interpolate the merged model then.
		raw, rawErr := loader.LoadModelWithContext(ctx, details, base, func(o *loader.Options) { o.SkipInterpolation = true })
		if rawErr != nil {
			return p.positioned(err)
		}
		if dict, rawErr = interpolation.Interpolate(raw, p.interpOptions()); rawErr != nil {
			return p.positioned(err)
		}
	}
	services, err := servicesOf(dict)
	if err != nil {
		return fmt.Errorf("%s: %w", p.display(), err)
	}
	p.services, p.dict = services, dict
	return nil
}

// servicesOf returns the services of a decoded model.
func servicesOf(dict map[string]any) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	services, _ := dict["services"].(map[string]any)
	for name, v := range services {
		switch s := v.(type) {
		case map[string]any:
			out[name] = s
		case nil:
			out[name] = map[string]any{}
		default:
			return nil, fmt.Errorf("service %q is a %T, not a mapping", name, v)
		}
	}
	return out, nil
}

func (p *project) lookup(key string) (string, bool) {
	v, ok := p.env[key]
	return v, ok
}

// interpOptions are compose-go's interpolation with this project's
// environment, recording unset variables and never failing on one.
// Values stay strings: migrate reads sizes and device lists itself.
func (p *project) interpOptions() interpolation.Options {
	return interpolation.Options{
		LookupValue:     p.lookup,
		Substitute:      p.substitute,
		TypeCastMapping: map[tree.Path]interpolation.Cast{},
	}
}

// substitute is compose's variable substitution, except that an unset
// variable (required or not) becomes empty and is recorded instead of
// logged or failing the load: migrate must work without the user's whole
// environment, and ${VAR} in a value migrate reads means "not known".
func (p *project) substitute(s string, mapping template.Mapping) (string, error) {
	return template.SubstituteWithOptions(s, mapping, template.WithoutLogging, template.WithReplacementFunction(p.replace))
}

func (p *project) replace(s string, mapping template.Mapping, cfg *template.Config) (string, error) {
	v, ok, err := template.DefaultReplacementAppliedFunc(s, mapping, cfg)
	var missing *template.MissingRequiredError
	switch {
	case errors.As(err, &missing):
		p.recordUnset(missing.Variable)
		return "", nil
	case err != nil:
		return "", err
	case !ok:
		if m := varName().FindStringSubmatch(s); m != nil {
			p.recordUnset(m[1])
		}
	}
	return v, nil
}

var varName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\$\{?([_a-zA-Z][_a-zA-Z0-9]*)`)
})

func (p *project) recordUnset(name string) {
	if !slices.Contains(p.unset, name) {
		p.unset = append(p.unset, name)
		slices.Sort(p.unset)
	}
}

// interpolateString interpolates one string (an include path).
func (p *project) interpolateString(s string) string {
	out, err := p.substitute(s, p.lookup)
	if err != nil {
		return s
	}
	return out
}
