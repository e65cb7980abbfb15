package gpu

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// Without a GPU, system RAM, limited by the container's
// cgroup (gopsutil alone reports the host's memory).
func TestSystemRAMWithCgroupLimits(t *testing.T) {
	const host, hostAvail = 64 * gb, 40 * gb
	tests := []struct {
		name string
		fs   fstest.MapFS
		want Device
	}{
		{
			name: "no cgroup files: host memory",
			fs:   fstest.MapFS{},
			want: Device{Vendor: "cpu", Name: "system RAM", Total: host, Used: host - hostAvail, Free: hostAvail},
		},
		{
			name: "cgroup v2 container (namespaced root)",
			fs: fstest.MapFS{
				"proc/self/cgroup":             file("0::/\n"),
				"sys/fs/cgroup/memory.max":     file("8589934592\n"),
				"sys/fs/cgroup/memory.current": file("3221225472\n"),
				"sys/fs/cgroup/memory.stat":    file("anon 1073741824\nfile 2147483648\ninactive_file 1073741824\nactive_file 1073741824\n"),
			},
			// used = 3 GiB − 1 GiB inactive page cache
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 8 * gb, Used: 2 * gb, Free: 6 * gb},
		},
		{
			name: "cgroup v2 unlimited",
			fs: fstest.MapFS{
				"proc/self/cgroup":             file("0::/\n"),
				"sys/fs/cgroup/memory.max":     file("max\n"),
				"sys/fs/cgroup/memory.current": file("3221225472\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM", Total: host, Used: host - hostAvail, Free: hostAvail},
		},
		{
			name: "cgroup v2 limit on a parent binds",
			fs: fstest.MapFS{
				"proc/self/cgroup": file("0::/system.slice/ollama.service\n"),
				"sys/fs/cgroup/system.slice/ollama.service/memory.max":     file("max\n"),
				"sys/fs/cgroup/system.slice/ollama.service/memory.current": file("1073741824\n"),
				"sys/fs/cgroup/system.slice/memory.max":                    file("17179869184\n"),
				"sys/fs/cgroup/system.slice/memory.current":                file("12884901888\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 16 * gb, Used: 12 * gb, Free: 4 * gb},
		},
		{
			name: "cgroup v2 tightest of two limits",
			fs: fstest.MapFS{
				"proc/self/cgroup":                 file("0::/a/b\n"),
				"sys/fs/cgroup/a/b/memory.max":     file("34359738368\n"), // 32 GiB, 31 used
				"sys/fs/cgroup/a/b/memory.current": file("33285996544\n"),
				"sys/fs/cgroup/a/memory.max":       file("21474836480\n"), // 20 GiB, 10 used
				"sys/fs/cgroup/a/memory.current":   file("10737418240\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 32 * gb, Used: 31 * gb, Free: 1 * gb},
		},
		{
			name: "cgroup v1 container",
			fs: fstest.MapFS{
				"proc/self/cgroup":                           file("12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes": file("4294967296\n"),
				"sys/fs/cgroup/memory/memory.usage_in_bytes": file("2147483648\n"),
				"sys/fs/cgroup/memory/memory.stat":           file("cache 1073741824\ninactive_file 100\ntotal_inactive_file 536870912\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 4 * gb, Used: 1536 * mib, Free: 2560 * mib},
		},
		{
			name: "cgroup v1 unlimited sentinel",
			fs: fstest.MapFS{
				"proc/self/cgroup":                           file("4:memory:/\n"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
				"sys/fs/cgroup/memory/memory.usage_in_bytes": file("2147483648\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM", Total: host, Used: host - hostAvail, Free: hostAvail},
		},
		{
			name: "cgroup v1 with other controllers on the same line",
			fs: fstest.MapFS{
				"proc/self/cgroup": file("3:cpu,memory:/job\n"),
				"sys/fs/cgroup/memory/job/memory.limit_in_bytes": file("2147483648\n"),
				"sys/fs/cgroup/memory/job/memory.usage_in_bytes": file("1073741824\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 2 * gb, Used: 1 * gb, Free: 1 * gb},
		},
		{
			name: "limit above the host: host total, cgroup free if lower",
			fs: fstest.MapFS{
				"proc/self/cgroup":             file("0::/\n"),
				"sys/fs/cgroup/memory.max":     file("137438953472\n"), // 128 GiB
				"sys/fs/cgroup/memory.current": file("107374182400\n"), // 100 GiB
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: host, Used: host - 28*gb, Free: 28 * gb},
		},
		{
			name: "junk files are ignored",
			fs: fstest.MapFS{
				"proc/self/cgroup":             file("garbage\n::\n0::/\n"),
				"sys/fs/cgroup/memory.max":     file("lots\n"),
				"sys/fs/cgroup/memory.current": file("-5\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM", Total: host, Used: host - hostAvail, Free: hostAvail},
		},
		{
			name: "usage unreadable: the limit still bounds the total",
			fs: fstest.MapFS{
				"proc/self/cgroup":         file("0::/\n"),
				"sys/fs/cgroup/memory.max": file("8589934592\n"),
			},
			want: Device{Vendor: "cpu", Name: "system RAM (cgroup limit)", Total: 8 * gb, Used: 0, Free: 8 * gb},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewSystem(tt.fs)
			p.host = func(context.Context) (uint64, uint64, error) { return host, hostAvail, nil }
			got, err := p.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Device{tt.want}, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSystemHostError(t *testing.T) {
	p := NewSystem(fstest.MapFS{})
	p.host = func(context.Context) (uint64, uint64, error) { return 0, 0, errors.New("no /proc/meminfo") }
	if _, err := p.Devices(context.Background()); err == nil {
		t.Error("no error")
	}
}

// The real probe on this machine reports something sensible.
func TestSystemReal(t *testing.T) {
	got, err := NewSystem(nil).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Total == 0 || got[0].Used+got[0].Free != got[0].Total {
		t.Errorf("devices = %+v", got)
	}
	t.Logf("%+v", got[0])
}
