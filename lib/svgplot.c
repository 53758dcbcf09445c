/*
 * svgplot: line charts and stacked bar charts as self-contained SVG text.
 * See svgplot.h for the contract (classes and data- attributes the tests
 * and tools rely on).
 *
 * Layout, in viewBox units: the title on the first line, the legend
 * under it (wrapping), the plot area framed, y tick labels on its left,
 * x tick labels under it, the axis labels outside those. Text widths are
 * estimated (no font metrics without a renderer): about 6.2 units a
 * character at font-size 11.
 */
#include "svgplot.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tableau 10: distinct, readable on white, colour-blind friendlier than
 * the rainbow. */
static const char *const palette[] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_PALETTE (sizeof palette / sizeof palette[0])

#define CHAR_W 6.2    /* estimated width of a character at font-size 11 */
#define MAX_TICKS 64  /* more than any axis draws; bounds the arrays */
#define MARKER_MAX 30 /* series of at most this many points get circles */

/* ---- growing string buffer ---------------------------------------- */

typedef struct sb {
  char *p;
  size_t n, cap;
  int oom;
} sb;

static void sb_reserve(sb *b, size_t more) {
  if (b->oom || b->n + more + 1 <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->n + more + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void sb_printf(sb *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[512];
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0) {
    b->oom = 1;
    return;
  }
  sb_reserve(b, (size_t)k);
  if (b->oom)
    return;
  if ((size_t)k < sizeof tmp) {
    memcpy(b->p + b->n, tmp, (size_t)k + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
  }
  b->n += (size_t)k;
}

static void sb_puts(sb *b, const char *s) {
  size_t k = strlen(s);
  sb_reserve(b, k);
  if (b->oom)
    return;
  memcpy(b->p + b->n, s, k + 1);
  b->n += k;
}

/* Appends s escaped for XML text and attribute values. Control
 * characters other than tab and newline are not allowed in XML 1.0:
 * they are dropped. */
static void sb_esc(sb *b, const char *s) {
  if (!s)
    return;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
    case '&':
      sb_puts(b, "&amp;");
      break;
    case '<':
      sb_puts(b, "&lt;");
      break;
    case '>':
      sb_puts(b, "&gt;");
      break;
    case '"':
      sb_puts(b, "&quot;");
      break;
    case '\'':
      sb_puts(b, "&#39;");
      break;
    default:
      if (c < 0x20 && c != '\t' && c != '\n')
        break;
      sb_reserve(b, 1);
      if (b->oom)
        return;
      b->p[b->n++] = (char)c;
      b->p[b->n] = '\0';
    }
  }
}

static char *sb_finish(sb *b) {
  if (b->oom) {
    free(b->p);
    return NULL;
  }
  if (!b->p) { /* nothing written: still a string */
    b->p = calloc(1, 1);
  }
  return b->p;
}

char *svgplot_escape(const char *s) {
  sb b = {0};
  sb_esc(&b, s ? s : "");
  return sb_finish(&b);
}

/* ---- numbers --------------------------------------------------------- */

/* Strips trailing zeros (and a trailing point) of a "%f" number. */
static void trim_zeros(char *z) {
  char *dot = strchr(z, '.');
  if (!dot)
    return;
  char *e = z + strlen(z) - 1;
  while (e > dot && *e == '0')
    *e-- = '\0';
  if (e == dot)
    *e = '\0';
}

static int clampi(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* v as a short label: 1.2k, 3.4M, 0.25, 1e-4, 2.5e-5. step > 0 is the
 * spacing between neighbouring tick values, which says how many digits
 * tell them apart; step == 0 gives three significant digits. */
static void fmt_num_style(char *out, size_t cap, double v, double step,
                          int plain);
static void fmt_num(char *out, size_t cap, double v, double step) {
  fmt_num_style(out, cap, v, step, 0);
}

/* plain: below 1000, decimals only (no 1e-4 form), so that the ticks of
 * one axis read alike ("0.00095", "0.001", "0.00105"). */
static void fmt_num_style(char *out, size_t cap, double v, double step,
                          int plain) {
  double a = fabs(v);
  if (!isfinite(v)) {
    snprintf(out, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return;
  }
  if (a == 0 || (step > 0 && a < step * 1e-6)) {
    snprintf(out, cap, "0");
    return;
  }
  static const struct {
    double div;
    const char *suffix;
  } big[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  if (a >= 1e15 || (a < 1e-3 && !plain)) {
    int e = (int)floor(log10(a));
    double m = v / pow(10, e);
    if (fabs(m) >= 9.9995) { /* rounding carried into the next decade */
      m /= 10;
      e++;
    }
    int dec = step > 0 ? clampi(e - (int)floor(log10(step) + 1e-9), 0, 4) : 2;
    char mant[64];
    snprintf(mant, sizeof mant, "%.*f", dec, m);
    trim_zeros(mant);
    snprintf(out, cap, "%se%d", mant, e);
    return;
  }
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    if (a >= big[i].div) {
      double s = v / big[i].div;
      int dec = step > 0
                    ? clampi((int)ceil(-log10(step / big[i].div) - 1e-9), 0, 6)
                    : clampi(2 - (int)floor(log10(fabs(s))), 0, 2);
      char num[64];
      snprintf(num, sizeof num, "%.*f", dec, s);
      trim_zeros(num);
      snprintf(out, cap, "%s%s", num, big[i].suffix);
      return;
    }
  }
  int dec = step > 0 ? clampi((int)ceil(-log10(step) - 1e-9), 0, 9)
                     : clampi(2 - (int)floor(log10(a)), 0, 9);
  snprintf(out, cap, "%.*f", dec, v);
  trim_zeros(out);
  if (strcmp(out, "-0") == 0)
    snprintf(out, cap, "0");
}

/* ---- axes ------------------------------------------------------------ */

typedef struct axis {
  int log;
  double lo, hi; /* data range drawn (lo < hi; > 0 when log) */
  double p0, p1; /* pixel positions of lo and hi */
  double tick[MAX_TICKS];
  int major[MAX_TICKS]; /* decade ticks of a log axis: darker grid */
  int nt;
  double step; /* spacing of linear ticks (label precision); 0: free */
} axis;

static double axis_map(const axis *a, double v) {
  double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                    : (v - a->lo) / (a->hi - a->lo);
  return a->p0 + t * (a->p1 - a->p0);
}

/* 1, 2 or 5 times a power of ten, near raw. */
static double nice_step(double raw) {
  double mag = pow(10, floor(log10(raw)));
  double f = raw / mag;
  return (f <= 1.0 ? 1 : f <= 2.0 ? 2 : f <= 5.0 ? 5 : 10) * mag;
}

/* Linear ticks at multiples of a 1-2-5 step in [lo, hi]; widens [lo, hi]
 * to whole steps when widen. */
static void linear_ticks(axis *a, int target, int widen) {
  double range = a->hi - a->lo;
  a->nt = 0;
  if (!(range > 0) || !isfinite(range)) {
    a->tick[a->nt++] = a->lo;
    a->tick[a->nt++] = a->hi;
    a->step = 0;
    return;
  }
  double step = nice_step(range / (target > 1 ? target : 1));
  if (widen) {
    a->lo = floor(a->lo / step + 1e-9) * step;
    a->hi = ceil(a->hi / step - 1e-9) * step;
  }
  double first = ceil(a->lo / step - 1e-9);
  for (int i = 0; i < MAX_TICKS; i++) {
    double v = (first + i) * step;
    if (v > a->hi + step * 1e-9)
      break;
    if (fabs(v) < step * 1e-9)
      v = 0;
    a->major[a->nt] = 0;
    a->tick[a->nt++] = v;
  }
  a->step = step;
}

/* Sets the range and ticks of an axis for data in [mn, mx] (finite; > 0
 * when log). Log axes tick every decade (every few decades over a wide
 * range) and add 2 and 5, or 2..9, when the range spans few decades. */
static void axis_init(axis *a, double mn, double mx, int log, int target) {
  a->log = log;
  if (log) {
    if (!(mn < mx)) {
      mn /= 2;
      mx *= 2;
    }
    double l0 = log10(mn), l1 = log10(mx), span = l1 - l0;
    double pad = span * 0.04;
    a->lo = pow(10, l0 - pad);
    a->hi = pow(10, l1 + pad);
    span = log10(a->hi) - log10(a->lo);
    static const double m1[] = {1}, m125[] = {1, 2, 5},
                        m19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const double *m = span > 2.5 ? m1 : span > 1 ? m125 : m19;
    int nm = span > 2.5 ? 1 : span > 1 ? 3 : 9;
    /* Every decade gets a grid line (labels that would overlap are
     * skipped when drawn); only absurd ranges thin the decades out. */
    int ds = span > 40 ? (int)ceil(span / 40) : 1;
    a->nt = 0;
    a->step = 0;
    for (int k = (int)floor(log10(a->lo)); k <= (int)ceil(log10(a->hi)); k++) {
      if (((k % ds) + ds) % ds)
        continue;
      for (int j = 0; j < nm && a->nt < MAX_TICKS; j++) {
        double v = m[j] * pow(10, k);
        if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9)) {
          a->major[a->nt] = j == 0;
          a->tick[a->nt++] = v;
        }
      }
    }
    if (a->nt < 2) { /* a narrow range: plain ticks, still log-placed */
      linear_ticks(a, 4, 0);
      int k = 0;
      for (int i = 0; i < a->nt; i++)
        if (a->tick[i] > 0)
          a->tick[k++] = a->tick[i];
      a->nt = k;
    }
    return;
  }
  if (!(mn < mx)) {
    double d = mn == 0 ? 1 : fabs(mn) * 0.1;
    mn -= d;
    mx += d;
  }
  a->lo = mn;
  a->hi = mx;
  linear_ticks(a, target, 1);
}

/* ---- chart frame ------------------------------------------------------ */

typedef struct legend_item {
  const char *label;
  const char *color;
  int kind; /* 0 line, 1 marker, 2 box, 3 dashed mark */
} legend_item;

typedef struct frame {
  double W, H;
  double ml, mr, mt, mb; /* margins */
  double legend_y;       /* baseline of the first legend row */
  int legend_rows;
} frame;

static double text_w(const char *s) {
  return CHAR_W * (double)strlen(s ? s : "");
}

/* Lays out the legend rows and sets the margins. */
static int legend_rows(const frame *f, const legend_item *li, size_t n) {
  if (n == 0)
    return 0;
  int rows = 1;
  double x = f->ml;
  for (size_t i = 0; i < n; i++) {
    double w = 26 + text_w(li[i].label) + 14;
    if (x > f->ml && x + w > f->W - f->mr) {
      rows++;
      x = f->ml;
    }
    x += w;
  }
  return rows;
}

static void frame_init(frame *f, const svgplot_chart *c, const legend_item *li,
                       size_t n_li) {
  f->W = c->width > 0 ? c->width : 640;
  f->H = c->height > 0 ? c->height : 320;
  f->ml = 64;
  f->mr = 20;
  f->mb = 44;
  f->mt = 30;
  f->legend_y = 0;
  f->legend_rows = legend_rows(f, li, n_li);
  if (f->legend_rows) {
    f->legend_y = f->mt + 4;
    f->mt += 16.0 * f->legend_rows + 4;
  }
}

static void open_svg(sb *b, const frame *f, const svgplot_chart *c) {
  sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" "
               "data-title=\"");
  sb_esc(b, c->title);
  sb_printf(b,
            "\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
            "role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<title>",
            f->W, f->H, f->W, f->H);
  sb_esc(b, c->title);
  sb_printf(b,
            "</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" "
            "height=\"%.0f\" fill=\"#ffffff\"/>\n",
            f->W, f->H);
  sb_printf(b,
            "<text x=\"%.1f\" y=\"19\" font-size=\"13\" "
            "font-weight=\"bold\" fill=\"#222222\">",
            f->ml);
  sb_esc(b, c->title);
  sb_puts(b, "</text>\n");
}

static void draw_legend(sb *b, const frame *f, const legend_item *li,
                        size_t n) {
  if (n == 0)
    return;
  sb_puts(b, "<g class=\"legend\">\n");
  double x = f->ml, y = f->legend_y;
  for (size_t i = 0; i < n; i++) {
    double w = 26 + text_w(li[i].label) + 14;
    if (x > f->ml && x + w > f->W - f->mr) {
      x = f->ml;
      y += 16;
    }
    switch (li[i].kind) {
    case 1:
      sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>",
                x + 10, y + 6, li[i].color);
      break;
    case 2:
      sb_printf(b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" "
                "fill=\"%s\"/>",
                x + 4, y + 1, li[i].color);
      break;
    case 3:
      sb_printf(b,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"%s\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"3 2\"/>",
                x + 10, y, x + 10, y + 12, li[i].color);
      break;
    default:
      sb_printf(b,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"%s\" stroke-width=\"2.5\"/>",
                x, y + 6, x + 20, y + 6, li[i].color);
    }
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#333333\">", x + 26,
              y + 10);
    sb_esc(b, li[i].label);
    sb_puts(b, "</text>\n");
    x += w;
  }
  sb_puts(b, "</g>\n");
}

/* Whether a linear axis's labels are all plain decimals: its largest
 * tick is at least 0.001 and below 1000. Log axes label each decade as
 * it reads best. */
static int axis_plain(const axis *a) {
  double amax = 0;
  for (int i = 0; i < a->nt; i++)
    amax = fmax(amax, fabs(a->tick[i]));
  return !a->log && amax >= 1e-3 && amax < 1e3;
}

/* Grid, frame, ticks, tick labels and axis labels. */
static void draw_axes(sb *b, const frame *f, const axis *ax, const axis *ay,
                      const svgplot_chart *c) {
  double x0 = f->ml, x1 = f->W - f->mr, y0 = f->H - f->mb, y1 = f->mt;
  char num[64];
  sb_puts(b, "<g class=\"grid\" stroke-width=\"1\">\n");
  for (int i = 0; i < ay->nt; i++) {
    double y = axis_map(ay, ay->tick[i]);
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"%s\"/>\n",
              x0, y, x1, y, ay->log && ay->major[i] ? "#d0d0d0" : "#ececec");
  }
  for (int i = 0; i < ax->nt; i++) {
    double x = axis_map(ax, ax->tick[i]);
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"%s\"/>\n",
              x, y0, x, y1, ax->log && ax->major[i] ? "#d0d0d0" : "#ececec");
  }
  sb_puts(b, "</g>\n");
  sb_printf(b,
            "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
            "height=\"%.1f\" fill=\"none\" stroke=\"#888888\"/>\n",
            x0, y1, x1 - x0, y0 - y1);
  /* Tick labels, skipping any that would overlap the previous one. */
  sb_puts(b, "<g class=\"ticks\" fill=\"#444444\">\n");
  double last = -1e9;
  for (int i = 0; i < ay->nt; i++) {
    double y = axis_map(ay, ay->tick[i]);
    if (fabs(y - last) < 13)
      continue;
    last = y;
    fmt_num_style(num, sizeof num, ay->tick[i], ay->log ? 0 : ay->step,
                  axis_plain(ay));
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"#888888\"/>",
              x0 - 4, y, x0, y);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
              x0 - 6, y + 4, num);
  }
  last = -1e9;
  double last_w = 0;
  for (int i = 0; i < ax->nt; i++) {
    double x = axis_map(ax, ax->tick[i]);
    fmt_num_style(num, sizeof num, ax->tick[i], ax->log ? 0 : ax->step,
                  axis_plain(ax));
    double w = text_w(num);
    if (x - last < (w + last_w) / 2 + 8)
      continue;
    last = x;
    last_w = w;
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"#888888\"/>",
              x, y0, x, y0 + 4);
    sb_printf(b,
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
              x, y0 + 16, num);
  }
  sb_puts(b, "</g>\n");
  if (c->xlabel && *c->xlabel) {
    sb_printf(b,
              "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" "
              "text-anchor=\"middle\" fill=\"#222222\">",
              (x0 + x1) / 2, f->H - 8);
    sb_esc(b, c->xlabel);
    sb_printf(b, "%s</text>\n", ax->log ? " (log scale)" : "");
  }
  if (c->ylabel && *c->ylabel) {
    sb_printf(b,
              "<text class=\"ylabel\" transform=\"rotate(-90)\" "
              "x=\"%.1f\" y=\"14\" text-anchor=\"middle\" "
              "fill=\"#222222\">",
              -(y0 + y1) / 2);
    sb_esc(b, c->ylabel);
    sb_printf(b, "%s</text>\n", ay->log ? " (log scale)" : "");
  }
}

static void draw_no_data(sb *b, const frame *f) {
  double x0 = f->ml, x1 = f->W - f->mr, y0 = f->H - f->mb, y1 = f->mt;
  sb_printf(b,
            "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
            "height=\"%.1f\" fill=\"#fafafa\" stroke=\"#bbbbbb\"/>\n",
            x0, y1, x1 - x0, y0 - y1);
  sb_printf(b,
            "<text class=\"nodata\" x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"middle\" font-size=\"14\" fill=\"#777777\">"
            "no data</text>\n",
            (x0 + x1) / 2, (y0 + y1) / 2 + 5);
}

/* ---- line charts ------------------------------------------------------ */

static int point_ok(const svgplot_chart *c, double x, double y) {
  if (!isfinite(x) || !isfinite(y))
    return 0;
  if (c->logx && !(x > 0))
    return 0;
  if (c->logy && !(y > 0))
    return 0;
  if (c->ymax > c->ymin && (y < c->ymin || y > c->ymax))
    return 0;
  return 1;
}

static int mark_ok(const svgplot_chart *c, double x) {
  return isfinite(x) && (!c->logx || x > 0);
}

/* The polyline of one series. A series far denser than the pixels it
 * covers, with x non-decreasing, is drawn as each pixel column's first,
 * lowest, highest and last point: the same picture, a fraction of the
 * text. */
static void draw_polyline(sb *b, const svgplot_chart *c,
                          const svgplot_series *s, const axis *ax,
                          const axis *ay, const char *color) {
  size_t n_ok = 0;
  int sorted = 1;
  double prev = -INFINITY;
  for (size_t i = 0; i < s->n; i++) {
    if (!point_ok(c, s->x[i], s->y[i]))
      continue;
    n_ok++;
    if (s->x[i] < prev)
      sorted = 0;
    prev = s->x[i];
  }
  if (n_ok < 2)
    return;
  double width = fabs(ax->p1 - ax->p0);
  int decimate = sorted && (double)n_ok > 4 * width;
  sb_printf(b,
            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
            "stroke-linejoin=\"round\" points=\"",
            color);
  long col = -1;
  double first_y = 0, min_y = 0, max_y = 0, last_y = 0, cx = 0;
  int have = 0;
#define FLUSH_COL()                                                            \
  do {                                                                         \
    if (have) {                                                                \
      sb_printf(b, "%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f ", cx, first_y,    \
                cx, min_y, cx, max_y, cx, last_y);                             \
    }                                                                          \
  } while (0)
  for (size_t i = 0; i < s->n; i++) {
    if (!point_ok(c, s->x[i], s->y[i]))
      continue;
    double px = axis_map(ax, s->x[i]), py = axis_map(ay, s->y[i]);
    if (!decimate) {
      sb_printf(b, "%.1f,%.1f ", px, py);
      continue;
    }
    long k = (long)floor(px);
    if (k != col) {
      FLUSH_COL();
      col = k;
      cx = px;
      first_y = min_y = max_y = py;
      have = 1;
    }
    if (py < min_y)
      min_y = py;
    if (py > max_y)
      max_y = py;
    last_y = py;
  }
  if (decimate)
    FLUSH_COL();
#undef FLUSH_COL
  if (b->n && b->p && b->p[b->n - 1] == ' ')
    b->p[--b->n] = '\0';
  sb_puts(b, "\"/>\n");
}

char *svgplot_lines(const svgplot_chart *c, const svgplot_series *s, size_t n) {
  sb b = {0};
  /* Data range over every drawable point and mark. */
  double xmn = INFINITY, xmx = -INFINITY, ymn = INFINITY, ymx = -INFINITY;
  size_t total = 0;
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < s[k].n; i++) {
      if (!point_ok(c, s[k].x[i], s[k].y[i]))
        continue;
      total++;
      xmn = fmin(xmn, s[k].x[i]);
      xmx = fmax(xmx, s[k].x[i]);
      ymn = fmin(ymn, s[k].y[i]);
      ymx = fmax(ymx, s[k].y[i]);
    }
  if (total)
    for (size_t m = 0; m < c->n_marks; m++)
      if (mark_ok(c, c->marks[m].x)) {
        xmn = fmin(xmn, c->marks[m].x);
        xmx = fmax(xmx, c->marks[m].x);
      }

  legend_item *li = calloc(n + 1, sizeof *li);
  if (!li)
    return NULL;
  size_t n_li = 0;
  for (size_t k = 0; k < n; k++)
    li[n_li++] = (legend_item){s[k].label ? s[k].label : "",
                               palette[k % N_PALETTE], s[k].markers_only};
  if (c->n_marks && total)
    li[n_li++] = (legend_item){
        c->mark_legend && *c->mark_legend ? c->mark_legend : "events",
        "#d62728", 3};

  frame f;
  frame_init(&f, c, li, n_li);
  open_svg(&b, &f, c);
  draw_legend(&b, &f, li, n_li);
  free(li);

  if (!total) {
    draw_no_data(&b, &f);
    for (size_t k = 0; k < n; k++) {
      sb_puts(&b, "<g class=\"series\" data-label=\"");
      sb_esc(&b, s[k].label);
      sb_puts(&b, "\" data-points=\"0\"></g>\n");
    }
    sb_puts(&b, "</svg>\n");
    return sb_finish(&b);
  }

  axis ax, ay;
  double pw = f.W - f.ml - f.mr;
  axis_init(&ax, xmn, xmx, c->logx, pw > 400 ? 7 : 4);
  axis_init(&ay, ymn, ymx, c->logy, 5);
  ax.p0 = f.ml;
  ax.p1 = f.W - f.mr;
  ay.p0 = f.H - f.mb;
  ay.p1 = f.mt;
  draw_axes(&b, &f, &ax, &ay, c);

  for (size_t k = 0; k < n; k++) {
    const char *color = palette[k % N_PALETTE];
    size_t cnt = 0;
    for (size_t i = 0; i < s[k].n; i++)
      cnt += (size_t)point_ok(c, s[k].x[i], s[k].y[i]);
    sb_puts(&b, "<g class=\"series\" data-label=\"");
    sb_esc(&b, s[k].label);
    sb_printf(&b, "\" data-points=\"%zu\">\n", cnt);
    if (!s[k].markers_only)
      draw_polyline(&b, c, &s[k], &ax, &ay, color);
    if (s[k].markers_only || cnt <= MARKER_MAX) {
      double r = s[k].markers_only ? 3.5 : 2.5;
      for (size_t i = 0; i < s[k].n; i++) {
        if (!point_ok(c, s[k].x[i], s[k].y[i]))
          continue;
        char xs[64], ys[64];
        fmt_num(xs, sizeof xs, s[k].x[i], 0);
        fmt_num(ys, sizeof ys, s[k].y[i], 0);
        sb_printf(&b,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" "
                  "fill=\"%s\"><title>",
                  axis_map(&ax, s[k].x[i]), axis_map(&ay, s[k].y[i]), r, color);
        sb_esc(&b, s[k].label);
        sb_printf(&b, ": %s at %s</title></circle>\n", ys, xs);
      }
    }
    sb_puts(&b, "</g>\n");
  }

  for (size_t m = 0; m < c->n_marks; m++) {
    if (!mark_ok(c, c->marks[m].x))
      continue;
    double x = axis_map(&ax, c->marks[m].x);
    sb_printf(&b,
              "<line class=\"mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
              "y2=\"%.1f\" stroke=\"#d62728\" stroke-width=\"1.5\" "
              "stroke-dasharray=\"4 3\"><title>",
              x, f.H - f.mb, x, f.mt);
    sb_esc(&b, c->marks[m].label);
    sb_puts(&b, "</title></line>\n");
    if (c->mark_labels && c->marks[m].label) {
      /* Staggered down, so that labels of marks close together do not
       * overlap; on the side with room. */
      int right = x < f.ml + (f.W - f.ml - f.mr) / 2;
      sb_printf(&b,
                "<text class=\"mark-label\" x=\"%.1f\" y=\"%.1f\" "
                "font-size=\"11\" fill=\"#d62728\" text-anchor=\"%s\">",
                right ? x + 4 : x - 4, f.mt + 12 + 14 * (double)m,
                right ? "start" : "end");
      sb_esc(&b, c->marks[m].label);
      sb_puts(&b, "</text>\n");
    }
  }
  sb_puts(&b, "</svg>\n");
  return sb_finish(&b);
}

/* ---- stacked bars ------------------------------------------------------ */

static double bar_value(const svgplot_stack *st, size_t i) {
  double v = st->v ? st->v[i] : 0;
  return isfinite(v) && v > 0 ? v : 0;
}

char *svgplot_stacked_bars(const svgplot_chart *c, const double *x, size_t n_x,
                           const svgplot_stack *stacks, size_t n_stacks) {
  sb b = {0};
  double xmn = INFINITY, xmx = -INFINITY, ymx = 0, gap = INFINITY;
  size_t n_ok = 0;
  double prev = NAN;
  for (size_t i = 0; i < n_x; i++) {
    if (!isfinite(x[i]))
      continue;
    n_ok++;
    xmn = fmin(xmn, x[i]);
    xmx = fmax(xmx, x[i]);
    if (isfinite(prev) && fabs(x[i] - prev) > 0)
      gap = fmin(gap, fabs(x[i] - prev));
    prev = x[i];
    double sum = 0;
    for (size_t k = 0; k < n_stacks; k++)
      sum += bar_value(&stacks[k], i);
    ymx = fmax(ymx, sum);
  }

  legend_item *li = calloc(n_stacks + 1, sizeof *li);
  if (!li)
    return NULL;
  for (size_t k = 0; k < n_stacks; k++)
    li[k] = (legend_item){stacks[k].label ? stacks[k].label : "",
                          palette[k % N_PALETTE], 2};
  frame f;
  frame_init(&f, c, li, n_stacks);
  open_svg(&b, &f, c);
  draw_legend(&b, &f, li, n_stacks);
  free(li);

  if (!n_ok || !(ymx > 0)) {
    draw_no_data(&b, &f);
    for (size_t k = 0; k < n_stacks; k++) {
      sb_puts(&b, "<g class=\"series\" data-label=\"");
      sb_esc(&b, stacks[k].label);
      sb_puts(&b, "\" data-points=\"0\"></g>\n");
    }
    sb_puts(&b, "</svg>\n");
    return sb_finish(&b);
  }
  if (!isfinite(gap))
    gap = xmn != 0 ? fabs(xmn) : 1;
  axis ax, ay;
  double pw = f.W - f.ml - f.mr;
  axis_init(&ax, xmn - gap / 2, xmx + gap / 2, 0, pw > 400 ? 7 : 4);
  axis_init(&ay, 0, ymx, 0, 5);
  ax.p0 = f.ml;
  ax.p1 = f.W - f.mr;
  ay.p0 = f.H - f.mb;
  ay.p1 = f.mt;
  draw_axes(&b, &f, &ax, &ay, c);

  double bw = fabs(axis_map(&ax, xmn + gap) - axis_map(&ax, xmn)) * 0.85;
  if (bw < 1)
    bw = 1;
  double *base = calloc(n_x ? n_x : 1, sizeof *base);
  if (!base) {
    free(b.p);
    return NULL;
  }
  char xs[64], vs[64];
  for (size_t k = 0; k < n_stacks; k++) {
    sb_puts(&b, "<g class=\"series\" data-label=\"");
    sb_esc(&b, stacks[k].label);
    sb_printf(&b, "\" data-points=\"%zu\" fill=\"%s\">\n", n_ok,
              palette[k % N_PALETTE]);
    for (size_t i = 0; i < n_x; i++) {
      if (!isfinite(x[i]))
        continue;
      double v = bar_value(&stacks[k], i);
      double ya = axis_map(&ay, base[i]), yb = axis_map(&ay, base[i] + v);
      base[i] += v;
      fmt_num(xs, sizeof xs, x[i], 0);
      fmt_num(vs, sizeof vs, v, 0);
      sb_printf(&b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                "height=\"%.1f\"><title>",
                axis_map(&ax, x[i]) - bw / 2, yb, bw, ya - yb);
      sb_esc(&b, stacks[k].label);
      sb_printf(&b, ": %s at %s</title></rect>\n", vs, xs);
    }
    sb_puts(&b, "</g>\n");
  }
  free(base);
  sb_puts(&b, "</svg>\n");
  return sb_finish(&b);
}

/* ---- timelines --------------------------------------------------------- */

/* A caller's colour, or black when it could break out of the attribute:
 * "#rrggbb", a name or rgb(...) pass. */
static const char *safe_color(const char *z) {
  if (!z || !*z)
    return palette[0];
  for (const char *p = z; *p; p++)
    if (!strchr("#abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                "0123456789(),. %",
                *p))
      return "#000000";
  return z;
}

#define ROW_H 24.0

/* At most max characters of s (UTF-8 aware: never cuts a character),
 * with an ellipsis when cut, escaped. */
static void sb_esc_trunc(sb *b, const char *s, size_t max) {
  if (!s)
    return;
  size_t n = 0, i = 0;
  while (s[i] && n < max) {
    i++;
    while ((s[i] & 0xC0) == 0x80)
      i++;
    n++;
  }
  if (!s[i]) {
    sb_esc(b, s);
    return;
  }
  char *cut = malloc(i + 1);
  if (!cut) {
    b->oom = 1;
    return;
  }
  memcpy(cut, s, i);
  cut[i] = '\0';
  sb_esc(b, cut);
  sb_puts(b, "\xe2\x80\xa6");
  free(cut);
}

/* The plot area of a timeline: rows from y0 down to y1, rh apart, pw
 * wide from the frame's left margin. */
typedef struct tl_area {
  double y0, y1, rh, pw;
} tl_area;

/* The x range of the rows' finite spans and the widest row label (cut at
 * 28 characters, as drawn); returns how many spans are finite. */
static size_t timeline_extent(const svgplot_row *rows, size_t n_rows,
                              double *xmn, double *xmx, double *longest) {
  size_t total = 0;
  *xmn = INFINITY;
  *xmx = -INFINITY;
  *longest = 0;
  for (size_t r = 0; r < n_rows; r++) {
    double w = text_w(rows[r].label);
    *longest = fmax(*longest, fmin(w, 28 * CHAR_W));
    for (size_t i = 0; i < rows[r].n; i++) {
      const svgplot_span *sp = &rows[r].spans[i];
      if (!isfinite(sp->start) || !isfinite(sp->end))
        continue;
      total++;
      *xmn = fmin(*xmn, fmin(sp->start, sp->end));
      *xmx = fmax(*xmx, fmax(sp->start, sp->end));
    }
  }
  return total;
}

/* Row stripes (every other row shaded) and the row labels at the left. */
static void timeline_rows(sb *b, const frame *f, const tl_area *a,
                          const svgplot_row *rows, size_t n_rows) {
  for (size_t r = 0; r < n_rows; r++) {
    double y = a->y0 + a->rh * (double)r;
    if (r % 2)
      sb_printf(b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                "height=\"%.1f\" fill=\"#f6f6f6\"/>\n",
                f->ml, y, a->pw, a->rh);
    sb_printf(b,
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
              "fill=\"#222222\">",
              f->ml - 6, y + a->rh / 2 + 4);
    sb_esc_trunc(b, rows[r].label, 28);
    sb_puts(b, "</text>\n");
  }
}

/* The grid over the stripes, the frame, the x ticks (a label skipped
 * where it would touch the last one drawn) and the x axis label. */
static void timeline_axis(sb *b, const frame *f, const tl_area *a,
                          const axis *ax, const svgplot_chart *c) {
  char num[64];
  sb_puts(b, "<g class=\"grid\" stroke=\"#e0e0e0\">\n");
  for (int i = 0; i < ax->nt; i++) {
    double x = axis_map(ax, ax->tick[i]);
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
              "y2=\"%.1f\"/>\n",
              x, a->y0, x, a->y1);
  }
  sb_puts(b, "</g>\n");
  sb_printf(b,
            "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" "
            "width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#888888\"/>\n",
            f->ml, a->y0, a->pw, a->y1 - a->y0);
  sb_puts(b, "<g class=\"ticks\" fill=\"#444444\">\n");
  double last = -1e9, last_w = 0;
  for (int i = 0; i < ax->nt; i++) {
    double x = axis_map(ax, ax->tick[i]);
    fmt_num(num, sizeof num, ax->tick[i], ax->step);
    double w = text_w(num);
    if (x - last < (w + last_w) / 2 + 8)
      continue;
    last = x;
    last_w = w;
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
              "y2=\"%.1f\" stroke=\"#888888\"/>",
              x, a->y1, x, a->y1 + 4);
    sb_printf(b,
              "<text x=\"%.1f\" y=\"%.1f\" "
              "text-anchor=\"middle\">%s</text>\n",
              x, a->y1 + 16, num);
  }
  sb_puts(b, "</g>\n");
  if (c->xlabel && *c->xlabel) {
    sb_printf(b,
              "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" "
              "text-anchor=\"middle\" fill=\"#222222\">",
              f->ml + a->pw / 2, f->H - 8);
    sb_esc(b, c->xlabel);
    sb_puts(b, "</text>\n");
  }
}

/* One series group per row with its finite spans as bars, at least 2
 * units wide so that an instant still shows; each bar's title is the
 * span's label, or the row's. */
static void timeline_spans(sb *b, const tl_area *a, const axis *ax,
                           const svgplot_row *rows, size_t n_rows) {
  double bh = fmin(a->rh * 0.6, 16);
  for (size_t r = 0; r < n_rows; r++) {
    size_t cnt = 0;
    for (size_t i = 0; i < rows[r].n; i++)
      cnt += isfinite(rows[r].spans[i].start) && isfinite(rows[r].spans[i].end);
    sb_puts(b, "<g class=\"series\" data-label=\"");
    sb_esc(b, rows[r].label);
    sb_printf(b, "\" data-points=\"%zu\">\n", cnt);
    double yc = a->y0 + a->rh * ((double)r + 0.5);
    for (size_t i = 0; i < rows[r].n; i++) {
      const svgplot_span *sp = &rows[r].spans[i];
      if (!isfinite(sp->start) || !isfinite(sp->end))
        continue;
      double xa = axis_map(ax, fmin(sp->start, sp->end));
      double xb = axis_map(ax, fmax(sp->start, sp->end));
      if (xb - xa < 2)
        xb = xa + 2;
      sb_printf(b,
                "<rect class=\"span\" x=\"%.1f\" y=\"%.1f\" "
                "width=\"%.1f\" height=\"%.1f\" rx=\"2\" "
                "fill=\"",
                xa, yc - bh / 2, xb - xa, bh);
      sb_puts(b, safe_color(sp->color));
      sb_puts(b, "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>");
      sb_esc(b, sp->label ? sp->label : rows[r].label);
      sb_puts(b, "</title></rect>\n");
    }
    sb_puts(b, "</g>\n");
  }
}

char *svgplot_timeline(const svgplot_chart *c, const svgplot_row *rows,
                       size_t n_rows, const svgplot_key *keys, size_t n_keys) {
  sb b = {0};
  double xmn, xmx, longest;
  size_t total = timeline_extent(rows, n_rows, &xmn, &xmx, &longest);
  legend_item *li = calloc(n_keys + 1, sizeof *li);
  if (!li)
    return NULL;
  for (size_t k = 0; k < n_keys; k++)
    li[k] = (legend_item){keys[k].label ? keys[k].label : "",
                          safe_color(keys[k].color), 2};
  /* The row labels set the left margin, which moves the legend. */
  frame f;
  frame_init(&f, c, li, n_keys);
  f.ml = fmax(64, longest + 16);
  f.legend_rows = legend_rows(&f, li, n_keys);
  f.mt = 30 + (f.legend_rows ? 16.0 * f.legend_rows + 4 : 0);
  if (c->height <= 0)
    f.H = f.mt + ROW_H * (double)(n_rows ? n_rows : 1) + f.mb;
  open_svg(&b, &f, c);
  draw_legend(&b, &f, li, n_keys);
  free(li);

  if (!total) {
    draw_no_data(&b, &f);
    for (size_t r = 0; r < n_rows; r++) {
      sb_puts(&b, "<g class=\"series\" data-label=\"");
      sb_esc(&b, rows[r].label);
      sb_puts(&b, "\" data-points=\"0\"></g>\n");
    }
    sb_puts(&b, "</svg>\n");
    return sb_finish(&b);
  }
  if (xmn > 0)
    xmn = 0;
  tl_area a = {f.mt, f.H - f.mb, 0, f.W - f.ml - f.mr};
  a.rh = (a.y1 - a.y0) / (double)n_rows;
  axis ax;
  axis_init(&ax, xmn, xmx, 0, a.pw > 400 ? 7 : 4);
  ax.p0 = f.ml;
  ax.p1 = f.W - f.mr;
  timeline_rows(&b, &f, &a, rows, n_rows);
  timeline_axis(&b, &f, &a, &ax, c);
  timeline_spans(&b, &a, &ax, rows, n_rows);
  sb_puts(&b, "</svg>\n");
  return sb_finish(&b);
}

/* ---- exported for tests and the report --------------------------------- */

void svgplot_format_number(char *out, size_t cap, double v) {
  fmt_num(out, cap, v, 0);
}
