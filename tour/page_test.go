package tour

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tinyvmm/bench/device"
	"tinyvmm/internal/godecl"
	"tinyvmm/internal/scratchns"
	"tinyvmm/virtionet"
)

// cannedSeeds are numbers of one real run of RunSeeds.
func cannedSeeds() Seeds {
	return Seeds{
		Weights: []device.LatencyRow{
			{Weight: 0, MinMs: 0.88, AvgMs: 4.07, MaxMs: 19.05, P99Ms: 19.05, TxPPS: 243887, Samples: 86},
			{Weight: 64, MinMs: 0.88, AvgMs: 2.62, MaxMs: 13.71, P99Ms: 9.89, TxPPS: 223919, Samples: 100},
			{Weight: 256, MinMs: 0.98, AvgMs: 2.73, MaxMs: 8.91, P99Ms: 8.91, TxPPS: 222941, Samples: 99},
		},
		Batches: []device.BatchRow{
			{Backend: "tap", Batch: 1, PPS: 142209, NsPerFrame: 2387, FramesPerBatch: 1},
			{Backend: "tap", Batch: 64, PPS: 173927, NsPerFrame: 1896, FramesPerBatch: 64},
			{Backend: "tap", Batch: 1, Mergeable: true, PPS: 196366, NsPerFrame: 1766, FramesPerBatch: 1},
			{Backend: "tap", Batch: 64, Mergeable: true, PPS: 287060, NsPerFrame: 1446, FramesPerBatch: 61.9},
			{Backend: "af_packet", Batch: 1, PPS: 240977, NsPerFrame: 2376, FramesPerBatch: 1},
			{Backend: "af_packet", Batch: 64, PPS: 343260, NsPerFrame: 1537, FramesPerBatch: 64},
			{Backend: "af_packet", Batch: 1, Mergeable: true, PPS: 269110, NsPerFrame: 2373, FramesPerBatch: 1},
			{Backend: "af_packet", Batch: 64, Mergeable: true, PPS: 328770, NsPerFrame: 1512, FramesPerBatch: 64},
		},
		Thresholds: []device.ThresholdRow{
			{Threshold: 1, PPS: 415000, NsPerFrame: 1959}, {Threshold: 2, PPS: 486000, NsPerFrame: 1890},
			{Threshold: 4, PPS: 569000, NsPerFrame: 1728}, {Threshold: 8, PPS: 529238, NsPerFrame: 1766},
			{Threshold: 16, PPS: 619555, NsPerFrame: 1538}, {Threshold: 32, PPS: 525000, NsPerFrame: 1816},
			{Threshold: 64, PPS: 478000, NsPerFrame: 1715},
		},
		Opt:  SeedOptions{LatencyRun: 800 * time.Millisecond, BatchRun: 400 * time.Millisecond, ThresholdRun: 300 * time.Millisecond},
		Took: 9 * time.Second,
	}
}

func cannedPage(t *testing.T) Page {
	t.Helper()
	evs, _ := ParseTrace(strings.NewReader(pingTrace))
	st, err := Tell(evs, pingStats())
	if err != nil {
		t.Fatal(err)
	}
	s := cannedSeeds()
	return Page{
		Run: Result{Events: evs, Stats: pingStats(), Elapsed: 2 * time.Second,
			Ping: []string{"64 bytes from 10.0.2.1: seq=0 ttl=64 time=1.234 ms", "1 packets transmitted, 1 packets received, 0% packet loss"}},
		Story: st, Nested: true, Seeds: &s,
	}
}

func TestRenderSeeds(t *testing.T) {
	var b strings.Builder
	RenderSeeds(&b, cannedSeeds())
	text := b.String()
	flat := strings.Join(strings.Fields(text), " ") // prose, unwrapped
	for _, want := range []string{
		"== 1/3  Tx weights", "== 2/3  Rx batching", "== 3/3  The notification threshold",
		"waited 2.73 ms on average (p99 8.91)", "1.5x sooner", "91% of its rate",
		"tap with mergeable buffers: 287060 frames/s against 196366 one at a time (+46%)",
		"peaked at threshold 16, 619555 frames/s, 1.49x threshold 1", "the default, 8, ran at 529238",
		"  threshold     1     2     4     8    16    32    64",
		"  none         0.88    4.07   19.05   19.05       243887       86",
		"  af_packet  mergeable",
		"read: virtionet/rx.go worker.handleRx, worker.rxBatch",
	} {
		if !strings.Contains(text, want) && !strings.Contains(flat, want) {
			t.Errorf("the screens lack %q:\n%s", want, text)
		}
	}
	for i, l := range strings.Split(text, "\n") {
		if len(l) > Width {
			t.Errorf("line %d is %d columns: %q", i+1, len(l), l)
		}
	}
}

// A failed run is said, not hidden behind a finding.
func TestRenderSeedsFailed(t *testing.T) {
	s := cannedSeeds()
	s.Weights = s.Weights[1:]
	s.Batches = nil
	s.Failed = []string{"seed 002 weight 0 run 1: no echo answered in 800ms"}
	var b strings.Builder
	RenderSeeds(&b, s)
	if n := strings.Count(b.String(), "A run failed"); n != 2 || !strings.Contains(b.String(), "* run failed: seed 002 weight 0") {
		t.Errorf("%d 'A run failed' findings, want 2:\n%s", n, b.String())
	}
}

// Where batching gained little, the screen says so instead of praising it.
func TestBatchScreenLittleGain(t *testing.T) {
	s := cannedSeeds()
	for i := range s.Batches {
		if s.Batches[i].Batch == 64 {
			s.Batches[i].PPS = s.Batches[i-1].PPS * 0.999
		}
	}
	sc := s.batchScreen()
	if !strings.Contains(sc.Finding, "batching gained at most +0%") || sc.Table[1][4] != "+0%" {
		t.Errorf("finding %q, first gain %q", sc.Finding, sc.Table[1][4])
	}
}

// TestScreensNameWhatExists checks every "file.go Func" the screens tell
// the reader to read.
func TestScreensNameWhatExists(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "virtionet", "worker.go")); err != nil {
		t.Skip("no sources here (the nested L1 carries only binaries)")
	}
	checked := 0
	for _, sc := range cannedSeeds().Screens() {
		for _, where := range sc.Where {
			file, names, _ := strings.Cut(where, " ")
			decls, err := godecl.Declared(filepath.Join(root, file))
			if err != nil {
				t.Errorf("%q: %v", where, err)
				continue
			}
			for _, n := range strings.Split(names, ", ") {
				if !decls[n] {
					t.Errorf("%q: %s does not declare %s", where, file, n)
				}
				checked++
			}
		}
	}
	if checked < 8 {
		t.Errorf("only %d names checked", checked)
	}
}

// pageText is the page's text as a reader sees it: tags out, entities in.
func pageText(html string) string {
	html = regexp.MustCompile(`(?s)<style>.*?</style>`).ReplaceAllString(html, "")
	html = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(html, " ")
	html = strings.NewReplacer("&#39;", "'", "&#34;", `"`, "&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(html)
	return strings.Join(strings.Fields(html), " ")
}

// plotTextProbe finds the smallest font size of the plots' text as laid
// out: the SVG's font size scaled by the width the SVG is drawn at.
const plotTextProbe = `<script>
let px = 1e9;
for (const t of document.querySelectorAll("figure svg text")) {
  const svg = t.ownerSVGElement;
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  px = Math.min(px, parseFloat(getComputedStyle(t).fontSize) * scale);
}
document.body.setAttribute("data-plot-text-px", px < 1e9 ? px.toFixed(1) : "0");
</script>`

// pageWants are texts the page must show: the story, the numbers, the
// findings.
var pageWants = []string{
	Title, "Guest → host: the echo request", "Host → guest: the echo reply",
	"guest$ 64 bytes from 10.0.2.1: seq=0 ttl=64 time=1.234 ms",
	"virtionet/worker.go worker.onKick", "counter: tx frames 1, bytes 98", "+367 us", "420 us",
	"nested L1", "1/3 Tx weights", "2/3 Rx batching", "3/3 The notification threshold",
	"1.5x sooner", "peaked at threshold 16", "343260", End,
}

func TestWriteHTML(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, cannedPage(t)); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if n := strings.Count(page, "<figure role=\"img\" aria-label=\"Seed 00"); n != 3 || strings.Count(page, "<svg ") != 3 || strings.Count(page, "</svg>") != 3 {
		t.Errorf("%d plots, %d <svg, %d </svg>; want 3 inline SVG plots", n, strings.Count(page, "<svg "), strings.Count(page, "</svg>"))
	}
	// Self-contained: nothing to fetch.
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:|//)|@import|url\(`).FindString(page); m != "" {
		t.Errorf("the page fetches something: %q", m)
	}
	text := pageText(page)
	for _, want := range pageWants {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("the page has a script")
	}
}

// chromium is the headless browser of Debian's chromium package.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on CI: .ci/run installs Debian's chromium")
	}
	t.Skip("no chromium here (Debian package chromium; .ci/run installs it): the page is not rendered")
	return ""
}

// TestPageInChromium renders the page in headless Chromium: the DOM it
// built holds the story's text, and its screenshot is a PNG that is not
// blank (text and plots drawn on the background).
func TestPageInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tour.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, cannedPage(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Its own profile and home, no sandbox (root), no network.
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--hide-scrollbars",
			"--proxy-server=127.0.0.1:9", "--disable-background-networking", "--disable-component-update"}, args...)
		cmd := exec.CommandContext(ctx, bin, append(args, "file://"+file)...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		cmd.Dir = dir
		cmd.WaitDelay = 10 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
		}
		return out
	}

	// The page as a reader at 1000 px sees it: a script (the test's, not
	// the page's) measures, after layout, the smallest text of any plot
	// and writes it into the DOM that --dump-dom prints.
	withProbe := bytes.Replace(b.Bytes(), []byte("</body>"), []byte(plotTextProbe+"</body>"), 1)
	if err := os.WriteFile(file, withProbe, 0o644); err != nil {
		t.Fatal(err)
	}
	dom := string(run("--dump-dom", "--window-size=1000,3000"))
	m := regexp.MustCompile(`data-plot-text-px="([0-9.]+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatal("the page's plots were not measured: no data-plot-text-px in the DOM")
	}
	if px, _ := strconv.ParseFloat(m[1], 64); px < 12 {
		t.Errorf("at 1000 px the smallest plot text is %.1f px high, want at least 12", px)
	} else {
		t.Logf("at 1000 px the smallest plot text is %.1f px", px)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	text := pageText(dom)
	for _, want := range pageWants {
		if !strings.Contains(text, want) {
			t.Errorf("the DOM Chromium built lacks %q", want)
		}
	}

	shot := filepath.Join(dir, "shot.png")
	run("--screenshot="+shot, "--window-size=1000,3000")
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != 1000 || sz.Y != 3000 {
		t.Errorf("screenshot is %v, want 1000x3000", sz)
	}
	// Count the pixels that differ from the background: text, the
	// console's dark box, the plots' colours.
	bg := img.At(img.Bounds().Max.X-1, img.Bounds().Max.Y-1)
	ink, dark, blue := 0, 0, 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
			c := img.At(x, y)
			if c == bg {
				continue
			}
			ink++
			r, g, bl, _ := c.RGBA()
			if r < 0x4000 && g < 0x4000 && bl < 0x4000 {
				dark++
			}
			if bl > 0x9000 && r < 0x5000 && g > 0x6000 && g < 0xa000 {
				blue++ // the plots' and headings' blue (31, 119, 180)
			}
		}
	}
	total := img.Bounds().Dx() * img.Bounds().Dy() / 4
	t.Logf("screenshot %s: %d bytes, %.1f%% of the sampled pixels off the background, %d dark, %d blue",
		img.Bounds().Size(), len(raw), 100*float64(ink)/float64(total), dark, blue)
	if ink < total/50 || dark < 1000 || blue < 200 {
		t.Errorf("the screenshot looks blank: %d of %d sampled pixels off the background, %d dark, %d blue", ink, total, dark, blue)
	}
	if os.Getenv("TOUR_SCREENSHOT") != "" {
		os.WriteFile(os.Getenv("TOUR_SCREENSHOT"), raw, 0o644)
	}
}

// The live runs, shortened: each table gets its rows and measures.
func TestRunSeedsLive(t *testing.T) {
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	s, err := RunSeeds(SeedOptions{LatencyRun: 200 * time.Millisecond, BatchRun: 100 * time.Millisecond, ThresholdRun: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The weights, then the default weight with tinyvmm's tx yield.
	if len(s.Weights) != len(tourWeights)+1 || len(s.Batches) != 8 || len(s.Thresholds) != len(tourThresholds) {
		t.Fatalf("rows: %d weights, %d batches, %d thresholds", len(s.Weights), len(s.Batches), len(s.Thresholds))
	}
	// With no packet weight (the seed's Origin) a flood may starve rx for
	// a whole short run on a loaded machine: that is the seed's point, so
	// such a run is no failure of the tour.
	for _, f := range s.Failed {
		if strings.Contains(f, "weight Origin") {
			t.Logf("starved, as the seed shows: %s", f)
			continue
		}
		t.Errorf("failed run: %q", f)
	}
	for _, r := range s.Weights {
		if (r.Samples == 0 && r.Weight != 0) || r.TxPPS < 0 || (r.Samples > 0 && r.TxPPS == 0) {
			t.Errorf("weight row %+v", r)
		}
	}
	if last := s.Weights[len(s.Weights)-1]; last.Weight != virtionet.DefaultWeightPkts || last.Yield != virtionet.DefaultTxYieldPkts {
		t.Errorf("the last weight row is %+v, want the default weight with the default yield", last)
	}
	for _, r := range s.Batches {
		if r.PPS <= 0 {
			t.Errorf("batch row %+v", r)
		}
	}
	for _, r := range s.Thresholds {
		if r.PPS <= 0 {
			t.Errorf("threshold row %+v", r)
		}
	}
	var b strings.Builder
	RenderSeeds(&b, s)
	if strings.Contains(b.String(), "A run failed") {
		t.Errorf("screens:\n%s", b.String())
	}
	t.Logf("took %v", s.Took)
}

// withSpread gives every canned row a spread of ±frac around its median.
func withSpread(s Seeds, frac float64) Seeds {
	around := func(v float64) device.Spread { return device.Spread{Min: v * (1 - frac), Max: v * (1 + frac)} }
	s.Weights = append([]device.LatencyRow(nil), s.Weights...)
	s.Batches = append([]device.BatchRow(nil), s.Batches...)
	s.Thresholds = append([]device.ThresholdRow(nil), s.Thresholds...)
	for i := range s.Weights {
		s.Weights[i].AvgMsRange = around(s.Weights[i].AvgMs)
	}
	for i := range s.Batches {
		s.Batches[i].PPSRange = around(s.Batches[i].PPS)
		s.Batches[i].NsRange = around(s.Batches[i].NsPerFrame)
	}
	for i := range s.Thresholds {
		s.Thresholds[i].PPSRange = around(s.Thresholds[i].PPS)
		s.Thresholds[i].NsRange = around(s.Thresholds[i].NsPerFrame)
	}
	return s
}

// Where the runs' spreads overlap, a screen says the run cannot tell the
// settings apart instead of teaching its noise, and points to the CPU
// time per frame, which a sender-bound run still shows.
func TestScreensSayInconclusive(t *testing.T) {
	for _, sc := range withSpread(cannedSeeds(), 0.4).Screens() {
		if !strings.HasPrefix(sc.Finding, "Inconclusive") {
			t.Errorf("%s: spreads of ±40%% overlap, yet the finding is %q", sc.Title, sc.Finding)
		}
	}
	batch := withSpread(cannedSeeds(), 0.4).batchScreen()
	if !strings.Contains(batch.Finding, "CPU time per frame: 1766 ns with batch 1, 1446 ns with batch 64 (-18%)") {
		t.Errorf("the batch finding does not read the CPU per frame: %q", batch.Finding)
	}
	if batch.Table[1][4] != "+22%?" {
		t.Errorf("a gain within the spread is %q, want it marked +22%%?", batch.Table[1][4])
	}
}

// Where the spreads are narrow, the findings stand, and thresholds the
// runs cannot tell from the peak are named.
func TestScreensWithNarrowSpread(t *testing.T) {
	s := withSpread(cannedSeeds(), 0.01)
	for _, sc := range s.Screens() {
		if strings.Contains(sc.Finding, "Inconclusive") {
			t.Errorf("%s: spreads of ±1%% do not overlap, yet %q", sc.Title, sc.Finding)
		}
	}
	s.Thresholds[2].PPSRange = device.Spread{Min: 560000, Max: 615000} // 4 reaches the peak's (16) spread
	thr := s.thresholdScreen()
	if !strings.Contains(thr.Finding, "cannot tell threshold 4 from the peak") {
		t.Errorf("threshold finding %q", thr.Finding)
	}
	var b strings.Builder
	writeTable(&b, thr.Table)
	if !strings.Contains(b.String(), "spread") || !strings.Contains(b.String(), "±1%") {
		t.Errorf("the threshold table shows no spread:\n%s", b.String())
	}
}
