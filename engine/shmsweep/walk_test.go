package shmsweep

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWalk: regular files at any depth, by inode, named as in /dev/shm;
// links, fifos, sockets and directories left out; a link never followed.
func TestWalk(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(name string, size int) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nccl-1", 5000)
	write("ray/session/plasma", 1)
	write("empty", 0)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "linkdir"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "linkfile"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	unix.Mknod(filepath.Join(dir, "sock"), unix.S_IFSOCK|0o600, 0)
	os.Mkdir(filepath.Join(dir, "emptydir"), 0o755)

	dev, files, err := Walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Stat(dir, &st)
	if dev != st.Dev {
		t.Errorf("dev = %d, want %d", dev, st.Dev)
	}
	got := map[string]int64{}
	for ino, f := range files {
		var fst unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, strings.TrimPrefix(f.Name, ShmPrefix)), &fst); err != nil || fst.Ino != ino {
			t.Errorf("%s: inode %d, want %d (%v)", f.Name, ino, fst.Ino, err)
		}
		got[f.Name] = f.Bytes
	}
	var big unix.Stat_t
	unix.Stat(filepath.Join(dir, "nccl-1"), &big)
	want := map[string]int64{"/dev/shm/nccl-1": big.Blocks * 512, "/dev/shm/ray/session/plasma": got["/dev/shm/ray/session/plasma"], "/dev/shm/empty": 0}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Walk = %v, want %v", got, want)
	}
	if _, _, err := Walk(filepath.Join(dir, "linkdir")); err == nil {
		t.Errorf("Walk of a symbolic link: no error")
	}
	if _, _, err := Walk(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("Walk of a missing directory: no error")
	}
}

// TestWalkDepth: a walk stops at maxDepth levels.
func TestWalkDepth(t *testing.T) {
	dir := t.TempDir()
	p := dir
	for i := range maxDepth + 3 {
		p = filepath.Join(p, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, "f"+strconv.Itoa(i+1)), nil, 0o644)
	}
	_, files, err := Walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != maxDepth-1 {
		t.Errorf("Walk found %d files, want %d (one per level below the top, up to %d)", len(files), maxDepth-1, maxDepth)
	}
}

// TestEachDirent reads getdents64 records, skipping ".", ".." and
// deleted entries, and stops at a broken one, or when told.
func TestEachDirent(t *testing.T) {
	rec := func(ino uint64, typ uint8, name string) []byte {
		n := (19 + len(name) + 1 + 7) &^ 7
		b := make([]byte, n)
		binary.NativeEndian.PutUint64(b[0:], ino)
		binary.NativeEndian.PutUint16(b[16:], uint16(n))
		b[18] = typ
		copy(b[19:], name)
		return b
	}
	var buf []byte
	for _, r := range [][]byte{rec(1, unix.DT_DIR, "."), rec(2, unix.DT_DIR, ".."), rec(3, unix.DT_REG, "a"),
		rec(0, unix.DT_REG, "deleted"), rec(4, unix.DT_LNK, strings.Repeat("n", 40))} {
		buf = append(buf, r...)
	}
	buf = append(buf, 1, 2, 3) // a broken tail
	var got []dirent
	more := eachDirent(buf, func(name []byte, ino uint64, typ uint8) bool {
		got = append(got, dirent{string(name), ino, typ})
		return true
	})
	want := []dirent{{"a", 3, unix.DT_REG}, {strings.Repeat("n", 40), 4, unix.DT_LNK}}
	if !slices.Equal(got, want) || !more {
		t.Errorf("eachDirent = %v, %v; want %v", got, more, want)
	}
	n := 0
	if more := eachDirent(buf, func([]byte, uint64, uint8) bool { n++; return false }); more || n != 1 {
		t.Errorf("eachDirent went on after fn said stop: %d calls", n)
	}
}

// TestHeld: files open (a descriptor) or mapped by a process are held;
// processes gone, non-process entries, other devices do not count; a
// process that cannot be read is an error, and the others still count.
func TestHeld(t *testing.T) {
	shm := t.TempDir()
	proc := t.TempDir()
	for _, n := range []string{"open", "mapped", "free", "both"} {
		os.WriteFile(filepath.Join(shm, n), []byte("x"), 0o644)
	}
	dev, files, err := Walk(shm)
	if err != nil {
		t.Fatal(err)
	}
	link := func(pid, fd, target string) {
		d := filepath.Join(proc, pid, "fd")
		os.MkdirAll(d, 0o755)
		if err := os.Symlink(target, filepath.Join(d, fd)); err != nil {
			t.Fatal(err)
		}
	}
	link("10", "3", filepath.Join(shm, "open"))
	link("10", "4", "/nonexistent-closed-meanwhile")
	link("10", "5", "/")
	link("11", "0", filepath.Join(shm, "both"))
	os.WriteFile(filepath.Join(proc, "11", "maps"), []byte(mapLine(t, filepath.Join(shm, "mapped"))+mapLine(t, filepath.Join(shm, "both"))+
		"7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n"), 0o644)
	os.MkdirAll(filepath.Join(proc, "self"), 0o755) // not a process
	os.WriteFile(filepath.Join(proc, "self", "maps"), []byte(mapLine(t, filepath.Join(shm, "free"))), 0o644)
	os.MkdirAll(filepath.Join(proc, "12"), 0o755) // exited: no fd, no maps

	held, err := Held(proc, map[uint64]map[uint64]File{dev: files, dev + 1: {1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id := range held {
		if id.Dev != dev {
			t.Errorf("held %v, on another device", id)
		}
		got = append(got, files[id.Ino].Name)
	}
	slices.Sort(got)
	if want := []string{"/dev/shm/both", "/dev/shm/mapped", "/dev/shm/open"}; !slices.Equal(got, want) {
		t.Errorf("Held = %q, want %q", got, want)
	}

	os.MkdirAll(filepath.Join(proc, "14"), 0o755)
	os.WriteFile(filepath.Join(proc, "14", "fd"), nil, 0o644) // cannot be read
	held, err = Held(proc, map[uint64]map[uint64]File{dev: files})
	if err == nil || !strings.Contains(err.Error(), "14/fd") || len(held) != 3 {
		t.Errorf("Held = %v, %v; want the three and an error naming 14/fd", held, err)
	}
}

// TestParseMapsLine: the device (hexadecimal) and inode of a maps line.
func TestParseMapsLine(t *testing.T) {
	tests := []struct {
		line string
		want ID
		ok   bool
	}{
		{"7f2c-7f2d rw-s 00000000 00:1a 12345                      /dev/shm/nccl-x (deleted)", ID{unix.Mkdev(0, 0x1a), 12345}, true},
		{"7f2c-7f2d r--p 00001000 fd:01 18446744073709551615 /usr/lib/libc.so.6", ID{unix.Mkdev(0xfd, 1), 1<<64 - 1}, true},
		{"7f2c-7f2d r--p 00001000 103:2F 42 /with space/lib", ID{unix.Mkdev(0x103, 0x2f), 42}, true},
		{"7ffd-7ffe rw-p 00000000 00:00 0                          [stack]", ID{}, false},
		{"7f2c-7f2d rw-s 00000000 00:1a 18446744073709551616 /overflow", ID{}, false},
		{"7f2c-7f2d rw-s 00000000 001a 5 /no-colon", ID{}, false},
		{"7f2c-7f2d rw-s 00000000 zz:1a 5 /bad-hex", ID{}, false},
		{"short line", ID{}, false},
		{"", ID{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMapsLine([]byte(tt.line))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseMapsLine(%q) = %v, %v; want %v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}
