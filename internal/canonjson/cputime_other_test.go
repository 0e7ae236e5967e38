//go:build !unix

package canonjson

import "time"

// cpuTime is not measured here; BenchmarkWorstCase reports 0.
func cpuTime() time.Duration { return 0 }
