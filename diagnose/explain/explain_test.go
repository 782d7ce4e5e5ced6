package explain

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gpurun/gpurun/policy"
)

func scanFile(t *testing.T, path string, o Options) *Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if o.Source == "" {
		o.Source = path
	}
	r, err := Scan(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ids(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Signature)
	}
	return out
}

func TestRealLogs(t *testing.T) {
	for _, tt := range corpus {
		t.Run(tt.file, func(t *testing.T) {
			r := scanFile(t, filepath.Join("testdata", tt.file), Options{})
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"findings", ids(r), tt.want},
				{"look-alike notes", otherIDs(r), tt.others},
			} {
				slices.Sort(c.got)
				want := slices.Clone(c.want)
				slices.Sort(want)
				if !slices.Equal(c.got, want) {
					var b strings.Builder
					_ = WriteText(&b, r)
					t.Errorf("%s (%s) %s:\ngot  %q\nwant %q\n%s", tt.file, tt.source, c.what, c.got, want, b.String())
				}
			}
			if r.Found() != (r.Fix != nil) {
				t.Errorf("findings %v but fix %+v", ids(r), r.Fix)
			}
		})
	}
}

func otherIDs(r *Report) []string {
	var out []string
	for _, f := range r.Others {
		out = append(out, f.Signature)
	}
	return out
}

// Every signature has a real log among the test cases.
func TestEverySignatureHasARealLog(t *testing.T) {
	covered := map[string]bool{}
	for _, tt := range corpus {
		for _, id := range append(slices.Clone(tt.want), tt.others...) {
			covered[id] = true
		}
	}
	seen := map[string]bool{}
	for _, sig := range Signatures() {
		if seen[sig.ID] {
			t.Errorf("signature %s twice in the table", sig.ID)
		}
		seen[sig.ID] = true
		if !covered[sig.ID] && awaitingRealLog[sig.ID] == "" {
			t.Errorf("signature %s has no real log among the test cases", sig.ID)
		}
		both := sig.Both != [2]string{}
		if sig.Cause == "" || sig.Fix == "" || sig.Title == "" || !both && (len(sig.Keywords) == 0 || len(sig.Patterns) == 0) {
			t.Errorf("signature %s lacks a title, cause, fix, keyword or pattern", sig.ID)
		}
		if both && (len(sig.Patterns) > 0 || sig.Both[0] == "" || sig.Both[1] == "" || sig.BothWithin < 0) {
			t.Errorf("signature %s: Both %q within %d, with %d patterns", sig.ID, sig.Both, sig.BothWithin, len(sig.Patterns))
		}
		if sig.Kind != KindOther && len(sig.Evidence) == 0 {
			t.Errorf("signature %s names no evidence", sig.ID)
		}
		if sig.Implied == "" && sig.NoSize == "" {
			t.Errorf("signature %s says nothing about size", sig.ID)
		}
		for _, y := range sig.YieldsTo {
			if i := slices.IndexFunc(Signatures(), func(s Signature) bool { return s.ID == y }); i < 0 || slices.Contains(Signatures()[i].YieldsTo, sig.ID) {
				t.Errorf("signature %s yields to %s, which is unknown or yields back", sig.ID, y)
			}
		}
		for _, k := range append(append(slices.Clone(sig.Keywords), sig.AfterKeywords...), sig.UnlessKeywords...) {
			if k != strings.ToLower(k) {
				t.Errorf("signature %s: keyword %q is not lower case", sig.ID, k)
			}
		}
	}
}

// awaitingRealLog are the signatures written from the formats of the
// programs that print their lines (kubectl, the kubelet, the kernel,
// gpurun's Events) before a public log of them was collected, each with
// the tests of its written excerpts. A real log in the corpus takes a
// signature off the list (TestAwaitingRealLog).
var awaitingRealLog = map[string]string{
	"shm-restart-leftovers": "TestRestartLeftovers, TestKubectlForms",
	"oom-kill-shm":          "TestOOMKillShm",
}

// The list of signatures awaiting a real log holds only signatures of the
// table that the corpus does not cover yet.
func TestAwaitingRealLog(t *testing.T) {
	for id := range awaitingRealLog {
		if !slices.ContainsFunc(Signatures(), func(s Signature) bool { return s.ID == id }) {
			t.Errorf("%s awaits a real log but is no signature", id)
		}
		for _, tt := range corpus {
			if slices.Contains(tt.want, id) || slices.Contains(tt.others, id) {
				t.Errorf("%s has a real log (%s): take it off awaitingRealLog", id, tt.file)
			}
		}
	}
}

// The keywords are a shortcut, never a filter: a keyword must occur in
// every line a signature's patterns match in the real logs.
func TestKeywordsCoverMatches(t *testing.T) {
	sigs := Signatures()
	for _, tt := range corpus {
		data, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			for _, sig := range sigs {
				for _, re := range sig.Patterns {
					if re.MatchString(line) && !slices.ContainsFunc(sig.Keywords, func(k string) bool { return strings.Contains(strings.ToLower(line), k) }) {
						t.Errorf("%s: %s matches %q but no keyword %q does", tt.file, sig.ID, line, sig.Keywords)
					}
				}
			}
		}
	}
}

func TestDocsHaveASectionPerSignature(t *testing.T) {
	data, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if !strings.Contains(doc, "gpurun explain") {
		t.Error("docs/troubleshooting.md does not show gpurun explain")
	}
	for _, sig := range Signatures() {
		if !strings.Contains(doc, "<a id=\""+sig.ID+"\"></a>") {
			t.Errorf("docs/troubleshooting.md has no section <a id=%q></a>", sig.ID)
		}
		conf := string(sig.Confidence)
		if sig.Kind == KindOther {
			conf = "not /dev/shm"
		}
		if row := "| [`" + sig.ID + "`](#" + sig.ID + ") | " + conf + " |"; !strings.Contains(doc, row) {
			t.Errorf("docs/troubleshooting.md's table has no row %q", row)
		}
	}
}

func scanString(t *testing.T, log string, o Options) *Report {
	t.Helper()
	r, err := Scan(strings.NewReader(log), o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func finding(t *testing.T, r *Report, id string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Signature == id {
			return f
		}
	}
	t.Fatalf("no %s finding in %q", id, ids(r))
	return Finding{}
}

const busError = "RuntimeError: DataLoader worker (pid 229) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit."

// What logs look like on the way to explain: CRLF, colours, progress bars
// redrawn with \r, gzip, very long lines, wrapped lines, split records.
func TestLogForms(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprintf(zw, "epoch 1\n%s\n", busError)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 3*maxLine/2) + " " + busError + strings.Repeat("y", 1000)
	tests := []struct {
		name     string
		log      string
		wantID   string
		wantLine int
	}{
		{"plain", "a\nb\n" + busError + "\n", "torch-dataloader-bus-error", 3},
		{"CRLF", "a\r\nb\r\n" + busError + "\r\n", "torch-dataloader-bus-error", 3},
		{"no final newline", "a\n" + busError, "torch-dataloader-bus-error", 2},
		{"ANSI colours", "a\n\x1b[1;31mRuntimeError\x1b[0m: DataLoader worker (pid 1) is killed by signal: \x1b[33mBus error\x1b[0m.\n", "torch-dataloader-bus-error", 2},
		{"OSC title and link", "\x1b]0;train\x07\x1b]8;;http://x\x1b\\" + busError + "\n", "torch-dataloader-bus-error", 1},
		{"tqdm progress bar with \\r", "Epoch 1:  10%|█         | 10/100\rEpoch 1:  11%|█         | 11/100\r" + busError + "\n", "torch-dataloader-bus-error", 1},
		{"gzip", gz.String(), "torch-dataloader-bus-error", 2},
		{"line longer than a piece", "a\n" + long + "\nb\n", "torch-dataloader-bus-error", 2},
		{"wrapped at the terminal's width", "RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\nerror. It is possible\n", "torch-dataloader-bus-error", 1},
		{"exception name split over logger records",
			"t 10:59:01[app]-ERROR-  File \"/usr/lib/python3.7/multiprocessing/managers.py\", line 834, in _callmethod\n" +
				"t 10:59:01[app]-ERROR-raise convert_to_error(kind, result)\n" +
				"t 10:59:02[app]-ERROR-_queue\nt 10:59:02[app]-ERROR-.\nt 10:59:03[app]-ERROR-Empty\n",
			"torch-dataloader-queue-empty", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scanString(t, tt.log, Options{})
			f := finding(t, r, tt.wantID)
			if f.Lines[0].N != tt.wantLine {
				t.Errorf("first line %d, want %d", f.Lines[0].N, tt.wantLine)
			}
			for _, l := range f.Lines {
				if strings.ContainsRune(l.Text, 0x1b) || len(l.Text) > maxText+2*len("…") {
					t.Errorf("line text %q: escape codes or longer than %d", l.Text, maxText)
				}
			}
		})
	}
}

// Conditions: After (a DataLoader frame before _queue.Empty), Unless (the
// reason NCCL gave is not space), Near (an NCCL error with shm lines
// around it, before or after), Generic (yields to a specific match).
func TestConditions(t *testing.T) {
	frame := `  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1, in _try_get_data` + "\n"
	filler := strings.Repeat("INFO step\n", 50)
	seg := "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-X (size 9637888)\n"
	sysErr := "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8\nncclSystemError: System call (socket, malloc, munmap, etc) failed.\n"
	tests := []struct {
		name string
		log  string
		want []string
	}{
		{"queue.Empty after a DataLoader frame", frame + "_queue.Empty\n", []string{"torch-dataloader-queue-empty"}},
		{"queue.Empty long after it", frame + filler + "_queue.Empty\n", nil},
		{"queue.Empty alone", "_queue.Empty\n", nil},
		{"queue.Empty before its DataLoader frame (error first)", "_queue.Empty\n" + strings.Repeat("  File \"/srv/train.py\", line 9, in step\n", 10) + frame, []string{"torch-dataloader-queue-empty"}},
		{"queue.Empty long before it", "_queue.Empty\n" + filler + frame, nil},
		{"segment after a Cuda failure", "NCCL WARN Cuda failure 'invalid argument'\n" + seg, nil},
		{"segment well after a Cuda failure", "NCCL WARN Cuda failure 'invalid argument'\n" + filler + seg, []string{"nccl-shm-segment"}},
		{"NCCL error before its shm lines", sysErr + seg, []string{"nccl-error-near-shm", "nccl-shm-segment"}},
		{"NCCL error after its shm lines", seg + sysErr, []string{"nccl-error-near-shm", "nccl-shm-segment"}},
		{"NCCL error far from shm lines", seg + filler + sysErr, []string{"nccl-shm-segment"}},
		{"NCCL error alone: possible", sysErr, []string{"nccl-unhandled-system-error"}},
		{"NCCL error after a socket warning", "node1:1:2 [0] include/socket.h:385 NCCL WARN Net : Connection closed by remote peer\n" + filler + sysErr, nil},
		{"NCCL error after a Cuda failure", "[1] misc/shmutils.cc:103 NCCL WARN Cuda failure 'invalid argument'\n" + sysErr, nil},
		{"NCCL error long after a socket warning", "node1:1:2 [0] NCCL WARN Net : Connection closed by remote peer\n" + strings.Repeat(filler, 11) + sysErr, []string{"nccl-unhandled-system-error"}},
		{"Errno 28 after shared_memory's ftruncate", "  File \"/usr/lib/python3.12/multiprocessing/shared_memory.py\", line 115, in __init__\n    os.ftruncate(self._fd, size)\nOSError: [Errno 28] No space left on device\n", []string{"python-semlock-enospc"}},
		{"Errno 28 saving a checkpoint", "  File \"/x/torch/serialization.py\", line 1, in save\nOSError: [Errno 28] No space left on device\n", nil},
		{"Triton out of room for another reason", "Failed to increase the shared memory pool size for key 'triton_python_backend_shm_region_7' to 1073741824 bytes. If you are running Triton inside docker, use '--shm-size' flag to control the shared memory region size. Error: Connection timed out\n", nil},
		{"generic ENOSPC yields", "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-A to 9637892 bytes, error: No space left on device (28)\n", []string{"nccl-shm-extend"}},
		{"generic ENOSPC alone", "OSError: [Errno 28] No space left on device: '/dev/shm/cache.bin'\n", []string{"shm-path-enospc"}},
		{"dockerd out of mount slots", "Error response from daemon: mounting shm tmpfs: no space left on device /dev/shm\n", nil},
		{"worker exit code", "RuntimeError: DataLoader worker (pid 1) exited unexpectedly with exit code 1.\n", []string{"torch-dataloader-worker-exited"}},
		{"semaphore without its frame", "OSError: [Errno 28] No space left on device\n", nil},
		{"sentence not wrapped", "It was fine until the data loader hit a Bus.\nerror is what it said: DataLoader worker (pid 1) is killed by signal\n", nil},
		{"prose out of shared memory", "ERROR:  out of shared memory\nHINT:  You might need to increase max_locks_per_transaction.\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ids(scanString(t, tt.log, Options{}))
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

// The size a message names, and the errno.
func TestImplied(t *testing.T) {
	r := scanString(t, "NCCL WARN Error while creating shared memory segment nccl-shm-recv-1 (size 9637888)\n"+
		"NCCL WARN Error while creating shared memory segment nccl-shm-recv-2 (size 4460544)\n", Options{})
	f := finding(t, r, "nccl-shm-segment")
	if f.ImpliedBytes != 9637888 || !strings.Contains(f.Implied, policy.FormatSize(9637888)+" (9637888 bytes) per segment") {
		t.Errorf("implied %d %q", f.ImpliedBytes, f.Implied)
	}
	if f.Count != 2 || len(f.Lines) != 2 || f.Lines[1].N != 2 {
		t.Errorf("count %d lines %+v", f.Count, f.Lines)
	}
	r = scanString(t, "RuntimeError: unable to write to file </torch_8289_606636967_0>: No space left on device (28)\n", Options{})
	f = finding(t, r, "torch-shm-file")
	if f.ImpliedBytes != 0 || !strings.Contains(f.Implied, "errno 28 (ENOSPC") {
		t.Errorf("implied %d %q", f.ImpliedBytes, f.Implied)
	}
	r = scanString(t, "RuntimeError: unable to allocate shared memory(shm) for file </torch_1140157_3143461634_13983>: Success (0)\n", Options{})
	if f = finding(t, r, "torch-shm-file"); !strings.Contains(f.Implied, "errno 0") {
		t.Errorf("implied %q", f.Implied)
	}
}

// The fix is the policy's size, never below what the log names.
func TestFix(t *testing.T) {
	pol := policy.Default()
	small, err := policy.Parse("small.toml", []byte("min = \"4m\"\nsize = \"4m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	nccl := "NCCL WARN Error while creating shared memory segment x (size 9637888)\n"
	tests := []struct {
		name   string
		pol    *policy.Policy
		memory int64
		log    string
	}{
		{"default policy, memory unknown", pol, 0, busError},
		{"default policy, 16g container", pol, 16 * policy.GiB, busError},
		{"policy below the named segment", small, 0, nccl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scanString(t, tt.log, Options{Policy: tt.pol, Memory: tt.memory})
			want, _ := tt.pol.Target(policy.Request{MemoryLimit: tt.memory})
			for _, f := range r.Findings {
				if f.ImpliedBytes > want {
					want = (f.ImpliedBytes + policy.MiB - 1) / policy.MiB * policy.MiB
				}
			}
			fx := r.Fix
			if fx == nil || fx.SizeBytes != want || fx.Size != policy.FormatDocker(want) {
				t.Fatalf("fix %+v, want size %d", fx, want)
			}
			var steps []string
			for _, s := range fx.Steps {
				steps = append(steps, s.Where+": "+s.How)
			}
			all := strings.Join(steps, "\n")
			for _, s := range []string{"--shm-size=" + fx.Size, fmt.Sprintf("shm_size: %q", policy.FormatCompose(want)), "sizeLimit: " + policy.FormatQuantity(want), "gpurun run",
				"gpurun resize CONTAINER " + fx.Size, "gpurun compose migrate --write", "gpurun install docker", "overlays/runtime-class", "gpurun install podman", "gpurun doctor"} {
				if !strings.Contains(all, s) {
					t.Errorf("steps lack %q:\n%s", s, all)
				}
			}
		})
	}
	r := scanString(t, "node08:1:2 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n", Options{})
	if r.Fix == nil || r.Fix.SizeBytes != 0 || len(r.Fix.Steps) != 1 || !strings.Contains(r.Fix.Steps[0].How, "1777") {
		t.Errorf("permission fix %+v", r.Fix)
	}
}

func TestNothingFound(t *testing.T) {
	r := scanString(t, "hello\nworld\n", Options{Source: "job.log"})
	if r.Found() || r.Fix != nil || r.Lines != 2 {
		t.Errorf("report %+v", r)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "nothing in job.log (2 lines) matched") {
		t.Errorf("text %q", b.String())
	}
	if r := scanString(t, "", Options{}); r.Found() || r.Lines != 0 {
		t.Errorf("empty log: %+v", r)
	}
}

func TestUnreadable(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := Scan(iotest.TimeoutReader(strings.NewReader("a\nb\n")), Options{Source: "x.log"})
	if !errors.Is(err, iotest.ErrTimeout) || !strings.Contains(err.Error(), "x.log") {
		t.Errorf("err = %v", err)
	}
	_, err = Scan(iotest.ErrReader(boom), Options{Source: "y.log"})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "read y.log") {
		t.Errorf("err = %v", err)
	}
	_, err = Scan(strings.NewReader("\x1f\x8bnot gzip at all"), Options{Source: "z.gz"})
	if err == nil || !strings.Contains(err.Error(), "z.gz") {
		t.Errorf("bad gzip: err = %v", err)
	}
}

// The text report shows each finding's lines, cause, size and fix, then
// the commands; JSON carries the same.
func TestReportOutput(t *testing.T) {
	r := scanFile(t, "testdata/logs/nccl-525.log", Options{Source: "nccl.log"})
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"gpurun explain: 2 /dev/shm findings in nccl.log (3 lines)",
		"line 1: [3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
		"line 3: [3] include/shm.h:48 NCCL WARN Error while creating shared memory segment",
		"shm:   " + policy.FormatSize(9637888) + " (9637888 bytes) per segment",
		"Fix: give /dev/shm " + r.Fix.Size,
		"docker run --shm-size=" + r.Fix.Size,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Findings) != 2 || back.Findings[0].Signature != "nccl-posix-fallocate" || back.Findings[1].ImpliedBytes != 9637888 || back.Fix.SizeBytes != r.Fix.SizeBytes {
		t.Errorf("JSON round trip: %s", data)
	}
}

// Matches are capped at MaxLines kept lines, and counted in full.
func TestManyMatches(t *testing.T) {
	n := 3 * MaxLines
	r := scanString(t, strings.Repeat(busError+"\n", n), Options{})
	f := finding(t, r, "torch-dataloader-bus-error")
	if f.Count != n || len(f.Lines) != MaxLines {
		t.Errorf("count %d, %d lines kept", f.Count, len(f.Lines))
	}
	var b strings.Builder
	_ = WriteText(&b, r)
	if !strings.Contains(b.String(), fmt.Sprintf("... and %d more matches", n-shownLines)) {
		t.Errorf("text:\n%s", b.String())
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[31mred\x1b[0m":                "red",
		"a\x1b[2Kb":                         "ab",
		"\x1b]0;title\x07text":              "text",
		"\x1b]8;;u\x1b\\link\x1b]8;;\x1b\\": "link",
		"x\x1b(By":                          "xy",
		"trailing\x1b":                      "trailing",
		"\x1b[":                             "",
	} {
		if got := string(stripANSI([]byte(in))); got != want {
			t.Errorf("stripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkScan reads a 100,000-line training log (NCCL INFO lines and
// progress output, the failure at its end).
func BenchmarkScan(b *testing.B) {
	var sb strings.Builder
	for i := range 100000 {
		if i%3 == 0 {
			fmt.Fprintf(&sb, "node-%d:9223:9776 [0] NCCL INFO Channel %02d : 0[100000] -> 1[200000] via direct shared memory\n", i%7, i%32)
		} else {
			fmt.Fprintf(&sb, "\x1b[32mEpoch %d\x1b[0m:  %d%%|█████     | %d/100000 [00:10<00:20, 8.14it/s, loss=0.%d]\n", i/1000, i%100, i, i)
		}
	}
	sb.WriteString("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n")
	log := sb.String()
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for b.Loop() {
		r, err := Scan(strings.NewReader(log), Options{})
		if err != nil || len(r.Findings) != 1 {
			b.Fatalf("%v %v", err, r)
		}
	}
}

// BenchmarkScanMixed reads a large mixed log: every log of the corpus in
// turn, each followed by training output (NCCL INFO lines, coloured tqdm
// bars redrawn with \r, logger records) until the log is about 64 MiB, so
// that the signatures' keywords and patterns run on real failures too,
// not only on lines no keyword is in.
func BenchmarkScanMixed(b *testing.B) {
	var logs [][]byte
	for _, c := range corpus {
		data, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			b.Fatal(err)
		}
		logs = append(logs, data)
	}
	var sb strings.Builder
	for i := 0; sb.Len() < 64<<20; i++ {
		sb.Write(logs[i%len(logs)])
		sb.WriteString("\n")
		for j := range 200 {
			switch j % 4 {
			case 0:
				fmt.Fprintf(&sb, "node-%d:9223:9776 [%d] NCCL INFO Channel %02d/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n", i%7, j%8, j%32)
			case 1:
				fmt.Fprintf(&sb, "\x1b[32mEpoch %d\x1b[0m:  %d%%|█████     | %d/100000 [00:10<00:20, 8.14it/s, loss=0.%d]\r", i, j%100, j, j)
				fmt.Fprintf(&sb, "\x1b[32mEpoch %d\x1b[0m:  %d%%|█████     | %d/100000 [00:10<00:20, 8.14it/s, loss=0.%d]\n", i, j%100, j+1, j)
			case 2:
				fmt.Fprintf(&sb, "[rank%d]:[I%d 12:00:00.000000 ProcessGroupNCCL.cpp:1000] [PG 0 Rank %d] ProcessGroupNCCL initialization options: size: 8, global rank: %d\n", j%8, i, j%8, j%8)
			default:
				fmt.Fprintf(&sb, "INFO 09-25 06:40:46 llm_engine.py:223] step %d: 512 tokens, KV cache usage 12.%d%%, 3 requests running\n", i*200+j, j%10)
			}
		}
	}
	log := sb.String()
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for b.Loop() {
		r, err := Scan(strings.NewReader(log), Options{})
		if err != nil || !r.Found() {
			b.Fatalf("%v %v", err, r)
		}
	}
}

// OnFinding is told of a finding while the log is still open, as soon as
// its line has been read; a Near signature as soon as its anchor (before
// or after it) has been.
func TestOnFindingStreams(t *testing.T) {
	seg := "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-X (size 9637888)\n"
	sysErr := "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8\n"
	tests := []struct {
		name  string
		lines []string
		// after each line, the signatures told so far
		want [][]string
	}{
		{"one line, one finding", []string{"step 1\n", busError + "\n", "step 2\n"},
			[][]string{nil, {"torch-dataloader-bus-error"}, {"torch-dataloader-bus-error"}}},
		{"NCCL error after its anchor", []string{seg, sysErr},
			[][]string{{"nccl-shm-segment"}, {"nccl-shm-segment", "nccl-unhandled-system-error", "nccl-error-near-shm"}}},
		{"NCCL error before its anchor", []string{sysErr, "INFO x\n", seg},
			[][]string{{"nccl-unhandled-system-error"}, {"nccl-unhandled-system-error"}, {"nccl-unhandled-system-error", "nccl-error-near-shm", "nccl-shm-segment"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			told := make(chan string, 16)
			done := make(chan *Report, 1)
			go func() {
				r, err := Scan(pr, Options{OnFinding: func(f Finding) { told <- f.Signature }})
				if err != nil {
					t.Error(err)
				}
				done <- r
			}()
			var got []string
			for i, line := range tt.lines {
				if _, err := io.WriteString(pw, line); err != nil {
					t.Fatal(err)
				}
				for len(got) < len(tt.want[i]) {
					select {
					case id := <-told:
						got = append(got, id)
					case <-time.After(10 * time.Second):
						t.Fatalf("after line %d: told %q, want %q before the log ends", i+1, got, tt.want[i])
					}
				}
				if !slices.Equal(sorted(got), sorted(tt.want[i])) {
					t.Fatalf("after line %d: told %q, want %q", i+1, got, tt.want[i])
				}
			}
			pw.Close()
			r := <-done
			select {
			case id := <-told:
				t.Errorf("told %s only at the end", id)
			default:
			}
			// The report holds what was told, less what yields to a surer finding.
			for _, id := range got {
				if !slices.Contains(ids(r), id) && id != "nccl-unhandled-system-error" {
					t.Errorf("told %s, not in the report %q", id, ids(r))
				}
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// The sizes the new signatures read: bytes, decimal and binary gigabytes,
// and what /dev/shm had.
func TestImpliedSizes(t *testing.T) {
	tests := []struct {
		name       string
		log        string
		id         string
		implied    int64
		shm        int64
		impliedHas string
	}{
		{"Ray's recommendation, in GiB",
			"WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will harm performance! If you are inside a Docker container, you can increase /dev/shm size by passing '--shm-size=10.24gb' to 'docker run'",
			"ray-object-store-shm", int64(math.Round(10.24 * (1 << 30))), 67108864, "the message says /dev/shm had 64MiB (67108864 bytes)"},
		{"older Ray, no recommendation",
			"WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This may slow down performance!",
			"ray-object-store-shm", 0, 67108864, "Ray names what /dev/shm had"},
		{"Ray's ValueError, in GB",
			"ValueError: The configured object store size (11.81114368 GB) exceeds /dev/shm size (11.8111232 GB). This will harm performance.",
			"ray-object-store-shm", 11811143680, 11811123200, "for Ray's object store"},
		{"raylet",
			"(raylet) store_runner.cc:83: System memory request exceeds memory available in /dev/shm. The request is for 10200547328 bytes, and the amount available is 9663676416 bytes.",
			"ray-object-store-shm", 10200547328, 9663676416, ""},
		{"Triton",
			"Failed to increase the shared memory pool size for key 'triton_python_backend_shm_region_2' to 67108864 bytes. If you are running Triton inside docker, use '--shm-size' flag to control the shared memory region size. Error: No space left on device",
			"triton-python-backend-shm", 67108864, 0, "every Python model instance has its own"},
		{"PostgreSQL",
			`ERROR:  could not resize shared memory segment "/PostgreSQL.1767612635" to 183552 bytes: No space left on device`,
			"postgres-dsm-resize", 183552, 0, "in one segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := finding(t, scanString(t, tt.log+"\n", Options{}), tt.id)
			if f.ImpliedBytes != tt.implied || f.ShmBytes != tt.shm || !strings.Contains(f.Implied, tt.impliedHas) {
				t.Errorf("implied %d, shm %d, %q; want %d, %d, with %q", f.ImpliedBytes, f.ShmBytes, f.Implied, tt.implied, tt.shm, tt.impliedHas)
			}
		})
	}
}

// Look-alikes are reported apart and call for no fix.
func TestLookAlikesApart(t *testing.T) {
	r := scanString(t, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB.\n", Options{})
	if r.Found() || r.Fix != nil || len(r.Others) != 1 || r.Others[0].Kind != KindOther {
		t.Fatalf("report %+v", r)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nothing in standard input (1 line) matched", "Also in the log, and not /dev/shm (1):", "[cuda-out-of-memory]"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	for _, sig := range Signatures() {
		if (sig.Kind == KindOther) != (sig.Confidence == "") {
			t.Errorf("%s: kind %s with confidence %q", sig.ID, sig.Kind, sig.Confidence)
		}
	}
}
