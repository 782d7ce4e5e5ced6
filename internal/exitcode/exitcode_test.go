package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain error", base, Usage},
		{"with a status", New(1, base), 1},
		{"wrapped", fmt.Errorf("context: %w", New(127, base)), 127},
		{"the outer status wins", New(126, New(1, base)), 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.err); got != tc.want {
				t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
	if err := New(1, base); err.Error() != "boom" || !errors.Is(err, base) {
		t.Errorf("New(1, boom): %q, Is boom %v", err, errors.Is(err, base))
	}
}
