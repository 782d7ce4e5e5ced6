package policy

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"65536k", 64 * MiB, ""},
		{"64m", 64 * MiB, ""},
		{"64M", 64 * MiB, ""},
		{"2g", 2 * GiB, ""},
		{"2gb", 2 * GiB, ""},
		{"2GB", 2 * GiB, ""},
		{"1.5g", 3 * GiB / 2, ""},
		{"1073741824", GiB, ""},
		{"0", 0, ""},
		{"2Gi", 2 * GiB, ""},
		{"512Mi", 512 * MiB, ""},
		{"2G", 2 * GiB, ""}, // Docker's G is binary
		{" 8g ", 8 * GiB, ""},
		{"", 0, `invalid size ""`},
		{"abc", 0, `invalid size "abc"`},
		{"-1", 0, `invalid size "-1"`},
		{"1.5.5g", 0, `invalid size "1.5.5g"`},
		{"2gigs", 0, `invalid size "2gigs"`},
		{"0x10", 0, `invalid size "0x10"`},
		{"2Xi", 0, `invalid quantity "2Xi"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			checkErr(t, err, tt.wantErr)
			if tt.wantErr == "" && got != tt.want {
				t.Errorf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"2Gi", 2 * GiB, ""},
		{"512Mi", 512 * MiB, ""},
		{"1.5Gi", 3 * GiB / 2, ""},
		{"2G", 2_000_000_000, ""},
		{"64M", 64_000_000, ""},
		{"100k", 100_000, ""},
		{"1e9", 1_000_000_000, ""},
		{"1E3", 1000, ""},
		{"4096", 4096, ""},
		{"100m", 0, `unknown suffix "m"`},
		{"0.5", 0, "not a whole number of bytes"},
		{"-1Gi", 0, "no number"},
		{"8Ei", 0, "out of range"},
		{"", 0, "no number"},
		{"Gi", 0, "no number"},
		{"1.2.3", 0, `unknown suffix ".3"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseQuantity(tt.in)
			checkErr(t, err, tt.wantErr)
			if tt.wantErr == "" && got != tt.want {
				t.Errorf("ParseQuantity(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseAnySize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"2Gi", 2 * GiB, true},
		{"2G", 2_000_000_000, true}, // a Kubernetes quantity first
		{"2g", 2 * GiB, true},       // not a quantity: Docker's reading
		{"512m", 512 * MiB, true},
		{"2gb", 2 * GiB, true},
		{"lots", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseAnySize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseAnySize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseMountSize(t *testing.T) {
	tests := []struct {
		in      string
		host    int64
		want    int64
		wantErr string
	}{
		{"67108864", 0, 64 * MiB, ""},
		{"65536k", 0, 64 * MiB, ""},
		{"2g", 0, 2 * GiB, ""},
		{"50%", 8 * GiB, 4 * GiB, ""},
		{"50%", 0, 0, "relative to the host's memory"},
		{"", 0, 0, "empty"},
		{"12q", 0, 0, "invalid tmpfs size"},
		// Past int64: the kernel's limit is huge, and so is gpurun's view of it.
		{"99999999999999999999k", 0, math.MaxInt64, ""},
		{"9223372036854775808", 0, math.MaxInt64, ""},
		{"9007199254740992k", 0, math.MaxInt64, ""},
	}
	for _, tt := range tests {
		got, err := ParseMountSize(tt.in, tt.host)
		checkErr(t, err, tt.wantErr)
		if tt.wantErr == "" && got != tt.want {
			t.Errorf("ParseMountSize(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		n               int64
		human, docker   string
		optKiB, optByte string
	}{
		{64 * MiB, "64MiB", "64m", "size=65536k", "size=67108864"},
		{GiB, "1GiB", "1g", "size=1048576k", "size=1073741824"},
		{3 * GiB / 2, "1.5GiB", "1536m", "size=1572864k", "size=1610612736"},
		{9637888, "9.19MiB", "9412k", "size=9412k", "size=9637888"},
		{12662411264, "11.79GiB", "12365636k", "size=12365636k", "size=12662411264"},
		{1000, "1000B", "1000", "size=1000", "size=1000"},
		{0, "0B", "0", "size=0k", "size=0"},
		{8 * TiB, "8TiB", "8192g", "size=8589934592k", "size=8796093022208"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.n); got != tt.human {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.n, got, tt.human)
		}
		if got := FormatDocker(tt.n); got != tt.docker {
			t.Errorf("FormatDocker(%d) = %q, want %q", tt.n, got, tt.docker)
		}
		if got := MountSizeOption(tt.n, true); got != tt.optKiB {
			t.Errorf("MountSizeOption(%d, true) = %q, want %q", tt.n, got, tt.optKiB)
		}
		if got := MountSizeOption(tt.n, false); got != tt.optByte {
			t.Errorf("MountSizeOption(%d, false) = %q, want %q", tt.n, got, tt.optByte)
		}
	}
}

// Every Docker-style size gpurun writes must read back as the same bytes.
func TestFormatDockerRoundTrip(t *testing.T) {
	for _, n := range []int64{1, 1023, KiB, 9637888, 64 * MiB, 3 * GiB / 2, 8 * GiB, 5 * TiB} {
		got, err := ParseSize(FormatDocker(n))
		if err != nil || got != n {
			t.Errorf("ParseSize(FormatDocker(%d)=%q) = %d, %v", n, FormatDocker(n), got, err)
		}
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"65536k", "64m", "2g", "2gb", "1.5g", "1024", "2Gi", "512Mi", "1e3", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid") {
				t.Fatalf("error %q does not say what is invalid", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, n)
		}
		// What gpurun writes back must parse to the same size.
		if back, err := ParseSize(FormatDocker(n)); err != nil || back != n {
			t.Fatalf("round trip of %d via %q = %d, %v", n, FormatDocker(n), back, err)
		}
	})
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"2Gi", "512Mi", "2G", "1e9", "100m", "0.5", "1.5Gi", "8Ei"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseQuantity(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseQuantity(%q) = %d < 0", s, n)
		}
		checkQuantityAgainstBig(t, s)
	})
}

// ParseQuantity agrees with exact rational arithmetic: the same value, or
// both refuse; it may refuse more than 19 significant digits that the
// rationals take.
func TestParseQuantityAgainstBig(t *testing.T) {
	for _, s := range []string{
		"2Gi", ".5Ki", "1.", "0.0009765625Ki", "0.00048828125Ki", "0.0001Ki", "1.5", "1e18", "1e19", "0.5e1", "5e-1",
		"9223372036854775807", "9223372036854775808", "9.223372036854775807e18", "9.223372036854775808e18",
		"0", "0.0Gi", "00012Ki", "1.000000000000000000000Gi", "12345678901234567890", "0.000000000000000000001e21",
		"7Ei", "7.9999999999Ei", "8Ei", "8191Pi", "8192Pi", "1e127", "0e127", "0.1e0", "1.25Ki", "1.2Ki", "3.0517578125e-5Ki",
		" 64Mi ", "1.2.3", "Gi", "100m", "1e128",
	} {
		checkQuantityAgainstBig(t, s)
	}
}

func checkQuantityAgainstBig(t *testing.T, s string) {
	t.Helper()
	n, err := ParseQuantity(s)
	want, wantErr := parseQuantityBig(s)
	if err == nil && (wantErr != nil || n != want) {
		t.Fatalf("ParseQuantity(%q) = %d; the rationals say %d, %v", s, n, want, wantErr)
	}
	if err != nil && wantErr == nil && !strings.Contains(err.Error(), "19 significant digits") {
		t.Fatalf("ParseQuantity(%q): %v; the rationals say %d", s, err, want)
	}
}

// parseQuantityBig is ParseQuantity in exact rationals, as gpurun first
// wrote it (math/big is kept out of the shim's binary since).
func parseQuantityBig(s string) (int64, error) {
	num, suffix := splitQuantity(strings.TrimSpace(s))
	if num == "" {
		return 0, errors.New("no number")
	}
	var mult *big.Rat
	switch suffix {
	case "":
		mult = big.NewRat(1, 1)
	case "Ki", "Mi", "Gi", "Ti", "Pi", "Ei":
		shift := uint(10 * (strings.Index("KMGTPE", suffix[:1]) + 1))
		mult = new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift))
	case "k", "M", "G", "T", "P", "E":
		exp := int64(3 * (strings.Index("kMGTPE", suffix) + 1))
		mult = new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(exp), nil))
	default:
		if len(suffix) < 2 || (suffix[0] != 'e' && suffix[0] != 'E') {
			return 0, errors.New("unknown suffix")
		}
		exp, err := strconv.ParseInt(suffix[1:], 10, 8)
		if err != nil || exp < 0 {
			return 0, errors.New("bad exponent")
		}
		mult = new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(exp), nil))
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, errors.New("bad number")
	}
	v.Mul(v, mult)
	if !v.IsInt() || !v.Num().IsInt64() {
		return 0, errors.New("not whole or out of range")
	}
	return v.Num().Int64(), nil
}

func TestFormatQuantityAndCompose(t *testing.T) {
	tests := []struct {
		n                 int64
		quantity, compose string
	}{
		{GiB, "1Gi", "1gb"},
		{8 * GiB, "8Gi", "8gb"},
		{1536 * MiB, "1536Mi", "1536mb"},
		{12 * KiB, "12Ki", "12kb"},
		{1000, "1000", "1000"},
		{2 * TiB, "2Ti", "2048gb"},
		{3 * TiB << 10, "3Pi", "3145728gb"},
	}
	for _, tt := range tests {
		if got := FormatQuantity(tt.n); got != tt.quantity {
			t.Errorf("FormatQuantity(%d) = %q, want %q", tt.n, got, tt.quantity)
		}
		if got := FormatCompose(tt.n); got != tt.compose {
			t.Errorf("FormatCompose(%d) = %q, want %q", tt.n, got, tt.compose)
		}
		for _, s := range []string{tt.quantity, tt.compose} {
			if back, err := ParseAnySize(s); err != nil || back != tt.n {
				t.Errorf("ParseAnySize(%q) = %d, %v; want %d back", s, back, err, tt.n)
			}
		}
	}
}

// FuzzFormatQuantity checks FormatQuantity against Kubernetes' own
// resource.Quantity: what it writes parses back to the same bytes, and a
// whole number of KiB is written as Quantity writes it (its canonical
// binary form).
func FuzzFormatQuantity(f *testing.F) {
	for _, n := range []int64{0, 1, 1000, KiB, 1536 * MiB, 32 * GiB, 2 * TiB, 7 << 60, 1<<63 - 1} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		if n < 0 {
			return
		}
		got := FormatQuantity(n)
		q, err := resource.ParseQuantity(got)
		if err != nil || q.Value() != n {
			t.Fatalf("FormatQuantity(%d) = %q, which Kubernetes reads as %v (%v)", n, got, q.Value(), err)
		}
		if want := resource.NewQuantity(n, resource.BinarySI).String(); n%KiB == 0 && got != want {
			t.Fatalf("FormatQuantity(%d) = %q, resource.Quantity writes %q", n, got, want)
		}
	})
}
