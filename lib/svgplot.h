/*
 * svgplot: charts as self-contained SVG text, for the run report
 * (report.html) and the finder stages' plots (batch_sweep, lr_find). No
 * scripts, no fonts, no network: an <svg> element with a viewBox, axes
 * with ticks and labels (units in the labels), a legend, optional log
 * scales; it renders the same in a browser and when embedded in HTML.
 *
 * For tests and tools, every chart is an <svg class="chart"
 * data-title="..."> and every series a <g class="series"
 * data-label="..." data-points="N"> holding a <polyline> (and <circle>
 * markers for series of at most 30 points, or style "markers"); vertical
 * event marks are <line class="mark">. Text is XML-escaped.
 *
 * Points whose x or y is not finite (or not > 0 on a log axis) are left
 * out (and not counted in data-points). A chart with no point says "no
 * data". No global state; thread-safe.
 */
#ifndef DAGRUN_SVGPLOT_H
#define DAGRUN_SVGPLOT_H

#include <stddef.h>

typedef struct svgplot_series {
  const char *label;
  const double *x, *y; /* n points */
  size_t n;
  int markers_only; /* points without a line (e.g. one final eval) */
} svgplot_series;

/* A vertical mark at x (e.g. a loss-spike guard event), with a label
 * shown on hover (<title>). */
typedef struct svgplot_mark {
  double x;
  const char *label;
} svgplot_mark;

typedef struct svgplot_chart {
  const char *title;
  const char *xlabel; /* with units: "step", "tokens", "batch size" */
  const char *ylabel; /* with units: "loss (nats)", "tokens/s" */
  int logx, logy;
  int width, height; /* viewBox size; 0: 640 x 320 */
  const svgplot_mark *marks;
  size_t n_marks;
  const char *mark_legend; /* the marks' legend entry; NULL: "events" */
  /* Non-zero: each mark's label is also written beside its line, at the
   * top of the plot (<text class="mark-label">), for the few marks a
   * reader must tell apart without hovering (a finder's picks). */
  int mark_labels;
  /* When ymax > ymin: the y axis spans at most [ymin, ymax], and points
   * outside it are left out, so that a divergence or an outlier does not
   * flatten the band that matters. */
  double ymin, ymax;
} svgplot_chart;

/* A line chart of n series. Caller frees. */
char *svgplot_lines(const svgplot_chart *c, const svgplot_series *s, size_t n);

/* One stack of a stacked bar chart: v[i] is its value at x[i]. */
typedef struct svgplot_stack {
  const char *label;
  const double *v;
} svgplot_stack;

/* Stacked bars at positions x[0..n_x) (e.g. step buckets), one bar per
 * x, stacks drawn bottom to top in order. Each stack is a
 * <g class="series" data-label=... data-points=n_x> of <rect>s. Caller
 * frees. */
char *svgplot_stacked_bars(const svgplot_chart *c, const double *x, size_t n_x,
                           const svgplot_stack *stacks, size_t n_stacks);

/* One bar of a timeline row, from start to end (x units), filled with
 * color ("#rrggbb"; NULL: the palette's first), label shown on hover. */
typedef struct svgplot_span {
  double start, end;
  const char *color;
  const char *label;
} svgplot_span;

/* A row of a timeline: its label and its bars. */
typedef struct svgplot_row {
  const char *label;
  const svgplot_span *spans;
  size_t n;
} svgplot_row;

/* A legend entry for colours that mean something (outcomes). */
typedef struct svgplot_key {
  const char *label;
  const char *color;
} svgplot_key;

/* A timeline (Gantt chart): rows top to bottom, each a
 * <g class="series" data-label=row data-points=bars drawn> of
 * <rect class="span">s; a linear x axis (c->xlabel) from 0 or the
 * earliest start; a legend of keys. Spans with a non-finite start or end
 * are left out; a span shorter than a pixel is drawn a pixel or two wide.
 * c->height 0: as tall as the rows need. Caller frees. */
char *svgplot_timeline(const svgplot_chart *c, const svgplot_row *rows,
                       size_t n_rows, const svgplot_key *keys, size_t n_keys);

/* s escaped for XML/HTML text and attribute values (& < > " '). Caller
 * frees. */
char *svgplot_escape(const char *s);

/* v as a short label, three significant digits: "1.2k", "3.4M", "0.25",
 * "1e-4", "2.5e-5" (the axes' format), into out[cap]. */
void svgplot_format_number(char *out, size_t cap, double v);

#endif /* DAGRUN_SVGPLOT_H */
