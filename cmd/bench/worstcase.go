package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// --- 6. Worst-case bodies: the fingerprint of a hostile 1 MiB body ---

const worstSection = "6. Worst-case 1 MiB bodies: fingerprint"

// Targets: the issue that made the fingerprint linear (18) set them.
const (
	worstCPUTarget   = 20.0 // ms of CPU per fingerprint
	worstAllocTarget = 4    // bytes allocated, times the body's size
)

// worstSample is one shape's measurements from go test -bench WorstCase.
type worstSample struct {
	cpuNs, wallNs, bytes []float64
	size                 float64 // bytes per op (the body)
}

// readWorstCase reads BenchmarkWorstCase/<phase>/<shape> lines.
func readWorstCase(path string) (map[string]*worstSample, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	samples := map[string]*worstSample{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		name, ok := strings.CutPrefix(fields0(fields), "BenchmarkWorstCase/")
		if !ok || len(fields) < 4 {
			continue
		}
		_, shape, _ := strings.Cut(name, "/")
		if i := strings.LastIndexByte(shape, '-'); i > 0 {
			shape = shape[:i] // the GOMAXPROCS suffix
		}
		s := samples[shape]
		if s == nil {
			s = &worstSample{}
			samples[shape] = s
			order = append(order, shape)
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, _ := strconv.ParseFloat(fields[i], 64)
			switch fields[i+1] {
			case "ns/op":
				s.wallNs = append(s.wallNs, v)
			case "cpu-ns/op":
				s.cpuNs = append(s.cpuNs, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "MB/s":
				if wall := s.wallNs[len(s.wallNs)-1]; wall > 0 {
					s.size = v * 1e6 * wall / 1e9
				}
			}
		}
	}
	return samples, order, sc.Err()
}

func fields0(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// worstCaseFigures makes section 6's figures and its detailed table from the
// after and before runs.
func worstCaseFigures(afterPath, beforePath string) ([]figure, string, error) {
	if afterPath == "" || beforePath == "" {
		return nil, "", errors.New("-worstcase-after and -worstcase-before are required")
	}
	after, order, err := readWorstCase(afterPath)
	if err != nil {
		return nil, "", err
	}
	before, _, err := readWorstCase(beforePath)
	if err != nil {
		return nil, "", err
	}
	var figs []figure
	var md strings.Builder
	md.WriteString("| shape (1 MiB) | before: CPU | before: allocated | after: CPU | after: allocated | after: wall |\n|---|---|---|---|---|---|\n")
	for _, shape := range order {
		a, b := after[shape], before[shape]
		if b == nil || len(a.cpuNs) == 0 || len(b.cpuNs) == 0 {
			return nil, "", fmt.Errorf("worst case %q: missing before or after figures", shape)
		}
		name := strings.ReplaceAll(shape, "_", " ")
		ac, ab, bc, bb := stats(a.cpuNs), stats(a.bytes), stats(b.cpuNs), stats(b.bytes)
		ok := ac.med/1e6 <= worstCPUTarget && ab.med <= worstAllocTarget*a.size
		figs = append(figs, figure{worstSection, name,
			fmt.Sprintf("%.1f ms CPU (%.1f–%.1f), %s allocated; before: %.0f ms, %s", ac.med/1e6, ac.min/1e6, ac.max/1e6, bytesText(ab.med), bc.med/1e6, bytesText(bb.med)),
			fmt.Sprintf("≤ %.0f ms, ≤ %d× the body", worstCPUTarget, worstAllocTarget), verdict(ok),
			fmt.Sprintf("go test -bench WorstCase: CPU time per fingerprint (getrusage), median (min–max) of %d runs after and %d before; bytes allocated per fingerprint", len(a.cpuNs), len(b.cpuNs))})
		fmt.Fprintf(&md, "| %s | %.0f ms | %s | %.1f ms | %s | %.1f ms |\n", name, bc.med/1e6, bytesText(bb.med), ac.med/1e6, bytesText(ab.med), stats(a.wallNs).med/1e6)
	}
	return figs, md.String(), nil
}

func bytesText(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
