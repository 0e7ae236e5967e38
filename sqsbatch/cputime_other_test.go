//go:build !unix

package sqsbatch_test

import "time"

// cpuTime is not measured here; BenchmarkWorstCaseAdapter reports 0.
func cpuTime() time.Duration { return 0 }
