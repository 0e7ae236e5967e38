package canonjson

import "testing"

// BenchmarkIndex runs the first pass alone over a 1 MiB body of each
// worst-case shape: the measure for a change to index, which
// BenchmarkWorstCase's figures (both passes) would blur. Like
// BenchmarkWorstCase it reports the process's CPU time per run too.
//
//	go test -run '^$' -bench Index -benchtime 50x -count 10 ./internal/canonjson/
func BenchmarkIndex(b *testing.B) {
	const size = 1 << 20
	for _, s := range shapes {
		body := []byte(s.body(size))
		b.Run(benchName(s.name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			start := cpuTime()
			for b.Loop() {
				c := canon{src: body}
				c.opens, c.closes, c.members = c.ownOpens[:0], c.ownCloses[:0], c.ownMembers[:0]
				if err := c.index(); (err != nil) != s.deep {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
