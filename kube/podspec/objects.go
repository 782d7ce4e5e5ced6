package podspec

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Objects are DRA objects read from files (gpurun plan --pod's -f), by
// kind, namespace and name: Claims over what the user gave. An object
// without a namespace is found from any namespace (kubectl apply puts it
// in the one it is applied to, usually the pod's); one with a namespace
// only from that one.
type Objects struct {
	// Where names what was read, in the reason of an object not found:
	// "in the files given".
	Where string

	claims    map[nsName]*resourcev1.ResourceClaim
	templates map[nsName]*resourcev1.ResourceClaimTemplate
	classes   map[string]*resourcev1.DeviceClass
}

// nsName is an object's namespace and name.
type nsName struct{ namespace, name string }

// Len is the number of objects held.
func (o *Objects) Len() int {
	if o == nil {
		return 0
	}
	return len(o.claims) + len(o.templates) + len(o.classes)
}

// AddClaim adds a ResourceClaim, replacing one of the same name.
func (o *Objects) AddClaim(c *resourcev1.ResourceClaim) {
	if o.claims == nil {
		o.claims = map[nsName]*resourcev1.ResourceClaim{}
	}
	o.claims[nsName{c.Namespace, c.Name}] = c
}

// AddTemplate adds a ResourceClaimTemplate, replacing one of the same
// name.
func (o *Objects) AddTemplate(t *resourcev1.ResourceClaimTemplate) {
	if o.templates == nil {
		o.templates = map[nsName]*resourcev1.ResourceClaimTemplate{}
	}
	o.templates[nsName{t.Namespace, t.Name}] = t
}

// AddClass adds a DeviceClass, replacing one of the same name.
func (o *Objects) AddClass(c *resourcev1.DeviceClass) {
	if o.classes == nil {
		o.classes = map[string]*resourcev1.DeviceClass{}
	}
	o.classes[c.Name] = c
}

// ResourceClaim implements Claims.
func (o *Objects) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, error) {
	if c, ok := lookup(o.claims, namespace, name); ok {
		return c, nil
	}
	return nil, o.notFound("ResourceClaim", namespace, name)
}

// ResourceClaimTemplate implements Claims.
func (o *Objects) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	if t, ok := lookup(o.templates, namespace, name); ok {
		return t, nil
	}
	return nil, o.notFound("ResourceClaimTemplate", namespace, name)
}

// DeviceClass implements Claims.
func (o *Objects) DeviceClass(name string) (*resourcev1.DeviceClass, error) {
	if c, ok := o.classes[name]; ok {
		return c, nil
	}
	return nil, o.notFound("DeviceClass", "", name)
}

// lookup finds namespace/name, else an object of the name without a
// namespace.
func lookup[T any](m map[nsName]*T, namespace, name string) (*T, bool) {
	if v, ok := m[nsName{namespace, name}]; ok {
		return v, true
	}
	v, ok := m[nsName{"", name}]
	return v, ok
}

func (o *Objects) notFound(kind, namespace, name string) error {
	where := o.Where
	if where == "" {
		where = "among the objects given"
	}
	if namespace != "" {
		name = namespace + "/" + name
	}
	return fmt.Errorf("%s %s not found %s", kind, name, where)
}

// FirstOf resolves through each of cs in turn: the first that has an
// object gives it; where none has, the last one's reason is the answer.
func FirstOf(cs ...Claims) Claims { return firstOf(cs) }

type firstOf []Claims

func (f firstOf) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, error) {
	return first(f, func(c Claims) (*resourcev1.ResourceClaim, error) { return c.ResourceClaim(namespace, name) })
}

func (f firstOf) ResourceClaimTemplate(namespace, name string) (*resourcev1.ResourceClaimTemplate, error) {
	return first(f, func(c Claims) (*resourcev1.ResourceClaimTemplate, error) {
		return c.ResourceClaimTemplate(namespace, name)
	})
}

func (f firstOf) DeviceClass(name string) (*resourcev1.DeviceClass, error) {
	return first(f, func(c Claims) (*resourcev1.DeviceClass, error) { return c.DeviceClass(name) })
}

func first[T any](cs []Claims, get func(Claims) (*T, error)) (*T, error) {
	err := ErrNoClaimObjects
	for _, c := range cs {
		if c == nil {
			continue
		}
		var v *T
		if v, err = get(c); err == nil {
			return v, nil
		}
	}
	return nil, err
}

// decode reads a document of a DRA kind into the objects: a
// ResourceClaim, ResourceClaimTemplate or DeviceClass of resource.k8s.io
// v1 or v1beta2 (whose shapes are v1's: unknown fields are errors), or
// v1beta1 (translated, its unknown fields not checked); ok is false for a
// document of another kind.
func (o *Objects) decode(where string, h head, doc []byte) (ok bool, err error) {
	group, version, _ := strings.Cut(h.APIVersion, "/")
	switch {
	case group != resourcev1.GroupName:
		return false, nil
	case h.Kind != "ResourceClaim" && h.Kind != "ResourceClaimTemplate" && h.Kind != "DeviceClass":
		return false, nil
	case version != "v1" && version != "v1beta2" && version != "v1beta1":
		return true, fmt.Errorf("%s: %s %s: apiVersion %s: want resource.k8s.io/v1, v1beta2 or v1beta1", where, h.Kind, h.Metadata.Name, h.APIVersion)
	}
	strict := func(into any) error {
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return fmt.Errorf("%s: %s: %w", where, h.Kind, err)
		}
		return nil
	}
	switch {
	case h.Kind == "DeviceClass":
		// The same fields in every version.
		var c resourcev1.DeviceClass
		if err := strict(&c); err != nil {
			return true, err
		}
		o.AddClass(&c)
	case version == "v1beta1":
		// Read leniently, only what gpurun reads: k8s.io/api's v1beta1
		// types would add 0.7 MB to gpurun-full for a version the API
		// server no longer needs.
		var b v1beta1Object
		if err := yaml.Unmarshal(doc, &b); err != nil {
			return true, fmt.Errorf("%s: %s: %w", where, h.Kind, err)
		}
		if h.Kind == "ResourceClaim" {
			o.AddClaim(&resourcev1.ResourceClaim{ObjectMeta: b.Metadata, Spec: resourcev1.ResourceClaimSpec{Devices: b.Spec.Devices.v1()}})
		} else {
			o.AddTemplate(&resourcev1.ResourceClaimTemplate{ObjectMeta: b.Metadata, Spec: resourcev1.ResourceClaimTemplateSpec{
				ObjectMeta: b.Spec.Metadata, Spec: resourcev1.ResourceClaimSpec{Devices: b.Spec.Spec.Devices.v1()}}})
		}
	case h.Kind == "ResourceClaim":
		var c resourcev1.ResourceClaim
		if err := strict(&c); err != nil {
			return true, err
		}
		o.AddClaim(&c)
	default:
		var t resourcev1.ResourceClaimTemplate
		if err := strict(&t); err != nil {
			return true, err
		}
		o.AddTemplate(&t)
	}
	return true, nil
}

// v1beta1Object is what gpurun reads of a resource.k8s.io/v1beta1
// ResourceClaim (spec.devices) or ResourceClaimTemplate
// (spec.spec.devices): v1beta1 named a request's class, mode and count on
// the request itself, where v1 and v1beta2 have them under exactly.
type v1beta1Object struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Devices  v1beta1Devices    `json:"devices"`
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Devices v1beta1Devices `json:"devices"`
		} `json:"spec"`
	} `json:"spec"`
}

// v1beta1Request is a v1beta1 request, or subrequest.
type v1beta1Request struct {
	Name            string           `json:"name"`
	DeviceClassName string           `json:"deviceClassName"`
	AllocationMode  string           `json:"allocationMode"`
	Count           int64            `json:"count"`
	FirstAvailable  []v1beta1Request `json:"firstAvailable"`
}

// v1beta1Devices are a v1beta1 claim's requests.
type v1beta1Devices struct {
	Requests []v1beta1Request `json:"requests"`
}

// v1 translates the requests into v1's shape, as far as gpurun reads
// them: the class, the allocation mode and the count of each request and
// subrequest.
func (d v1beta1Devices) v1() resourcev1.DeviceClaim {
	var out resourcev1.DeviceClaim
	for _, r := range d.Requests {
		req := resourcev1.DeviceRequest{Name: r.Name}
		if r.DeviceClassName != "" {
			req.Exactly = &resourcev1.ExactDeviceRequest{DeviceClassName: r.DeviceClassName,
				AllocationMode: resourcev1.DeviceAllocationMode(r.AllocationMode), Count: r.Count}
		}
		for _, s := range r.FirstAvailable {
			req.FirstAvailable = append(req.FirstAvailable, resourcev1.DeviceSubRequest{Name: s.Name, DeviceClassName: s.DeviceClassName,
				AllocationMode: resourcev1.DeviceAllocationMode(s.AllocationMode), Count: s.Count})
		}
		out.Requests = append(out.Requests, req)
	}
	return out
}
