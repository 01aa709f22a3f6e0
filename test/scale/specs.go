package scale

import "fmt"

// Huge is issue 20's large cluster: Full's data shape with ten times the TLS Secrets (100,000 in
// 100 namespaces, plus the same 1,000 Opaque ones).
var Huge = Spec{TLSSecrets: 100000, Namespaces: 100, OpaqueSecrets: 1000, OpaqueBytes: 20 << 10}

// Modes of CERTDRIFT_SCALE: unset runs Small (what CI runs: the same code paths at 300 Secrets),
// "full" issue 4's 10,000 Secrets, "100k" issue 20's 100,000.
const (
	ModeSmall = ""
	ModeFull  = "full"
	ModeHuge  = "100k"
)

// SpecFor is the data set of a CERTDRIFT_SCALE value; any other value is an error, so that a
// typo never silently measures the small set.
func SpecFor(mode string) (Spec, error) {
	switch mode {
	case ModeSmall:
		return Small, nil
	case ModeFull:
		return Full, nil
	case ModeHuge:
		return Huge, nil
	}
	return Spec{}, fmt.Errorf("CERTDRIFT_SCALE=%q: want unset, %q (10,000 Secrets) or %q (100,000)", mode, ModeFull, ModeHuge)
}

// SyncTimeoutEnv is what the certdrift children of a mode are given for their initial list:
// certdrift's default (30s) everywhere but at 100,000 Secrets, whose list took longer than that
// on the shared 2-core machine (the first 100k run failed there, docs/benchmarks.md).
func SyncTimeoutEnv(mode string) string {
	if mode == ModeHuge {
		return "CERTDRIFT_SYNC_TIMEOUT=10m"
	}
	return "CERTDRIFT_SYNC_TIMEOUT=30s"
}
