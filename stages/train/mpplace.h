/*
 * mpplace: where each rank of a model-parallel gang sits in its layout
 * (mploop.h's positions: position p is part p % K of replica p / K, a
 * tensor group T consecutive positions), chosen so that every tensor
 * group lies on one node: its all-reduces, four a block in each step,
 * stay off the network.
 *
 * The ranks' node names are all-gathered (gethostname). The positions
 * are dealt node by node, the nodes in the order of their lowest rank
 * and each node's ranks in order, so that rank 0 stays at position 0
 * (it gathers the model, validates and writes) and, on one node, rank r
 * is at position r. Where a node's rank count is not a multiple of T a
 * tensor group would span two nodes: refused, naming the nodes and
 * their counts, rather than warned: every block's all-reduces would
 * cross the network on every step (a run many times slower, and
 * silently so), and the fix (the ranks a node, or T) is the user's to
 * make once.
 *
 * DAGRUN_TEST_NODES, for tests only: a comma-separated list of node
 * names indexed by rank, standing for the hosts' names, so that one
 * machine can stand for several nodes.
 */
#ifndef DAGRUN_TRAIN_MPPLACE_H
#define DAGRUN_TRAIN_MPPLACE_H

#include <stddef.h>

#include "comm/comm.h"

/* This rank's position on the gang c for tensor groups of T ranks
 * (T = 1: any placement keeps them whole; the positions are dealt all
 * the same), and the placement in words into line (linelen bytes).
 * Collective; every rank gets the same answer. 0, or -1 with err (the
 * node names could not be exchanged, a bad DAGRUN_TEST_NODES, or the
 * refusal above). */
int mpplace_position(comm *c, int T, int *pos, char *line, size_t linelen,
                     char *err, size_t errlen);

#endif /* DAGRUN_TRAIN_MPPLACE_H */
