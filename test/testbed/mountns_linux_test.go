package testbed

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certdrift/certdrift/test/atomicdir"
	corev1 "k8s.io/api/core/v1"
)

// TestEnvoyBinds runs a shell in the mount namespace an Envoy container of this pod would get
// (PathsMountNS) and checks what it sees: each volume at its mountPath with the kubelet's
// "..data" layout, a Secret volume mounted inside the ConfigMap's directory on top of it,
// Secret/ConfigMap volumes read-only whatever readOnly says while an emptyDir is writable, and a
// subPath file that keeps the version current at start after the volume's "..data" swap, while
// the directory mount shows the new one (the control). Mount targets live under a temporary
// directory, so the host gets no mount points outside it.
func TestEnvoyBinds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestEnvoyBinds needs root (a mount namespace, CAP_SYS_ADMIN), as the testbed's mountns mode does: run the tests as root")
	}
	root := t.TempDir()
	pod := filepath.Join(root, "pod")
	ctr := filepath.Join(root, "ctr") // stands for the container's "/"
	w := &podWorker{dir: pod}
	if err := atomicdir.Write(w.volumeDir("config"), map[string][]byte{"envoy.yaml": []byte("admin: {}\n")}); err != nil {
		t.Fatal(err)
	}
	if err := atomicdir.Write(w.volumeDir("tls"), map[string][]byte{"tls.crt": []byte("v1"), "tls.key": []byte("k1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(w.volumeDir("scratch"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &container{
		w:   w,
		dir: filepath.Join(pod, "containers", "envoy"),
		spec: corev1.Container{Name: "envoy", VolumeMounts: []corev1.VolumeMount{
			// Listed deepest first: the binds must still be made shallowest first.
			{Name: "tls", MountPath: ctr + "/etc/envoy/tls"}, // readOnly unset: a Secret is read-only anyway
			{Name: "config", MountPath: ctr + "/etc/envoy", ReadOnly: true},
			{Name: "tls", MountPath: ctr + "/pinned/tls.crt", SubPath: "tls.crt"},
			{Name: "scratch", MountPath: ctr + "/scratch"},
		}},
		volumes: map[string]corev1.Volume{
			"config":  {Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
			"tls":     {Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
			"scratch": {Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	binds, err := c.binds("/usr/bin/envoy")
	if err != nil {
		t.Fatal(err)
	}
	ro := map[string]bool{}
	for _, b := range binds {
		ro[strings.TrimPrefix(b.target, ctr)] = b.readOnly
	}
	if !ro["/etc/envoy/tls"] || !ro["/etc/envoy"] || !ro["/pinned/tls.crt"] || ro["/scratch"] {
		t.Errorf("read-only binds %v: want the Secret and ConfigMap mounts read-only and the emptyDir writable", ro)
	}

	// The shell prints what it sees before and after the test swaps the volume's "..data".
	script := `show() { for f in etc/envoy/envoy.yaml etc/envoy/tls/tls.crt etc/envoy/tls/..data/tls.crt pinned/tls.crt; do printf '%s=%s\n' "$f" "$(cat "$C/$f" 2>&1)"; done; }
show
touch "$C/etc/envoy/tls/new" 2>/dev/null && echo tls-writable || echo tls-readonly
touch "$C/etc/envoy/new" 2>/dev/null && echo config-writable || echo config-readonly
touch "$C/scratch/new" 2>/dev/null && echo scratch-writable || echo scratch-readonly
echo swap
read x
show
`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "C=" + ctr}
	cmd.SysProcAttr = childAttrs()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Not cmd.StdoutPipe: startInMountNamespace calls cmd.Wait as soon as the shell exits, and
	// Wait closes that pipe, so its last lines could be lost before they are read (seen once
	// under load). With a writer of ours, Wait returns only after all output is copied; the pipe
	// is closed after that.
	stdout, out := io.Pipe()
	cmd.Stdout = out
	exited, err := startInMountNamespace(cmd, binds)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		err := <-exited
		out.Close()
		waited <- err
	}()
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "swap" {
			if err := atomicdir.Write(w.volumeDir("tls"), map[string][]byte{"tls.crt": []byte("v2"), "tls.key": []byte("k2")}); err != nil {
				t.Error(err)
			}
			io.WriteString(stdin, "go\n")
			stdin.Close()
		}
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("shell in the mount namespace: %v\n%s", err, strings.Join(lines, "\n"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shell in the mount namespace did not finish")
	}
	want := []string{
		"etc/envoy/envoy.yaml=admin: {}",
		"etc/envoy/tls/tls.crt=v1",
		"etc/envoy/tls/..data/tls.crt=v1",
		"pinned/tls.crt=v1",
		"tls-readonly", "config-readonly", "scratch-writable",
		"swap",
		"etc/envoy/envoy.yaml=admin: {}",
		"etc/envoy/tls/tls.crt=v2", // the directory mount follows the swap
		"etc/envoy/tls/..data/tls.crt=v2",
		"pinned/tls.crt=v1", // the subPath bind does not
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("the container saw:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	// The host sees only empty mount points, never the volumes.
	if entries, err := os.ReadDir(filepath.Join(ctr, "etc", "envoy")); err != nil || len(entries) != 0 {
		t.Errorf("host mount point %s/etc/envoy: %d entries (%v), want an empty directory", ctr, len(entries), err)
	}
}

// TestEnvoyBindsRefuse: mounts the mount namespace cannot honour fail with a message, never a
// container running with the wrong files.
func TestEnvoyBindsRefuse(t *testing.T) {
	pod := t.TempDir()
	w := &podWorker{dir: pod}
	if err := atomicdir.Write(w.volumeDir("tls"), map[string][]byte{"tls.crt": []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(w.volumeDir("tls"), "escape")); err != nil {
		t.Fatal(err)
	}
	vols := map[string]corev1.Volume{"tls": {Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}}}
	for _, tc := range []struct {
		name string
		vm   corev1.VolumeMount
		want string
	}{
		{"HidesContainerDir", corev1.VolumeMount{Name: "tls", MountPath: pod}, "would hide"},
		{"HidesBinary", corev1.VolumeMount{Name: "tls", MountPath: "/usr/bin"}, "would hide /usr/bin/envoy"},
		{"Root", corev1.VolumeMount{Name: "tls", MountPath: "/"}, "absolute path other than /"},
		{"Relative", corev1.VolumeMount{Name: "tls", MountPath: "certs"}, "absolute path"},
		{"NoVolume", corev1.VolumeMount{Name: "nope", MountPath: "/certs"}, "does not have"},
		{"SubPathDotDot", corev1.VolumeMount{Name: "tls", MountPath: "/certs", SubPath: "../x"}, "without '..'"},
		{"SubPathEscapes", corev1.VolumeMount{Name: "tls", MountPath: "/certs", SubPath: "escape"}, "outside its volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &container{w: w, dir: filepath.Join(pod, "containers", "envoy"), volumes: vols,
				spec: corev1.Container{Name: "envoy", VolumeMounts: []corev1.VolumeMount{tc.vm}}}
			_, err := c.binds("/usr/bin/envoy")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("binds(%+v) = %v, want an error containing %q", tc.vm, err, tc.want)
			}
		})
	}
}
