/*
 * svgplot: the charts' structure (series, points, markers, marks, bars)
 * that the report's tests and tools count, the axes' ticks and number
 * format, escaping, "no data", and well-formed XML.
 */
#include "lib/svgplot.h"
#include "testlib.h"

#include <math.h>

static int count(const char *hay, const char *needle) {
  int n = 0;
  size_t k = strlen(needle);
  for (const char *p = hay; (p = strstr(p, needle)); p += k)
    n++;
  return n;
}

/* 1 if every element opened is closed in order (a small XML checker:
 * no comments, CDATA or processing instructions in our output). */
static int well_formed(const char *z) {
  char stack[64][32];
  int depth = 0;
  for (const char *p = z; (p = strchr(p, '<'));) {
    const char *e = strchr(p, '>');
    if (!e)
      return 0;
    int closing = p[1] == '/';
    int selfclose = e[-1] == '/';
    const char *name = p + 1 + closing;
    size_t k = strcspn(name, " />\n");
    if (k == 0 || k >= 32)
      return 0;
    if (closing) {
      if (depth == 0 || strncmp(stack[depth - 1], name, k) != 0 ||
          stack[depth - 1][k] != '\0')
        return 0;
      depth--;
    } else if (!selfclose) {
      if (depth == 64)
        return 0;
      memcpy(stack[depth], name, k);
      stack[depth][k] = '\0';
      depth++;
    }
    /* No raw '<' or '&' that is not an entity inside the tag. */
    for (const char *q = p + 1; q < e; q++)
      if (*q == '<')
        return 0;
    p = e + 1;
  }
  return depth == 0;
}

/* The data-points attribute of the series labelled label, or -1. */
static int points_of(const char *svg, const char *label) {
  char key[128];
  snprintf(key, sizeof key, "data-label=\"%s\" data-points=\"", label);
  const char *p = strstr(svg, key);
  return p ? atoi(p + strlen(key)) : -1;
}

static void test_numbers(void) {
  char z[64];
  static const struct {
    double v;
    const char *want;
  } cases[] = {{0, "0"},       {12, "12"},         {0.25, "0.25"},
               {1200, "1.2k"}, {3.4e6, "3.4M"},    {1234567, "1.23M"},
               {1e-4, "1e-4"}, {2.5e-5, "2.5e-5"}, {-1500, "-1.5k"},
               {2e9, "2G"},    {3.14159, "3.14"},  {0.001, "0.001"},
               {999.4, "999"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    svgplot_format_number(z, sizeof z, cases[i].v);
    CHECK_STR(z, cases[i].want);
  }
}

static void test_escape(void) {
  char *e = svgplot_escape("a<b & \"c\" 'd'>");
  CHECK_STR(e, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  free(e);
  e = svgplot_escape(NULL);
  CHECK_STR(e, "");
  free(e);
}

static void test_lines(void) {
  double x[100], y[100], sx[5], sy[5], ex[2] = {50, 99}, ey[2] = {2.5, 2.0};
  for (int i = 0; i < 100; i++) {
    x[i] = i;
    y[i] = 10.0 * exp(-i / 30.0) + 1;
  }
  y[40] = NAN; /* left out, not counted */
  for (int i = 0; i < 5; i++) {
    sx[i] = i * 20;
    sy[i] = 5 - i * 0.5;
  }
  svgplot_series s[3] = {
      {.label = "loss", .x = x, .y = y, .n = 100},
      {.label = "val_loss", .x = sx, .y = sy, .n = 5},
      {.label = "final <eval>", .x = ex, .y = ey, .n = 2, .markers_only = 1},
  };
  svgplot_mark marks[2] = {{30, "spike at step 30"}, {70, "spike at step 70"}};
  svgplot_chart c = {.title = "loss & \"val\"",
                     .xlabel = "step",
                     .ylabel = "loss (nats)",
                     .logy = 1,
                     .marks = marks,
                     .n_marks = 2,
                     .mark_legend = "loss-spike guard"};
  char *svg = svgplot_lines(&c, s, 3);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK(strncmp(svg, "<svg", 4) == 0);
  CHECK(strstr(svg, "class=\"chart\"") != NULL);
  CHECK(strstr(svg, "data-title=\"loss &amp; &quot;val&quot;\"") != NULL);
  CHECK(strstr(svg, "viewBox=\"0 0 640 320\"") != NULL);
  CHECK_INT(points_of(svg, "loss"), 99);
  CHECK_INT(points_of(svg, "val_loss"), 5);
  CHECK_INT(points_of(svg, "final &lt;eval&gt;"), 2);
  /* Markers: the 5-point and the markers-only series, not the long one. */
  CHECK_INT(count(svg, "<circle"), 5 + 2 + 1 /* legend */);
  CHECK_INT(count(svg, "<polyline"), 2);
  CHECK_INT(count(svg, "class=\"mark\""), 2);
  CHECK(strstr(svg, "spike at step 70") != NULL);
  CHECK(strstr(svg, ">loss-spike guard</text>") != NULL);
  CHECK(strstr(svg, "loss (nats) (log scale)") != NULL);
  CHECK(strstr(svg, ">step</text>") != NULL);
  /* Log y over 1..11: ticks at 1, 2, 5, 10. */
  CHECK(strstr(svg, "text-anchor=\"end\">2</text>") != NULL);
  CHECK(strstr(svg, "text-anchor=\"end\">10</text>") != NULL);
  /* Linear x over 0..99: ticks every 20 (1-2-5), to 100. */
  CHECK(strstr(svg, "text-anchor=\"middle\">40</text>") != NULL);
  CHECK(strstr(svg, "text-anchor=\"middle\">100</text>") != NULL);
  CHECK(strstr(svg, "text-anchor=\"middle\">30</text>") == NULL);
  CHECK(strstr(svg, "no data") == NULL);
  CHECK(well_formed(svg));
  free(svg);
}

static void test_log_axes(void) {
  /* An LR range test: lr 1e-6..1 (log x), loss; y <= 0 left out on the
   * log y axis. */
  double x[61], y[61];
  for (int i = 0; i <= 60; i++) {
    x[i] = pow(10, -6 + i / 10.0);
    y[i] = i == 10 ? 0 : 4 + sin(i / 5.0);
  }
  svgplot_series s = {.label = "loss", .x = x, .y = y, .n = 61};
  svgplot_chart c = {.title = "LR range test",
                     .xlabel = "learning rate",
                     .ylabel = "loss (nats)",
                     .logx = 1,
                     .logy = 1,
                     .width = 800,
                     .height = 400};
  char *svg = svgplot_lines(&c, &s, 1);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK_INT(points_of(svg, "loss"), 60);
  CHECK(strstr(svg, "viewBox=\"0 0 800 400\"") != NULL);
  /* A tick at every decade. */
  CHECK(strstr(svg, ">1e-6</text>") != NULL);
  CHECK(strstr(svg, ">1e-4</text>") != NULL);
  CHECK(strstr(svg, ">0.01</text>") != NULL);
  CHECK(strstr(svg, ">1</text>") != NULL);
  CHECK(strstr(svg, "learning rate (log scale)") != NULL);
  CHECK(well_formed(svg));
  free(svg);

  /* Throughput in the millions: k/M labels on a linear axis. */
  double bx[4] = {1, 2, 4, 8}, by[4] = {2.1e5, 4e5, 7.5e5, 1.0e6};
  svgplot_series t = {.label = "tokens/s", .x = bx, .y = by, .n = 4};
  svgplot_chart c2 = {
      .title = "throughput", .xlabel = "batch size", .ylabel = "tokens/s"};
  svg = svgplot_lines(&c2, &t, 1);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK(strstr(svg, ">400k</text>") != NULL);
  CHECK(strstr(svg, ">1M</text>") != NULL);
  CHECK_INT(count(svg, "<circle"), 4); /* markers; the legend is a line */
  free(svg);
}

/* A finder's plot: its marks labelled in view, not only on hover, and a
 * y range that leaves a divergence out instead of flattening the rest. */
static void test_labels_and_range(void) {
  double x[5] = {1, 2, 3, 4, 5}, y[5] = {8, 7, 6.5, 9, 284};
  svgplot_mark marks[2] = {{2, "suggested lr 2"}, {3, "minimum 3"}};
  svgplot_series s = {.label = "loss", .x = x, .y = y, .n = 5};
  svgplot_chart c = {.title = "range",
                     .marks = marks,
                     .n_marks = 2,
                     .mark_labels = 1,
                     .ymin = 6,
                     .ymax = 12};
  char *svg = svgplot_lines(&c, &s, 1);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK_INT(count(svg, "class=\"mark-label\""), 2);
  CHECK(strstr(svg, ">suggested lr 2</text>") != NULL);
  CHECK(strstr(svg, ">minimum 3</text>") != NULL);
  CHECK_INT(points_of(svg, "loss"), 4); /* 284 is out of range */
  CHECK(strstr(svg, ">250</text>") == NULL);
  CHECK(strstr(svg, ">200</text>") == NULL);
  CHECK(well_formed(svg));
  free(svg);
  /* Without them: hover titles only, every point. */
  c.mark_labels = 0;
  c.ymin = c.ymax = 0;
  svg = svgplot_lines(&c, &s, 1);
  CHECK_INT(count(svg, "class=\"mark-label\""), 0);
  CHECK_INT(points_of(svg, "loss"), 5);
  free(svg);
}

static void test_small_linear(void) {
  /* A flat learning rate near 1e-3: the axis's labels all read as
   * decimals, not "9.5e-4" next to "0.001". */
  double x[3] = {1, 2, 3}, y[3] = {1e-3, 1e-3, 1e-3};
  svgplot_series s = {.label = "lr", .x = x, .y = y, .n = 3};
  svgplot_chart c = {.title = "lr", .xlabel = "step", .ylabel = "lr"};
  char *svg = svgplot_lines(&c, &s, 1);
  CHECK(svg && strstr(svg, "e-4<") == NULL);
  CHECK(svg && strstr(svg, ">0.001</text>") != NULL);
  CHECK(svg && strstr(svg, ">0.00095</text>") != NULL);
  free(svg);
}

static void test_no_data(void) {
  double x[2] = {1, 2}, y[2] = {-1, 0};
  svgplot_series s = {.label = "loss", .x = x, .y = y, .n = 2};
  svgplot_chart c = {.title = "empty", .logy = 1};
  char *svg = svgplot_lines(&c, &s, 1);
  CHECK(svg && strstr(svg, "no data") != NULL);
  CHECK(svg && points_of(svg, "loss") == 0);
  CHECK(svg && well_formed(svg));
  free(svg);
  svg = svgplot_lines(&c, NULL, 0);
  CHECK(svg && strstr(svg, "no data") != NULL);
  free(svg);
  svg = svgplot_stacked_bars(&c, NULL, 0, NULL, 0);
  CHECK(svg && strstr(svg, "no data") != NULL);
  CHECK(svg && well_formed(svg));
  free(svg);
}

static void test_stacked(void) {
  double x[3] = {10, 20, 30};
  double fwd[3] = {0.1, 0.2, 0.15}, bwd[3] = {0.2, 0.4, NAN};
  svgplot_stack st[2] = {{"forward", fwd}, {"backward", bwd}};
  svgplot_chart c = {.title = "time per step",
                     .xlabel = "step",
                     .ylabel = "seconds per step (s)"};
  char *svg = svgplot_stacked_bars(&c, x, 3, st, 2);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK_INT(points_of(svg, "forward"), 3);
  CHECK_INT(points_of(svg, "backward"), 3);
  CHECK_INT(count(svg, "</rect>"), 6); /* one bar segment per stack and x */
  CHECK(strstr(svg, ">forward</text>") != NULL);
  CHECK(strstr(svg, "no data") == NULL);
  /* y from 0 to the tallest stack (0.6): ticks 0 .. 0.6 by 0.1 or 0.2. */
  CHECK(strstr(svg, "text-anchor=\"end\">0</text>") != NULL);
  CHECK(strstr(svg, "text-anchor=\"end\">0.6</text>") != NULL);
  CHECK(well_formed(svg));
  free(svg);
}

static void test_dense(void) {
  /* 100k points: all counted, drawn as a few per pixel column. */
  size_t n = 100000;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (size_t i = 0; i < n; i++) {
    x[i] = (double)i;
    y[i] = 3 + sin((double)i);
  }
  svgplot_series s = {.label = "loss", .x = x, .y = y, .n = n};
  svgplot_chart c = {.title = "dense", .xlabel = "step", .ylabel = "loss"};
  char *svg = svgplot_lines(&c, &s, 1);
  CHECK(svg != NULL);
  CHECK(svg && points_of(svg, "loss") == 100000);
  CHECK(svg && strlen(svg) < 200000);
  free(svg);
  free(x);
  free(y);
}

static void test_timeline(void) {
  /* A task that failed once and succeeded on retry, and one after it. */
  svgplot_span prep[2] = {{0.0, 0.013, "#d62728", "prep attempt 1: failed"},
                          {0.11, 0.12, "#2ca02c", "prep attempt 2: success"}};
  svgplot_span train[1] = {{0.12, 2.5, "#2ca02c", "train <attempt 1>"}};
  svgplot_row rows[3] = {
      {"prep", prep, 2}, {"train", train, 1}, {"cached_task", NULL, 0}};
  svgplot_key keys[2] = {{"success", "#2ca02c"}, {"failed", "\"><x"}};
  svgplot_chart c = {.title = "Timeline", .xlabel = "seconds since start (s)"};
  char *svg = svgplot_timeline(&c, rows, 3, keys, 2);
  CHECK(svg != NULL);
  if (!svg)
    return;
  CHECK_INT(points_of(svg, "prep"), 2);
  CHECK_INT(points_of(svg, "train"), 1);
  CHECK_INT(points_of(svg, "cached_task"), 0);
  CHECK_INT(count(svg, "class=\"span\""), 3);
  CHECK(strstr(svg, "train &lt;attempt 1&gt;") != NULL);
  CHECK(strstr(svg, "\"><x") == NULL); /* a colour cannot break out */
  CHECK(strstr(svg, ">failed</text>") != NULL);
  /* Rows fit: title 30 + legend 20 + 3 rows of 24 + axis 44. */
  CHECK(strstr(svg, "height=\"166\"") != NULL);
  CHECK(strstr(svg, "text-anchor=\"middle\">2.5</text>") != NULL);
  CHECK(well_formed(svg));
  free(svg);
  svg = svgplot_timeline(&c, rows + 2, 1, NULL, 0);
  CHECK(svg && strstr(svg, "no data") != NULL);
  free(svg);
}

int main(void) {
  test_timeline();
  test_numbers();
  test_escape();
  test_lines();
  test_log_axes();
  test_labels_and_range();
  test_no_data();
  test_small_linear();
  test_stacked();
  test_dense();
  TEST_DONE();
}
