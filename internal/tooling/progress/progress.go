// Package progress is the one progress bar of idemflow's harness (bench,
// chaos and the demo): schollz/progressbar, drawn in place on a writer
// that may be nil (no bar), with the same look everywhere.
package progress

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar counts steps of a known total.
type Bar struct {
	w io.Writer
	b *progressbar.ProgressBar
}

// New draws a bar labelled label over total steps on w; a nil w draws
// nothing.
func New(w io.Writer, label string, total int) *Bar {
	if w == nil {
		return &Bar{}
	}
	return &Bar{w: w, b: progressbar.NewOptions(max(total, 1), progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label), progressbar.OptionShowCount(), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetPredictTime(false))}
}

// Add counts n more steps.
func (b *Bar) Add(n int) {
	if b.b != nil {
		_ = b.b.Add(n)
	}
}

// Set fills the bar to n steps and relabels it: for a bar whose fill is
// computed (chaos fills by whichever of its bounds is nearer its end).
func (b *Bar) Set(n int, label string) {
	if b.b != nil {
		b.b.Describe(label)
		_ = b.b.Set(n)
	}
}

// Finish draws the bar full (what bounded it is done) and ends its line,
// which stays.
func (b *Bar) Finish() {
	if b.b != nil {
		_ = b.b.Finish()
		_, _ = io.WriteString(b.w, "\n")
	}
}
