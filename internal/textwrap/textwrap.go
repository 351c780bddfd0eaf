// Package textwrap breaks text into lines at spaces, for the CLI's help,
// the tour's screens and the product's SVG charts: each measures a line
// its own way (columns or pixels), so the caller says what fits.
package textwrap

import "strings"

// Lines breaks text at spaces into lines for which fits holds; a word that
// does not fit alone gets a line of its own. Empty text has no lines.
func Lines(text string, fits func(line string) bool) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case fits(line + " " + word):
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// Columns is Lines for lines of at most width bytes.
func Columns(text string, width int) []string {
	return Lines(text, func(l string) bool { return len(l) <= width })
}
