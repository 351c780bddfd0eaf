package tour

import (
	"fmt"
	"html"
	"io"
	"strings"

	"tinyvmm/bench/device"
	"tinyvmm/internal/plotfmt"
)

// The tour's first and last lines.
const (
	Title = "tinyvmm tour: one ping from the guest (" + guestIP + ") to the host (" + hostIP + ")"
	End   = "End of the tour. GUIDE.md explains each stage, with the files to read."
)

// Page is the whole tour: the run, its story and the live runs.
type Page struct {
	Run   Result
	Story Story
	// Nested: the run was in the nested L1, which QEMU emulates.
	Nested bool
	Seeds  *Seeds // nil when they were not run
}

const nestedNote = "This run was in the nested L1, which QEMU emulates: its times are far above hardware's. The steps, their order and the counters carry over."

// WriteStory writes the packet's part of the tour as text: the ping, then
// the story, under Width columns.
func WriteStory(w io.Writer, p Page) {
	fmt.Fprintln(w, Title)
	fmt.Fprintln(w, "and back, told from the device's trace of this very run.")
	fmt.Fprintln(w)
	for _, l := range p.Run.Ping {
		fmt.Fprintf(w, "  guest$ %s\n", strings.TrimSpace(l))
	}
	fmt.Fprintf(w, "  (boot, ping and power-off took %.1f s; the device moved tx frames with %s)\n",
		p.Run.Elapsed.Seconds(), p.Run.Stats.IO)
	Render(w, p.Story)
	if p.Nested {
		fmt.Fprintln(w)
		for _, l := range wrap("("+nestedNote+")", Width) {
			fmt.Fprintln(w, l)
		}
	}
}

// WriteHTML writes the tour as one self-contained page: inline CSS, the
// plots as inline SVG, nothing fetched.
func WriteHTML(w io.Writer, p Page) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tinyvmm tour</title>
<style>` + pageCSS + `</style></head>
<body><main>
`)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=\"sub\">and back, told from the device's trace of this very run.</p>\n", esc(Title))
	b.WriteString("<pre class=\"console\">")
	for _, l := range p.Run.Ping {
		fmt.Fprintf(&b, "guest$ %s\n", esc(strings.TrimSpace(l)))
	}
	b.WriteString("</pre>\n")
	fmt.Fprintf(&b, "<p class=\"small\">Boot, ping and power-off took %.1f s; the device moved tx frames with %s.</p>\n",
		p.Run.Elapsed.Seconds(), esc(string(p.Run.Stats.IO)))
	if p.Nested {
		fmt.Fprintf(&b, "<p class=\"note\">%s</p>\n", esc(nestedNote))
	}
	n := 0
	part := func(title string, steps []Step) {
		fmt.Fprintf(&b, "<h2>%s</h2>\n<ol class=\"steps\" start=\"%d\">\n", esc(title), n+1)
		for _, st := range steps {
			n++
			took := `<span class="took untraced">untraced</span>`
			if st.Traced {
				took = `<span class="took">+` + esc(micros(st.Took)) + `</span>`
			}
			fmt.Fprintf(&b, "<li>%s<p>%s</p><p class=\"where\"><code>%s</code></p>", took, esc(st.Text), esc(st.Where))
			if st.Count != "" {
				fmt.Fprintf(&b, "<p class=\"count\">counter: %s</p>", esc(st.Count))
			}
			b.WriteString("</li>\n")
		}
		b.WriteString("</ol>\n")
	}
	part("Guest → host: the echo request", p.Story.Out)
	part("Host → guest: the echo reply", p.Story.In)
	fmt.Fprintf(&b, "<p>The device saw the round trip take <b>%s</b>, from the kick to the reply's interrupt. Counters are the run's totals (<code>tinyvmm run --stats</code>).</p>\n",
		esc(micros(p.Story.RoundTrip)))
	if len(p.Story.Notes) > 0 {
		b.WriteString("<ul class=\"notes\">\n")
		for _, note := range p.Story.Notes {
			fmt.Fprintf(&b, "<li>%s</li>\n", esc(note))
		}
		b.WriteString("</ul>\n")
	}
	if p.Seeds != nil {
		if err := seedsHTML(&b, *p.Seeds); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "<footer>%s</footer>\n</main></body></html>\n", esc(End))
	_, err := io.WriteString(w, b.String())
	return err
}

func seedsHTML(b *strings.Builder, s Seeds) error {
	esc := html.EscapeString
	fmt.Fprintf(b, "<h2>Three ideas, each with a live run</h2>\n<p>%s</p>\n", esc(seedsIntro(s)))
	// One plot per screen, each from bench/device's own plot of its table.
	tables := []*device.Results{{Seed002: s.Weights}, {Seed004: s.Batches}, {Seed000: s.Thresholds}}
	for i, sc := range s.Screens() {
		fmt.Fprintf(b, "<section>\n<h3>%d/3 %s</h3>\n<p class=\"from\">From: %s</p>\n", i+1, esc(sc.Title), esc(sc.From))
		for _, para := range sc.Idea {
			fmt.Fprintf(b, "<p>%s</p>\n", esc(para))
		}
		b.WriteString("<p class=\"where\">Read:")
		for _, where := range sc.Where {
			fmt.Fprintf(b, " <code>%s</code>", esc(where))
		}
		b.WriteString("</p>\n<table>\n")
		left := leftColumns(sc.Table)
		for r, row := range sc.Table {
			b.WriteString("<tr>")
			for c, cell := range row {
				tag, class := "td", ""
				if r == 0 || c == 0 && sc.RowHeads {
					tag = "th"
				}
				if !left[c] {
					class = ` class="num"`
				}
				fmt.Fprintf(b, "<%s%s>%s</%s>", tag, class, esc(cell), tag)
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</table>\n")
		for _, pl := range device.Plots(tables[i]) {
			fmt.Fprintf(b, "<figure role=\"img\" aria-label=\"%s\">%s</figure>\n", esc(pl.Title), plotfmt.SVG(624, 307, pl))
		}
		fmt.Fprintf(b, "<p class=\"finding\">%s</p>\n</section>\n", esc(sc.Finding))
	}
	if len(s.Failed) > 0 {
		b.WriteString("<ul class=\"notes\">\n")
		for _, f := range s.Failed {
			fmt.Fprintf(b, "<li>run failed: %s</li>\n", esc(f))
		}
		b.WriteString("</ul>\n")
	}
	return nil
}

const pageCSS = `
body { margin: 0; background: #fafaf7; color: #1d1d1b; font: 16px/1.5 system-ui, sans-serif; }
main { max-width: 52em; margin: 0 auto; padding: 1.5em 1.2em 3em; }
h1 { font-size: 1.5em; margin-bottom: 0; }
h2 { margin-top: 2em; border-bottom: 2px solid #1f77b4; padding-bottom: .2em; }
h3 { margin-top: 2.2em; }
.sub, .small, .from { color: #555; }
.small { font-size: .9em; }
.note { background: #fff6e0; border-left: 4px solid #ff7f0e; padding: .5em .8em; }
pre.console { background: #1d1d1b; color: #e8e8e0; padding: .8em 1em; border-radius: 4px; overflow-x: auto; }
code { font-family: ui-monospace, monospace; font-size: .9em; background: #eeeee8; padding: 0 .25em; border-radius: 3px; }
ol.steps li { margin: .8em 0; }
ol.steps p { margin: .15em 0; }
.took { float: right; margin-left: 1em; font-family: ui-monospace, monospace; color: #1f77b4; font-weight: bold; }
.took.untraced { color: #999; font-weight: normal; }
.where, .count { font-size: .9em; color: #444; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
th, td { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: left; }
th { background: #eef3f8; }
.num { text-align: right; }
figure { margin: 1em 0; }
figure svg { display: block; width: 100%; max-width: 39rem; height: auto; border: 1px solid #e4e4de; }
.finding { font-weight: 600; }
footer { margin-top: 3em; color: #555; border-top: 1px solid #ddd; padding-top: .8em; }
`
