package containerd

import (
	"errors"
	"fmt"

	"github.com/gpurun/gpurun/internal/tomledit"
)

// doc is a containerd config as the editor sees it: the lossless document
// and its version.
type doc struct {
	*tomledit.Doc
	version int
	// empty says the config has no key and no table: containerd runs on
	// its defaults.
	empty bool
}

// parse parses and checks a containerd config.
func parse(data []byte) (*doc, error) {
	td, err := tomledit.Parse("containerd config", data)
	if err != nil {
		return nil, err
	}
	d := &doc{Doc: td, empty: td.Empty()}
	if d.empty {
		d.version = 2
		return d, nil
	}
	v, ok := d.Tree["version"]
	if !ok {
		return nil, errors.New("containerd config: no version key: version 1 configs are not supported; run containerd config migrate")
	}
	n, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("containerd config line %d: version %v is not an integer", d.Line(d.KVStart([]string{"version"})), v)
	}
	switch n {
	case 2, 3, 4:
		d.version = int(n)
	case 1:
		return nil, errors.New("containerd config: version 1 configs are not supported; run containerd config migrate")
	default:
		return nil, fmt.Errorf("containerd config line %d: unsupported config version %d (gpurun knows 2, 3 and 4)", d.Line(d.KVStart([]string{"version"})), n)
	}
	return d, nil
}
