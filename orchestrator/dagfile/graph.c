/*
 * graph: the DAG as text for people, DOT for Graphviz, Mermaid for
 * Markdown. Tasks come in topological order everywhere, so the outputs
 * are stable from run to run.
 */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

#include "dag.h"

/* Task names are [A-Za-z0-9_-]+, but a stage may be any path. */
static void dot_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc('\\', out);
    if (*s == '\n')
      fputs("\\n", out);
    else
      fputc(*s, out);
  }
  fputc('"', out);
}

/* Mermaid labels are quoted; quotes and markup use HTML entities. */
static void mermaid_label(FILE *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '"':
      fputs("#quot;", out);
      break;
    case '<':
      fputs("#lt;", out);
      break;
    case '>':
      fputs("#gt;", out);
      break;
    case '\n':
      fputc(' ', out);
      break;
    default:
      fputc(*s, out);
    }
  }
}

/* What changes how a task is run beyond its edges: "branch" (it picks
 * which downstream tasks run) and a trigger rule other than all_success,
 * e.g. "branch, trigger one_failed"; "" for neither. Into buf. */
static const char *task_note(const spec_task *t, char *buf, size_t n) {
  const char *rule = t->trigger == SPEC_TRIGGER_ALL_SUCCESS
                         ? NULL
                         : spec_trigger_name(t->trigger);
  snprintf(buf, n, "%s%s%s%s", t->branch ? "branch" : "",
           t->branch && rule ? ", " : "", rule ? "trigger " : "",
           rule ? rule : "");
  return buf;
}

static void print_text(const spec *s, const size_t *order, FILE *out) {
  for (size_t k = 0; k < s->n_tasks; k++) {
    const spec_task *t = &s->tasks[order[k]];
    char note[96];
    fprintf(out, "%s (%s)", t->name, spec_task_kind(t));
    if (*task_note(t, note, sizeof note))
      fprintf(out, " [%s]", note);
    for (size_t j = 0; j < t->n_needs; j++)
      fprintf(out, "%s%s", j ? ", " : " <- ", s->tasks[t->needs[j]].name);
    fputc('\n', out);
  }
}

static void print_dot(const spec *s, const size_t *order, FILE *out) {
  fputs("digraph ", out);
  dot_string(out, s->dag ? s->dag : "dag");
  fputs(" {\n  rankdir=LR;\n  node [shape=box];\n", out);
  for (size_t k = 0; k < s->n_tasks; k++) {
    const spec_task *t = &s->tasks[order[k]];
    char note[96];
    task_note(t, note, sizeof note);
    char *label = xasprintf("%s\n(%s)%s%s", t->name, spec_task_kind(t),
                            *note ? "\n" : "", note);
    fputs("  ", out);
    dot_string(out, t->name);
    fputs(" [label=", out);
    dot_string(out, label);
    /* A branch task is a decision: drawn as flowcharts draw one. */
    fputs(t->branch ? ", shape=diamond];\n" : "];\n", out);
    free(label);
  }
  for (size_t k = 0; k < s->n_tasks; k++) {
    const spec_task *t = &s->tasks[order[k]];
    for (size_t j = 0; j < t->n_needs; j++) {
      fputs("  ", out);
      dot_string(out, s->tasks[t->needs[j]].name);
      fputs(" -> ", out);
      dot_string(out, t->name);
      fputs(";\n", out);
    }
  }
  fputs("}\n", out);
}

/* Node ids are t<index>: task names such as "end" or "graph" are Mermaid
 * keywords. */
static void print_mermaid(const spec *s, const size_t *order, FILE *out) {
  fputs("flowchart TD\n", out);
  for (size_t k = 0; k < s->n_tasks; k++) {
    const spec_task *t = &s->tasks[order[k]];
    char note[96];
    /* {...}: Mermaid's decision shape, for a branch task. */
    fprintf(out, "  t%zu%s\"", order[k], t->branch ? "{" : "[");
    mermaid_label(out, t->name);
    fputs(" (", out);
    mermaid_label(out, spec_task_kind(t));
    fputs(")", out);
    if (*task_note(t, note, sizeof note)) {
      fputs(" [", out);
      mermaid_label(out, note);
      fputs("]", out);
    }
    fputs(t->branch ? "\"}\n" : "\"]\n", out);
  }
  for (size_t k = 0; k < s->n_tasks; k++) {
    const spec_task *t = &s->tasks[order[k]];
    for (size_t j = 0; j < t->n_needs; j++)
      fprintf(out, "  t%zu --> t%zu\n", t->needs[j], order[k]);
  }
}

int graph_print(const spec *s, const char *format, FILE *out) {
  if (!format)
    format = "text";
  int fmt = strcmp(format, "text") == 0      ? 0
            : strcmp(format, "dot") == 0     ? 1
            : strcmp(format, "mermaid") == 0 ? 2
                                             : -1;
  if (fmt < 0)
    return DR_EINVAL;
  size_t *order = xmalloc((s->n_tasks ? s->n_tasks : 1) * sizeof(size_t));
  int rc = dag_toposort(s, order, NULL);
  if (rc == 0) {
    if (fmt == 0)
      print_text(s, order, out);
    else if (fmt == 1)
      print_dot(s, order, out);
    else
      print_mermaid(s, order, out);
  }
  free(order);
  return rc;
}
