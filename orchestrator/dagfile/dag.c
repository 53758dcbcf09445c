/*
 * dag: topological order (Kahn with a min-heap, so ties keep the written
 * order), cycles (Tarjan's strongly connected components over what Kahn
 * could not order, then one shortest cycle per component), and upstream
 * queries for template checks.
 */
#include "dag.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Downstream edges in compressed form: the tasks that need u are
 * down[off[u] .. off[u+1]). */
typedef struct csr {
  size_t *off, *down;
} csr;

static void csr_build(const spec *s, csr *g) {
  size_t n = s->n_tasks;
  g->off = xcalloc(n + 1, sizeof(size_t));
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < s->tasks[i].n_needs; j++)
      g->off[s->tasks[i].needs[j] + 1]++;
  for (size_t u = 0; u < n; u++)
    g->off[u + 1] += g->off[u];
  g->down = xmalloc((g->off[n] ? g->off[n] : 1) * sizeof(size_t));
  size_t *fill = xmalloc((n ? n : 1) * sizeof(size_t));
  memcpy(fill, g->off, n * sizeof(size_t));
  /* Tasks in index order, so each down list is in written order. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < s->tasks[i].n_needs; j++)
      g->down[fill[s->tasks[i].needs[j]]++] = i;
  free(fill);
}

static void csr_free(csr *g) {
  free(g->off);
  free(g->down);
}

/* A binary min-heap of task indices. */
typedef struct heap {
  size_t *v;
  size_t n;
} heap;

static void heap_push(heap *h, size_t x) {
  size_t i = h->n++;
  h->v[i] = x;
  while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
    size_t p = (i - 1) / 2, t = h->v[p];
    h->v[p] = h->v[i];
    h->v[i] = t;
    i = p;
  }
}

static size_t heap_pop(heap *h) {
  size_t top = h->v[0];
  h->v[0] = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->v[l] < h->v[m])
      m = l;
    if (r < h->n && h->v[r] < h->v[m])
      m = r;
    if (m == i)
      break;
    size_t t = h->v[m];
    h->v[m] = h->v[i];
    h->v[i] = t;
    i = m;
  }
  return top;
}

/* Kahn's algorithm; fills order[0..return) and returns how many tasks it
 * could order (n when there is no cycle). */
static size_t kahn(const spec *s, const csr *g, size_t *order) {
  size_t n = s->n_tasks, done = 0;
  size_t *indeg = xmalloc((n ? n : 1) * sizeof(size_t));
  heap h = {xmalloc((n ? n : 1) * sizeof(size_t)), 0};
  for (size_t i = 0; i < n; i++) {
    indeg[i] = s->tasks[i].n_needs;
    if (indeg[i] == 0)
      heap_push(&h, i);
  }
  while (h.n > 0) {
    size_t u = heap_pop(&h);
    order[done++] = u;
    for (size_t k = g->off[u]; k < g->off[u + 1]; k++)
      if (--indeg[g->down[k]] == 0)
        heap_push(&h, g->down[k]);
  }
  free(indeg);
  free(h.v);
  return done;
}

/* Tarjan's SCC, iterative, over the tasks with alive[i] set, following
 * `needs` edges. comp[i] gets a component id; returns the count. */
static size_t tarjan(const spec *s, const unsigned char *alive, size_t *comp) {
  size_t n = s->n_tasks, next_index = 0, n_comp = 0;
  size_t *index = xmalloc(n * sizeof(size_t));
  size_t *low = xmalloc(n * sizeof(size_t));
  unsigned char *on_stack = xcalloc(n, 1);
  size_t *stack = xmalloc(n * sizeof(size_t)), sp = 0;
  size_t *call = xmalloc(n * sizeof(size_t)); /* DFS path */
  size_t *edge = xmalloc(n * sizeof(size_t)); /* next edge per path node */
  for (size_t i = 0; i < n; i++)
    index[i] = SIZE_MAX;
  for (size_t root = 0; root < n; root++) {
    if (!alive[root] || index[root] != SIZE_MAX)
      continue;
    size_t depth = 0;
    call[depth] = root;
    edge[depth] = 0;
    index[root] = low[root] = next_index++;
    stack[sp++] = root;
    on_stack[root] = 1;
    while (depth != SIZE_MAX) {
      size_t v = call[depth];
      const spec_task *t = &s->tasks[v];
      if (edge[depth] < t->n_needs) {
        size_t w = t->needs[edge[depth]++];
        if (!alive[w])
          continue;
        if (index[w] == SIZE_MAX) {
          index[w] = low[w] = next_index++;
          stack[sp++] = w;
          on_stack[w] = 1;
          depth++;
          call[depth] = w;
          edge[depth] = 0;
        } else if (on_stack[w] && index[w] < low[v]) {
          low[v] = index[w];
        }
        continue;
      }
      if (low[v] == index[v]) {
        size_t w;
        do {
          w = stack[--sp];
          on_stack[w] = 0;
          comp[w] = n_comp;
        } while (w != v);
        n_comp++;
      }
      depth = depth == 0 ? SIZE_MAX : depth - 1;
      if (depth != SIZE_MAX && low[v] < low[call[depth]])
        low[call[depth]] = low[v];
    }
  }
  free(index);
  free(low);
  free(on_stack);
  free(stack);
  free(call);
  free(edge);
  return n_comp;
}

/* Longest cycle shown in full; longer ones show both ends. */
enum { CYCLE_SHOWN = 12 };

/* Reports one shortest cycle through the first-written task of each
 * component that holds a cycle. */
static void report_cycles(const spec *s, const csr *g,
                          const unsigned char *alive, diags *d) {
  size_t n = s->n_tasks;
  size_t *comp = xmalloc(n * sizeof(size_t));
  size_t n_comp = tarjan(s, alive, comp);
  size_t *first = xmalloc((n_comp ? n_comp : 1) * sizeof(size_t));
  size_t *size = xcalloc(n_comp ? n_comp : 1, sizeof(size_t));
  for (size_t c = 0; c < n_comp; c++)
    first[c] = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    if (!alive[i])
      continue;
    if (first[comp[i]] == SIZE_MAX)
      first[comp[i]] = i;
    size[comp[i]]++;
  }
  size_t *parent = xmalloc(n * sizeof(size_t));
  size_t *queue = xmalloc(n * sizeof(size_t));
  size_t *path = xmalloc((n + 1) * sizeof(size_t));
  for (size_t i = 0; i < n; i++)
    parent[i] = SIZE_MAX;
  /* Components in the order of their first task, so messages follow the
   * file. */
  for (size_t a = 0; a < n; a++) {
    if (!alive[a] || first[comp[a]] != a)
      continue;
    size_t c = comp[a];
    /* A component of one task is a cycle only if it needs itself. */
    if (size[c] == 1) {
      const spec_task *t = &s->tasks[a];
      for (size_t j = 0; j < t->n_needs; j++)
        if (t->needs[j] == a)
          diags_add(d, s->path, t->need_nodes[j]->line, t->need_nodes[j]->col,
                    "dependency cycle: %s -> %s (task '%s' needs itself)",
                    t->name, t->name, t->name);
      continue;
    }
    /* BFS downstream from a, inside the component, until an edge leads
     * back to a: the last task found is one that a needs. */
    size_t qh = 0, qt = 0, last = SIZE_MAX;
    queue[qt++] = a;
    parent[a] = a;
    while (qh < qt && last == SIZE_MAX) {
      size_t u = queue[qh++];
      for (size_t k = g->off[u]; k < g->off[u + 1]; k++) {
        size_t v = g->down[k];
        if (!alive[v] || comp[v] != c)
          continue;
        if (v == a) {
          last = u;
          break;
        }
        if (parent[v] == SIZE_MAX) {
          parent[v] = u;
          queue[qt++] = v;
        }
      }
    }
    size_t len = 0;
    for (size_t v = last; v != a; v = parent[v])
      path[len++] = v;
    path[len++] = a;
    /* path holds the cycle backwards: path[len-1] is a. A cycle through
     * thousands of tasks is shown by its ends. */
    sbuf b = {0};
    for (size_t k = 0, i = len; i-- > 0; k++) {
      if (len > CYCLE_SHOWN && k == CYCLE_SHOWN / 2) {
        size_t skip = len - CYCLE_SHOWN;
        sbuf_printf(&b, "... (%zu more) -> ", skip);
        i -= skip - 1;
        continue;
      }
      sbuf_printf(&b, "%s -> ", s->tasks[path[i]].name);
    }
    sbuf_puts(&b, s->tasks[a].name);
    /* The cycle closes at a's `needs` entry naming `last`. */
    const spec_task *t = &s->tasks[a];
    int line = t->node ? t->node->line : 0, col = t->node ? t->node->col : 0;
    for (size_t j = 0; j < t->n_needs; j++) {
      if (t->needs[j] == last) {
        line = t->need_nodes[j]->line;
        col = t->need_nodes[j]->col;
      }
    }
    diags_add(d, s->path, line, col,
              "dependency cycle: %s (each task needs the one before it)", b.s);
    sbuf_free(&b);
    for (size_t i = 0; i < qt; i++)
      parent[queue[i]] = SIZE_MAX;
  }
  free(parent);
  free(queue);
  free(path);
  free(first);
  free(size);
  free(comp);
}

int dag_toposort(const spec *s, size_t *order, diags *d) {
  size_t n = s->n_tasks;
  csr g;
  csr_build(s, &g);
  size_t *ord = order ? order : xmalloc((n ? n : 1) * sizeof(size_t));
  size_t done = kahn(s, &g, ord);
  int rc = 0;
  if (done < n) {
    unsigned char *alive = xmalloc(n);
    memset(alive, 1, n);
    for (size_t i = 0; i < done; i++)
      alive[ord[i]] = 0;
    if (d)
      report_cycles(s, &g, alive, d);
    free(alive);
    rc = DR_ECYCLE;
  }
  if (!order)
    free(ord);
  csr_free(&g);
  return rc;
}

/* ---- upstream queries ----------------------------------------------- */

/* Answers are remembered per (task, up) pair, and a search that meets a
 * task already answered for the same `up` stops there: checking one
 * reference per task in a chain of 100,000 tasks costs one step each. */
typedef struct memo {
  uint64_t *keys; /* key + 1; 0 = empty */
  unsigned char *vals;
  size_t n, cap;
} memo;

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int memo_get(const memo *m, uint64_t key, int *val) {
  if (!m->cap)
    return 0;
  for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == 0)
      return 0;
    if (m->keys[i] == key + 1) {
      *val = m->vals[i];
      return 1;
    }
  }
}

static void memo_put(memo *m, uint64_t key, int val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    uint64_t *nk = xcalloc(nc, sizeof(uint64_t));
    unsigned char *nv = xmalloc(nc);
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->keys[i])
        continue;
      size_t j = mix(m->keys[i] - 1) & (nc - 1);
      while (nk[j])
        j = (j + 1) & (nc - 1);
      nk[j] = m->keys[i];
      nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
  }
  size_t i = mix(key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key + 1)
    i = (i + 1) & (m->cap - 1);
  if (!m->keys[i])
    m->n++;
  m->keys[i] = key + 1;
  m->vals[i] = (unsigned char)val;
}

struct dag_reach {
  const spec *s;
  size_t *pos;    /* topological position of each task; NULL if cyclic */
  int pos_done;   /* pos computed (or found impossible) */
  uint32_t *seen; /* generation stamps for the search */
  uint32_t gen;
  size_t *stack;
  memo m;
};

dag_reach *dag_reach_create(const spec *s) {
  dag_reach *r = xcalloc(1, sizeof(dag_reach));
  r->s = s;
  return r;
}

void dag_reach_destroy(dag_reach *r) {
  if (!r)
    return;
  free(r->pos);
  free(r->seen);
  free(r->stack);
  free(r->m.keys);
  free(r->m.vals);
  free(r);
}

/* Topological positions prune the search: an upstream task always comes
 * earlier. Computed on the first search, not at create, so that a reach
 * used only for direct needs costs nothing. */
static void reach_prepare(dag_reach *r) {
  if (r->pos_done)
    return;
  r->pos_done = 1;
  size_t n = r->s->n_tasks;
  size_t *order = xmalloc((n ? n : 1) * sizeof(size_t));
  if (dag_toposort(r->s, order, NULL) == 0) {
    r->pos = xmalloc((n ? n : 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++)
      r->pos[order[i]] = i;
  }
  free(order);
  r->seen = xcalloc(n ? n : 1, sizeof(uint32_t));
  r->stack = xmalloc((n ? n : 1) * sizeof(size_t));
}

int dag_is_upstream(dag_reach *r, size_t task, size_t up) {
  const spec *s = r->s;
  if (task >= s->n_tasks || up >= s->n_tasks || task == up)
    return 0;
  const spec_task *t = &s->tasks[task];
  for (size_t j = 0; j < t->n_needs; j++)
    if (t->needs[j] == up)
      return 1;
  reach_prepare(r);
  if (r->pos && r->pos[up] >= r->pos[task])
    return 0;
  uint64_t n = s->n_tasks;
  int found;
  if (memo_get(&r->m, (uint64_t)task * n + up, &found))
    return found;
  if (++r->gen == 0) {
    memset(r->seen, 0, s->n_tasks * sizeof(uint32_t));
    r->gen = 1;
  }
  found = 0;
  size_t sp = 0;
  r->stack[sp++] = task;
  r->seen[task] = r->gen;
  while (sp > 0 && !found) {
    const spec_task *v = &s->tasks[r->stack[--sp]];
    for (size_t j = 0; j < v->n_needs; j++) {
      size_t w = v->needs[j];
      if (w == up) {
        found = 1;
        break;
      }
      if (r->seen[w] == r->gen)
        continue;
      r->seen[w] = r->gen;
      if (r->pos && r->pos[w] < r->pos[up])
        continue; /* everything above w comes before up */
      int known;
      if (memo_get(&r->m, (uint64_t)w * n + up, &known)) {
        if (known) {
          found = 1;
          break;
        }
        continue;
      }
      r->stack[sp++] = w;
    }
  }
  memo_put(&r->m, (uint64_t)task * n + up, found);
  return found;
}
