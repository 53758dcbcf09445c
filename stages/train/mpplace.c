/* The ranks' placement of a model-parallel gang; see mpplace.h. */
#include "mpplace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODE_NAME 64 /* bytes of a node's name, its NUL included */

/* This rank's node name: DAGRUN_TEST_NODES's entry for rank, else the
 * host's name. 0, or -1 with err. */
static int node_name(int rank, char name[NODE_NAME], char *err, size_t errlen) {
  const char *list = getenv("DAGRUN_TEST_NODES");
  memset(name, 0, NODE_NAME);
  if (!list || !*list) {
    if (gethostname(name, NODE_NAME - 1) != 0) {
      snprintf(err, errlen, "placement: gethostname failed");
      return -1;
    }
    return 0;
  }
  const char *s = list;
  for (int i = 0; i < rank && s; i++)
    s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL;
  size_t n = s ? strcspn(s, ",") : 0;
  if (n == 0 || n >= NODE_NAME) {
    snprintf(err, errlen,
             "placement: DAGRUN_TEST_NODES \"%s\" has no name of 1-%d "
             "characters for rank %d",
             list, NODE_NAME - 1, rank);
    return -1;
  }
  memcpy(name, s, n);
  return 0;
}

/* node[q]: the index of rank q's node, the nodes numbered in the order
 * of their lowest rank; the count of nodes. */
static int number_nodes(const char *names, int N, int *node) {
  int nn = 0;
  for (int q = 0; q < N; q++) {
    node[q] = nn;
    for (int p = 0; p < q; p++)
      if (strcmp(names + (size_t)p * NODE_NAME,
                 names + (size_t)q * NODE_NAME) == 0) {
        node[q] = node[p];
        break;
      }
    if (node[q] == nn)
      nn++;
  }
  return nn;
}

/* Each node in words, "name: ranks a, b (positions i-j)", into line. */
static void describe(const char *names, const int *node, const int *at, int N,
                     int nn, int T, char *line, size_t linelen) {
  size_t len = (size_t)snprintf(line, linelen,
                                "placement: %d ranks on %d node%s, tensor "
                                "groups of %d",
                                N, nn, nn > 1 ? "s" : "", T);
  for (int k = 0; k < nn && len < linelen; k++) {
    int first = -1, last = -1, n = 0;
    for (int q = 0; q < N; q++)
      if (node[q] == k) {
        first = first < 0 ? q : first;
        last = q;
        n++;
      }
    len +=
        (size_t)snprintf(line + len, linelen - len,
                         "; %s: %d rank%s from %d to %d at positions "
                         "%d-%d",
                         names + (size_t)first * NODE_NAME, n, n > 1 ? "s" : "",
                         first, last, at[first], at[first] + n - 1);
  }
}

/* The refusal: the nodes whose counts T does not divide. */
static void refuse(const char *names, const int *node, int N, int nn, int T,
                   char *err, size_t errlen) {
  size_t len = (size_t)snprintf(
      err, errlen,
      "tensor_parallel %d: a tensor group would span two nodes (its "
      "all-reduces, four a block each step, over the network): give "
      "every node a multiple of %d ranks; ranks a node:",
      T, T);
  for (int k = 0; k < nn && len < errlen; k++) {
    int n = 0, first = -1;
    for (int q = 0; q < N; q++)
      if (node[q] == k) {
        n++;
        first = first < 0 ? q : first;
      }
    len += (size_t)snprintf(err + len, errlen - len, "%s %s %d", k ? "," : "",
                            names + (size_t)first * NODE_NAME, n);
  }
}

int mpplace_position(comm *c, int T, int *pos, char *line, size_t linelen,
                     char *err, size_t errlen) {
  int N = comm_size(c), me = comm_rank(c), rc = -1;
  char mine[NODE_NAME], why[256] = "";
  /* A rank without a name still takes part in the exchange (its name
   * empty), so that every rank fails alike rather than some waiting. */
  (void)node_name(me, mine, why, sizeof why);
  char *names = calloc((size_t)N, NODE_NAME);
  int *node = calloc((size_t)N, sizeof *node);
  int *at = calloc((size_t)N, sizeof *at);
  if (!names || !node || !at) {
    snprintf(err, errlen, "placement: out of memory");
    goto done;
  }
  if (comm_allgather_bytes(c, mine, names, NODE_NAME, err, errlen) != 0)
    goto done;
  for (int q = 0; q < N; q++)
    if (!names[(size_t)q * NODE_NAME]) {
      const char *list = getenv("DAGRUN_TEST_NODES");
      if (why[0])
        snprintf(err, errlen, "%s", why);
      else
        snprintf(err, errlen,
                 "placement: rank %d has no node name%s%s%s (a gang of %d)", q,
                 list ? " in DAGRUN_TEST_NODES \"" : "", list ? list : "",
                 list ? "\"" : "", N);
      goto done;
    }
  int nn = number_nodes(names, N, node), next = 0;
  for (int k = 0; k < nn; k++) {
    int n = 0;
    for (int q = 0; q < N; q++)
      if (node[q] == k) {
        at[q] = next++;
        n++;
      }
    if (n % T != 0) {
      refuse(names, node, N, nn, T, err, errlen);
      goto done;
    }
  }
  *pos = at[me];
  describe(names, node, at, N, nn, T, line, linelen);
  rc = 0;
done:
  free(names);
  free(node);
  free(at);
  return rc;
}
