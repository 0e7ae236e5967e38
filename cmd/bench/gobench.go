package main

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// procsSuffix is the -GOMAXPROCS suffix go test adds to a benchmark's name.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// benchValues are one benchmark's values by unit (ns/op, B/op, ...), one
// per run.
type benchValues map[string][]float64

// readGoBench reads go test -bench output: each benchmark's values by
// unit, and the benchmarks in the order they first appear.
func readGoBench(path string) (map[string]benchValues, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	out := map[string]benchValues{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		name := procsSuffix.ReplaceAllString(fields[0], "")
		if out[name] == nil {
			out[name] = benchValues{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				out[name][fields[i+1]] = append(out[name][fields[i+1]], v)
			}
		}
	}
	return out, order, sc.Err()
}
