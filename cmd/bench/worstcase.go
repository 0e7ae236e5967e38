package main

import (
	"errors"
	"fmt"
	"strings"
)

// --- 7. Worst-case bodies: the fingerprint of a hostile 1 MiB body ---

const worstSection = "7. Worst-case 1 MiB bodies: fingerprint"

// Targets: the issue that made the fingerprint linear (18) set them.
const (
	worstCPUTarget   = 20.0 // ms of CPU per fingerprint
	worstAllocTarget = 4    // bytes allocated, times the body's size
)

// worstMissedNotes explains section 7's misses; the figures are
// regenerated with every run, this text is not.
const worstMissedNotes = `Section 7 (measured on 2026-12-01, on the 2-core machine shared with other work, load average
16 falling to 6): every shape is now linear in the body's size, and the shapes the old code made
quadratic (nested objects: 608 ms and 1 GB for 1,000 levels, 3.9 s and 4.9 GB for 5,000, which
is now refused in 0.1 ms) take a few milliseconds and no allocation. The shapes still above 20 ms
are token-dense: hundreds of thousands of small values, members or containers in one megabyte
(21 to 37 ms). They were linear before too (the "before" column: 40 to 120 ms); the work per
token is the syntax check, the writing and, for objects, sorting the members (n log n). The
widest costs are objects with hundreds of thousands of members (sorting), with escaped names
(each decoded to be compared). A faster path would skip re-writing containers whose raw text is
already canonical, but an attacker would choose a shape it does not cover; the bound that
matters holds: no shape costs more than tens of milliseconds or a few times its size.`

// adapterSection is section 7's second part: the same bodies through the
// SQS adapter (fingerprint, key decode, poison note), issue 29.
const adapterSection = "7. Worst-case 1 MiB bodies: through the SQS adapter"

// The adapter's targets (issue 29): its CPU against the fingerprint's for
// the same shape, its allocations against the body.
const (
	adapterCPUTarget   = 2.0 // times the fingerprint's CPU
	adapterAllocTarget = 4   // bytes allocated, times the body's size
)

// adapterMissedNotes explains the adapter's misses in section 7; the
// figures are regenerated with every run, this text is not.
const adapterMissedNotes = `Section 7, through the SQS adapter (measured on 2026-12-02, load average 5 to 10 on 2 cores): the
one shape above twice the fingerprint's CPU is the body nested 5,000 levels, which the fingerprint refuses
after reading its first 5 KB (0.1 ms). The adapter then stores a poison note, and the note holds the SHA-256
of the whole body, so that an operator can match it to a message: about 0.8 ms per MiB here, a fixed cost of
every poison note on a large body, which no decode can take back. It is 1 ms for 1 MiB in all, the same as
before issue 29 (this shape never reached the key's decode). Every other shape costs 1.1 to 1.7 times the
fingerprint, note included, and allocates at most its fingerprint's allocations plus a few KiB.`

// worstCaseFigures makes section 7's figures and its detailed tables from
// the fingerprint's after and before runs (canonjson) and, if given, the
// adapter's (sqsbatch's BenchmarkWorstCaseAdapter, after and at the commit
// before issue 29).
func worstCaseFigures(afterPath, beforePath, adapterAfterPath, adapterBeforePath string) ([]figure, string, error) {
	if afterPath == "" || beforePath == "" {
		return nil, "", errors.New("-worstcase-after and -worstcase-before are required")
	}
	if (adapterAfterPath == "") != (adapterBeforePath == "") {
		return nil, "", errors.New("-worstcase-adapter-after and -worstcase-adapter-before go together")
	}
	after, order, err := readGoBench(afterPath)
	if err != nil {
		return nil, "", err
	}
	before, _, err := readGoBench(beforePath)
	if err != nil {
		return nil, "", err
	}
	var figs []figure
	var md strings.Builder
	fpCPU := map[string]float64{} // the fingerprint's median CPU per shape, ns
	md.WriteString("| shape (1 MiB) | before: CPU | before: allocated | after: CPU | after: allocated | after: wall |\n|---|---|---|---|---|---|\n")
	var shapes []string
	for _, bench := range order {
		shape, ok := strings.CutPrefix(bench, "BenchmarkWorstCase/after/")
		if !ok {
			continue
		}
		shapes = append(shapes, shape)
		a, b := after[bench], before["BenchmarkWorstCase/before/"+shape]
		if len(a["cpu-ns/op"]) == 0 || len(b["cpu-ns/op"]) == 0 {
			return nil, "", fmt.Errorf("worst case %q: missing before or after figures", shape)
		}
		// The body's size: bytes per second times seconds per op.
		size := stats(a["MB/s"]).med * stats(a["ns/op"]).med / 1e3
		name := strings.ReplaceAll(shape, "_", " ")
		ac, ab, bc, bb := stats(a["cpu-ns/op"]), stats(a["B/op"]), stats(b["cpu-ns/op"]), stats(b["B/op"])
		fpCPU[shape] = ac.med
		ok = ac.med/1e6 <= worstCPUTarget && ab.med <= worstAllocTarget*size
		figs = append(figs, figure{worstSection, name,
			fmt.Sprintf("%.1f ms CPU (%.1f–%.1f), %s allocated; before: %.0f ms, %s", ac.med/1e6, ac.min/1e6, ac.max/1e6, bytesText(ab.med), bc.med/1e6, bytesText(bb.med)),
			fmt.Sprintf("≤ %.0f ms, ≤ %d× the body", worstCPUTarget, worstAllocTarget), verdict(ok),
			fmt.Sprintf("go test -bench WorstCase: CPU time per fingerprint (getrusage), median (min–max) of %d runs after and %d before; bytes allocated per fingerprint", len(a["cpu-ns/op"]), len(b["cpu-ns/op"]))})
		fmt.Fprintf(&md, "| %s | %.0f ms | %s | %.1f ms | %s | %.1f ms |\n", name, bc.med/1e6, bytesText(bb.med), ac.med/1e6, bytesText(ab.med), stats(a["ns/op"]).med/1e6)
	}
	if adapterAfterPath == "" {
		return figs, md.String(), nil
	}
	aAfter, _, err := readGoBench(adapterAfterPath)
	if err != nil {
		return nil, "", err
	}
	aBefore, _, err := readGoBench(adapterBeforePath)
	if err != nil {
		return nil, "", err
	}
	md.WriteString("\nThrough the SQS adapter (`BenchmarkWorstCaseAdapter` in `sqsbatch`): one record of the shape per batch through `Handler.Handle`, " +
		"with the default key expression, as the queue function runs it: the fingerprint, the key expression's decode and the poison note (KEY_MISSING: no shape has an id and an action). " +
		"*Before* is the adapter at the commit before issue 29 (the whole body decoded for the key expression), *after* the planned decode. " +
		"The last column is the adapter's CPU over the fingerprint's (the first table's *after*); the note's SHA-256 of the body (about 0.8 ms per MiB here) is part of it.\n\n")
	md.WriteString("| shape (1 MiB) | before: CPU | before: allocated | after: CPU | after: allocated | after: wall | after ÷ fingerprint |\n|---|---|---|---|---|---|---|\n")
	for _, shape := range shapes {
		a, b := aAfter["BenchmarkWorstCaseAdapter/"+shape], aBefore["BenchmarkWorstCaseAdapter/"+shape]
		if len(a["cpu-ns/op"]) == 0 || len(b["cpu-ns/op"]) == 0 {
			return nil, "", fmt.Errorf("worst case %q through the adapter: missing before or after figures", shape)
		}
		size := stats(a["MB/s"]).med * stats(a["ns/op"]).med / 1e3
		name := strings.ReplaceAll(shape, "_", " ")
		ac, ab, bc, bb := stats(a["cpu-ns/op"]), stats(a["B/op"]), stats(b["cpu-ns/op"]), stats(b["B/op"])
		ratio := ac.med / fpCPU[shape]
		ok := ratio <= adapterCPUTarget && ab.med <= adapterAllocTarget*size
		figs = append(figs, figure{adapterSection, name,
			fmt.Sprintf("%.1f ms CPU (%.1f–%.1f), %.1f× the fingerprint's, %s allocated; before: %.0f ms, %s", ac.med/1e6, ac.min/1e6, ac.max/1e6, ratio, bytesText(ab.med), bc.med/1e6, bytesText(bb.med)),
			fmt.Sprintf("≤ %.0f× the fingerprint's CPU, ≤ %d× the body", adapterCPUTarget, adapterAllocTarget), verdict(ok),
			fmt.Sprintf("go test -bench WorstCaseAdapter (sqsbatch): CPU time per record through Handler.Handle (getrusage), median (min–max) of %d runs after and %d before (at the commit before issue 29); bytes allocated per record", len(a["cpu-ns/op"]), len(b["cpu-ns/op"]))})
		fmt.Fprintf(&md, "| %s | %.0f ms | %s | %.1f ms | %s | %.1f ms | %.1f× |\n", name, bc.med/1e6, bytesText(bb.med), ac.med/1e6, bytesText(ab.med), stats(a["ns/op"]).med/1e6, ratio)
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
